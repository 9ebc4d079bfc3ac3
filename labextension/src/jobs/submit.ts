/**
 * The "Run on cluster" dialog: what to run (training job, distributed
 * PyTorchJob/TFJob, pipeline step), the resources within this user's limits
 * (from `GET /gpuhub/api/jobs/options`, worded like the spawn form), and
 * papermill parameters.
 *
 * The server is the judge: the dialog only hints at ranges; on submit it
 * posts and, if refused, shows the server's sentence next to the field the
 * server names and stays open.
 */
import { Dialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { GpuhubAPIError, requestAPI } from '../api';
import { IHoldings, summary } from '../gpu/holdings';
import { JobsAPI } from './client';
import { h, uid } from '../dom';
import { parseParameterValue } from './params';
import { kindLabel } from './format';
import { IJobOptions, ISubmitBody, ISubmitReply, JobKind } from './types';

const CUSTOM_IMAGE = '__custom__';

/** Fields the server may name, in the order they appear. */
type FieldName =
  | 'kind'
  | 'workers'
  | 'image'
  | 'cpu'
  | 'memory'
  | 'gpu_type'
  | 'gpus'
  | 'parameters'
  | 'name';

/** The training kinds, offered under "Run as" in this order. */
const TRAINING_KINDS: JobKind[] = ['job', 'pytorchjob', 'tfjob'];

export namespace SubmitForm {
  export interface IOptions {
    /** Notebook path relative to the server root. */
    notebook: string;
    options: IJobOptions;
    /** Parameters found in the notebook's `parameters` cell, as written there. */
    suggested: Array<[string, string]>;
    /** Called just before posting, e.g. to save the notebook. */
    beforeSubmit: () => Promise<void>;
  }
}

/** The dialog body. `submit()` posts and reports success or shows errors. */
export class SubmitForm extends Widget {
  constructor(options: SubmitForm.IOptions) {
    super({
      node: h('form', { className: 'gpuhub-JobForm', novalidate: true })
    });
    this._opts = options;
    this.node.addEventListener('submit', event => event.preventDefault());
    this._build();
    if (lastChoices) {
      this._restore(lastChoices);
    }
    this._sync();
  }

  /** The server's answer once a submit succeeded. */
  get result(): ISubmitReply | null {
    return this._result;
  }

  get busy(): boolean {
    return this._busy;
  }

  /** The request body as the form stands. */
  body(): ISubmitBody {
    const kind = this._kind();
    const body: ISubmitBody = {
      notebook: this._opts.notebook,
      kind,
      parameters: this._parameters()
    };
    const image = this._image?.value;
    if (image === CUSTOM_IMAGE) {
      body.image = this._customImage!.value.trim();
    } else if (image) {
      body.image = image;
    }
    const cpu = this._cpu.value.trim();
    if (cpu) {
      // Numbers as numbers; anything else as typed, for the server to judge.
      body.cpu = /^\d+(\.\d+)?$/.test(cpu) ? Number(cpu) : cpu;
    }
    const memory = this._memory.value.trim();
    if (memory) {
      body.memory = memory;
    }
    const gpus = this._gpus.value.trim();
    if (gpus) {
      body.gpus = /^\d+$/.test(gpus) ? Number(gpus) : gpus;
    }
    if (this._gpuType && Number(gpus) > 0) {
      body.gpu_type = this._gpuType.value;
    }
    if (kind === 'pytorchjob' || kind === 'tfjob') {
      const workers = this._workers.value.trim();
      body.workers = /^\d+$/.test(workers) ? Number(workers) : workers;
    }
    const name = this._name.value.trim();
    if (name) {
      body.name = name;
    }
    return body;
  }

  /** Save the notebook, post, and return true when the server accepted. */
  async submit(): Promise<boolean> {
    if (this._busy) {
      return false;
    }
    this._busy = true;
    this._clearErrors();
    this._status.textContent = 'Saving the notebook…';
    this.node.setAttribute('aria-busy', 'true');
    try {
      await this._opts.beforeSubmit();
      this._status.textContent = 'Submitting…';
      const body = this.body();
      this._result = await JobsAPI.submit(body);
      lastChoices = body;
      return true;
    } catch (error) {
      this._showError(error);
      return false;
    } finally {
      this._busy = false;
      this._status.textContent = '';
      this.node.removeAttribute('aria-busy');
    }
  }

  // -- building ---------------------------------------------------------------------------
  private _build(): void {
    const { options, notebook } = this._opts;
    this._general = h('div', {
      className: 'gpuhub-JobForm-general',
      role: 'alert',
      hidden: true
    });
    this._status = h('div', {
      className: 'gpuhub-JobForm-status',
      role: 'status',
      'aria-live': 'polite'
    });
    this.node.append(
      h(
        'p',
        { className: 'gpuhub-JobForm-intro' },
        'Runs a copy of ',
        h('code', {}, notebook),
        ' from top to bottom with papermill. The notebook is saved first; ' +
          'the executed copy opens from the Jobs panel.'
      ),
      this._general
    );
    if (!options.available) {
      this._general.hidden = false;
      this._general.textContent =
        options.reason ?? 'Jobs are not available on this server.';
    }
    this.node.append(this._buildKind(), this._buildResources());
    this.node.append(this._buildParameters(), this._buildName(), this._status);
  }

  private _buildKind(): HTMLElement {
    const kindList = this._opts.options.kinds;
    const kinds = new Map(kindList.map(k => [k.kind, k]));
    const nameOf = (kind: JobKind): string => kindLabel(kind, kindList);
    const group = uid('gpuhub-kind');
    const mkRadio = (
      value: 'training' | 'pipeline',
      label: string,
      help: string
    ) => {
      const id = uid('gpuhub-kind-radio');
      const helpId = `${id}-help`;
      const input = h('input', {
        type: 'radio',
        name: group,
        id,
        value,
        'aria-describedby': helpId
      });
      input.addEventListener('change', () => this._sync());
      const help_ = h(
        'div',
        { className: 'gpuhub-JobForm-help', id: helpId },
        help
      );
      return {
        input,
        help: help_,
        node: h(
          'div',
          { className: 'gpuhub-JobForm-choice' },
          h('label', { for: id }, input, ' ', h('strong', {}, label)),
          help_
        )
      };
    };
    const training = mkRadio(
      'training',
      nameOf('job'),
      'The whole notebook as one run, on one node or distributed over workers.'
    );
    const pipeline = mkRadio(
      'pipeline',
      nameOf('pipeline'),
      'The notebook as a one-step Kubeflow pipeline; its run page links from the Jobs panel.'
    );
    this._training = training.input;
    this._pipeline = pipeline.input;

    // "Run as" inside the training choice.
    const modeId = uid('gpuhub-mode');
    this._mode = h('select', {
      id: modeId,
      'aria-describedby': `${modeId}-help`
    });
    // Unavailable kinds stay in the list, disabled; the server's reasons sit
    // behind a short "why" that keyboard and screen reader users can open.
    const unavailable: string[] = [];
    const reasons: string[] = [];
    for (const kind of TRAINING_KINDS) {
      const info = kinds.get(kind);
      const available = info?.available ?? false;
      // One node or several: the server's name for a distributed kind follows.
      const text =
        kind === 'job' ? 'Single node' : `Distributed: ${nameOf(kind)}`;
      this._mode.append(
        h(
          'option',
          { value: kind, disabled: !available },
          available ? text : `${text} (unavailable)`
        )
      );
      if (!available) {
        unavailable.push(nameOf(kind));
        reasons.push(
          info?.reason ?? `${nameOf(kind)} is not offered on this server.`
        );
      }
    }
    const why: HTMLElement | string = unavailable.length
      ? h(
          'details',
          { className: 'gpuhub-JobForm-why' },
          h(
            'summary',
            {},
            `${unavailable.join(' and ')} ${unavailable.length > 1 ? 'are' : 'is'} unavailable here; why?`
          ),
          ...reasons.map(reason => h('p', {}, reason))
        )
      : '';
    this._mode.addEventListener('change', () => this._sync());
    const workersId = uid('gpuhub-workers');
    this._workers = h('input', {
      id: workersId,
      type: 'text',
      inputmode: 'numeric',
      value: 2,
      'aria-describedby': `${workersId}-help`
    });
    this._workersRow = this._row(
      'workers',
      'Workers',
      this._workers,
      `Each worker gets the CPU, memory and GPUs below; up to ${this._opts.options.max_workers} workers.`
    );
    const modeRow = this._row('kind', 'Run as', this._mode, why);
    training.node.append(
      h(
        'div',
        { className: 'gpuhub-JobForm-nested' },
        modeRow,
        this._workersRow
      )
    );

    const pipelineInfo = kinds.get('pipeline');
    if (!pipelineInfo?.available) {
      this._pipeline.disabled = true;
      pipeline.help.textContent =
        pipelineInfo?.reason ?? 'Pipelines are not offered on this server.';
      pipeline.node.classList.add('gpuhub-mod-disabled');
    }
    const trainingAvailable = TRAINING_KINDS.some(
      kind => kinds.get(kind)?.available
    );
    if (!trainingAvailable) {
      this._training.disabled = true;
      training.node.classList.add('gpuhub-mod-disabled');
    }
    // Preselect the first available choice and mode.
    if (trainingAvailable || this._pipeline.disabled) {
      this._training.checked = true;
      const first = TRAINING_KINDS.find(kind => kinds.get(kind)?.available);
      if (first) {
        this._mode.value = first;
      }
    } else {
      this._pipeline.checked = true;
    }

    return h(
      'fieldset',
      { className: 'gpuhub-JobForm-section' },
      h('legend', {}, 'What to run'),
      training.node,
      pipeline.node
    );
  }

  private _buildResources(): HTMLElement {
    const o = this._opts.options;
    const section = h(
      'fieldset',
      { className: 'gpuhub-JobForm-section gpuhub-JobForm-grid' },
      h('legend', {}, 'Resources')
    );
    // Image
    const images = o.images ?? [];
    if (images.length || o.custom_images) {
      const id = uid('gpuhub-image');
      this._image = h('select', { id, 'aria-describedby': `${id}-help` });
      for (const image of images) {
        this._image.append(
          h('option', { value: image.key }, image.display_name)
        );
      }
      if (o.custom_images) {
        this._image.append(
          h('option', { value: CUSTOM_IMAGE }, 'Custom image…')
        );
      }
      this._image.addEventListener('change', () => this._sync());
      const described = images
        .filter(i => i.description)
        .map(i => ` ${i.display_name}: ${i.description}.`)
        .join('');
      section.append(
        this._row(
          'image',
          'Image',
          this._image,
          `The software environment the job runs in.${described}`,
          true
        )
      );
      if (o.custom_images) {
        const cid = uid('gpuhub-custom-image');
        this._customImage = h('input', {
          id: cid,
          type: 'text',
          spellcheck: 'false',
          autocomplete: 'off',
          placeholder: 'registry/name:tag',
          'aria-describedby': `${cid}-help`
        });
        this._customRow = this._row(
          null,
          'Custom image reference',
          this._customImage,
          'It must match what your admin allows.',
          true
        );
        section.append(this._customRow);
      }
    }
    // CPU and memory
    const cpuId = uid('gpuhub-cpu');
    this._cpu = h('input', {
      id: cpuId,
      type: 'text',
      inputmode: 'decimal',
      value: o.cpu?.default ?? '',
      'aria-describedby': `${cpuId}-help`
    });
    section.append(
      this._row(
        'cpu',
        'CPU cores',
        this._cpu,
        o.cpu ? `${o.cpu.min} to ${o.cpu.max} cores.` : ''
      )
    );
    const memId = uid('gpuhub-memory');
    this._memory = h('input', {
      id: memId,
      type: 'text',
      spellcheck: 'false',
      value: o.memory?.default ?? '',
      'aria-describedby': `${memId}-help`
    });
    section.append(
      this._row(
        'memory',
        'Memory',
        this._memory,
        o.memory
          ? `${o.memory.min} to ${o.memory.max}, written like 16G or 512Mi.`
          : ''
      )
    );
    // GPU type and count
    const types = o.gpu_types ?? [];
    const gpusId = uid('gpuhub-gpus');
    const maxGpus = this._maxGpus();
    this._gpus = h('input', {
      id: gpusId,
      type: 'text',
      inputmode: 'numeric',
      // The server's default, so the dialog, %submit and the API agree.
      value: Math.min(o.defaults?.gpus ?? 1, maxGpus),
      readonly: maxGpus === 0,
      'aria-describedby': `${gpusId}-help`
    });
    this._gpus.addEventListener('input', () => this._sync());
    this._gpusHelp = h('span');
    section.append(this._row('gpus', 'GPUs', this._gpus, this._gpusHelp));
    if (types.length) {
      const id = uid('gpuhub-gpu-type');
      this._gpuType = h('select', { id, 'aria-describedby': `${id}-help` });
      for (const t of types) {
        this._gpuType.append(
          h(
            'option',
            { value: t.key },
            t.mig ? `${t.display_name} (MIG slice)` : t.display_name
          )
        );
      }
      const preferred = o.local?.gpu_type;
      if (preferred && types.some(t => t.key === preferred)) {
        this._gpuType.value = preferred;
      }
      this._gpuType.addEventListener('change', () => this._sync());
      this._gpuTypeRow = this._row(
        'gpu_type',
        'GPU type',
        this._gpuType,
        '',
        true
      );
      section.append(this._gpuTypeRow);
    }
    section.append(this._quotaLine());
    return section;
  }

  /** "You hold 1 of your 4 GPUs." from the hub's ledger, filled in when it answers. */
  private _quotaLine(): HTMLElement {
    const line = h('p', {
      className: 'gpuhub-JobForm-quota',
      'aria-live': 'polite'
    });
    line.hidden = true;
    const kubernetes = this._opts.options.kubernetes;
    requestAPI<IHoldings>('holdings')
      .then(data => {
        if (!data.available || data.quota === null) {
          return;
        }
        line.textContent = `${summary(data)} ${
          kubernetes
            ? "This job's GPUs count toward your quota, with your servers'."
            : "A job here runs on this server's GPUs, which count already."
        }`;
        line.hidden = false;
      })
      .catch(() => undefined); // the quota is checked on submit anyway
    return line;
  }

  private _buildParameters(): HTMLElement {
    const helpId = uid('gpuhub-params-help');
    this._paramRows = h('div', {
      className: 'gpuhub-JobForm-params',
      role: 'list'
    });
    const add = h(
      'button',
      {
        type: 'button',
        className: 'jp-mod-styled jp-mod-reject gpuhub-JobForm-add'
      },
      'Add parameter'
    );
    add.addEventListener('click', () => this._addParameter('', '', true));
    const suggested = this._opts.suggested;
    const help =
      'Values replace the notebook\u2019s parameters cell (a cell tagged ' +
      '\u201cparameters\u201d). Numbers, true/false, null, lists and {objects} are read as JSON; anything else as text.' +
      (suggested.length ? ' Empty values keep the notebook\u2019s own.' : '');
    const error = h('div', {
      className: 'gpuhub-JobForm-error',
      id: uid('gpuhub-params-error'),
      role: 'alert',
      hidden: true
    });
    this._fieldErrors.set('parameters', error);
    const section = h(
      'fieldset',
      { className: 'gpuhub-JobForm-section', 'aria-describedby': helpId },
      h('legend', {}, 'Parameters'),
      h('div', { className: 'gpuhub-JobForm-help', id: helpId }, help),
      this._paramRows,
      error,
      add
    );
    for (const [key, value] of suggested) {
      this._addParameter(key, '', false, value);
    }
    return section;
  }

  private _buildName(): HTMLElement {
    const id = uid('gpuhub-name');
    const stem = this._opts.notebook
      .split('/')
      .pop()!
      .replace(/\.ipynb$/, '');
    this._name = h('input', {
      id,
      type: 'text',
      spellcheck: 'false',
      autocomplete: 'off',
      placeholder: defaultName(stem, this._opts.options.max_name_length),
      'aria-describedby': `${id}-help`
    });
    return this._row(
      'name',
      'Job name (optional)',
      this._name,
      'Lower-case letters, digits and \u2018-\u2019; the notebook\u2019s name when empty.'
    );
  }

  private _addParameter(
    key: string,
    value: string,
    focus: boolean,
    placeholder = ''
  ): void {
    const keyInput = h('input', {
      type: 'text',
      spellcheck: 'false',
      autocomplete: 'off',
      value: key,
      placeholder: 'name',
      'aria-label': 'Parameter name',
      className: 'gpuhub-JobForm-paramKey'
    });
    const valueInput = h('input', {
      type: 'text',
      spellcheck: 'false',
      autocomplete: 'off',
      value,
      placeholder: placeholder || 'value',
      'aria-label': key ? `Value of ${key}` : 'Parameter value',
      className: 'gpuhub-JobForm-paramValue'
    });
    const note = h('div', {
      className: 'gpuhub-JobForm-help gpuhub-JobForm-paramNote'
    });
    valueInput.addEventListener('input', () => {
      note.textContent = parseParameterValue(valueInput.value).note ?? '';
    });
    keyInput.addEventListener('input', () => {
      valueInput.setAttribute(
        'aria-label',
        keyInput.value ? `Value of ${keyInput.value}` : 'Parameter value'
      );
    });
    const remove = h(
      'button',
      {
        type: 'button',
        className: 'jp-mod-styled jp-mod-reject gpuhub-JobForm-remove',
        'aria-label': 'Remove parameter',
        title: 'Remove parameter'
      },
      '\u00d7'
    );
    const row = h(
      'div',
      { className: 'gpuhub-JobForm-param', role: 'listitem' },
      keyInput,
      h('span', { 'aria-hidden': 'true' }, '='),
      valueInput,
      remove,
      note
    );
    remove.addEventListener('click', () => row.remove());
    this._paramRows.append(row);
    if (focus) {
      keyInput.focus();
    }
  }

  /** A labelled field with its help line and an error line the server can fill. */
  private _row(
    field: FieldName | null,
    label: string,
    control: HTMLInputElement | HTMLSelectElement,
    help: string | HTMLElement,
    wide = false
  ): HTMLElement {
    const helpNode = h(
      'div',
      { className: 'gpuhub-JobForm-help', id: `${control.id}-help` },
      help
    );
    const row = h(
      'div',
      { className: `gpuhub-JobForm-row${wide ? ' gpuhub-mod-wide' : ''}` },
      h('label', { for: control.id }, label),
      control,
      helpNode
    );
    if (field) {
      const error = h('div', {
        className: 'gpuhub-JobForm-error',
        id: `${control.id}-error`,
        role: 'alert',
        hidden: true
      });
      row.append(error);
      this._fieldErrors.set(field, error);
      this._fieldControls.set(field, control);
      control.addEventListener('input', () => this._clearError(field));
    }
    return row;
  }

  /**
   * Start from what this user submitted last (this page session): the same
   * kind, image and resources, where the options still offer them.
   */
  private _restore(last: ISubmitBody): void {
    const selectable = (
      select: HTMLSelectElement | null,
      value: unknown
    ): boolean =>
      !!select &&
      Array.from(select.options).some(o => o.value === value && !o.disabled);
    if (last.kind === 'pipeline' && !this._pipeline.disabled) {
      this._pipeline.checked = true;
    } else if (last.kind !== 'pipeline' && selectable(this._mode, last.kind)) {
      this._training.checked = true;
      this._mode.value = last.kind;
    }
    if (last.workers !== undefined) {
      this._workers.value = String(last.workers);
    }
    if (selectable(this._image, last.image)) {
      this._image!.value = String(last.image);
    } else if (
      last.image &&
      this._customImage &&
      selectable(this._image, CUSTOM_IMAGE)
    ) {
      this._image!.value = CUSTOM_IMAGE;
      this._customImage.value = String(last.image);
    }
    for (const [input, value] of [
      [this._cpu, last.cpu],
      [this._memory, last.memory],
      [this._gpus, last.gpus]
    ] as const) {
      if (value !== undefined && !input.readOnly) {
        input.value = String(value);
      }
    }
    if (selectable(this._gpuType, last.gpu_type)) {
      this._gpuType!.value = String(last.gpu_type);
    }
  }

  // -- state ------------------------------------------------------------------------------
  private _kind(): JobKind {
    return this._pipeline.checked ? 'pipeline' : (this._mode.value as JobKind);
  }

  private _maxGpus(): number {
    const o = this._opts.options;
    const type = (o.gpu_types ?? []).find(t => t.key === this._gpuType?.value);
    let max = type ? type.max_gpus : (o.max_gpus ?? 0);
    if (o.local && this._kind() === 'job') {
      max = Math.min(max, o.local.gpus);
    }
    return max;
  }

  /** Show and hide what applies; refresh the hints. */
  private _sync(): void {
    const kind = this._kind();
    this._mode.disabled = this._pipeline.checked;
    this._workersRow.hidden = !(kind === 'pytorchjob' || kind === 'tfjob');
    if (this._customRow) {
      this._customRow.hidden = this._image?.value !== CUSTOM_IMAGE;
    }
    const gpus = Number(this._gpus.value);
    if (this._gpuTypeRow) {
      this._gpuTypeRow.hidden = !(gpus > 0);
    }
    const max = this._maxGpus();
    const o = this._opts.options;
    let help: string;
    if (max === 0) {
      help =
        o.local && kind === 'job' && (o.gpu_types ?? []).length === 0
          ? 'This server has no GPU, so jobs here run on CPU.'
          : o.local && kind === 'job' && o.local.gpus === 0
            ? 'This server has no GPU, so jobs here run on CPU.'
            : 'Your limits allow no GPU, so the job runs on CPU.';
    } else {
      help = `0 for a CPU-only job; up to ${max} for you${kind === 'pytorchjob' || kind === 'tfjob' ? ' per worker' : ''}.`;
      if (gpus > max) {
        help += ` ${gpus} is more than that; the server will refuse it.`;
      }
    }
    this._gpusHelp.textContent = help;
  }

  private _parameters(): Record<string, unknown> {
    const result: Record<string, unknown> = {};
    for (const row of Array.from(this._paramRows.children)) {
      const key = (
        row.querySelector('.gpuhub-JobForm-paramKey') as HTMLInputElement
      ).value.trim();
      const raw = (
        row.querySelector('.gpuhub-JobForm-paramValue') as HTMLInputElement
      ).value;
      if (
        !key ||
        (raw.trim() === '' && this._opts.suggested.some(([k]) => k === key))
      ) {
        continue; // an empty suggested value keeps the notebook's own
      }
      result[key] = parseParameterValue(raw).value;
    }
    return result;
  }

  // -- errors -----------------------------------------------------------------------------
  private _showError(error: unknown): void {
    const message =
      error instanceof Error
        ? error.message
        : `The job could not be submitted: ${String(error)}`;
    const field = error instanceof GpuhubAPIError ? error.field : null;
    const target = field
      ? this._fieldErrors.get(field as FieldName)
      : undefined;
    if (target && !target.parentElement?.closest('[hidden]')) {
      target.textContent = message;
      target.hidden = false;
      const control = this._fieldControls.get(field as FieldName);
      if (control) {
        control.setAttribute('aria-invalid', 'true');
        control.setAttribute(
          'aria-describedby',
          `${control.id}-help ${target.id}`
        );
        control.focus();
      } else {
        target.scrollIntoView({ block: 'nearest' });
      }
      return;
    }
    this._general.textContent = message;
    this._general.hidden = false;
    this._general.scrollIntoView({ block: 'nearest' });
  }

  private _clearError(field: FieldName): void {
    const error = this._fieldErrors.get(field);
    if (error) {
      error.hidden = true;
      error.textContent = '';
    }
    const control = this._fieldControls.get(field);
    if (control) {
      control.removeAttribute('aria-invalid');
      control.setAttribute('aria-describedby', `${control.id}-help`);
    }
  }

  private _clearErrors(): void {
    for (const field of this._fieldErrors.keys()) {
      this._clearError(field);
    }
    if (this._opts.options.available) {
      this._general.hidden = true;
      this._general.textContent = '';
    }
  }

  private _busy = false;
  private _cpu!: HTMLInputElement;
  private _customImage: HTMLInputElement | null = null;
  private _customRow: HTMLElement | null = null;
  private _fieldControls = new Map<FieldName, HTMLElement>();
  private _fieldErrors = new Map<FieldName, HTMLElement>();
  private _general!: HTMLElement;
  private _gpuType: HTMLSelectElement | null = null;
  private _gpuTypeRow: HTMLElement | null = null;
  private _gpus!: HTMLInputElement;
  private _gpusHelp!: HTMLElement;
  private _image: HTMLSelectElement | null = null;
  private _memory!: HTMLInputElement;
  private _mode!: HTMLSelectElement;
  private _name!: HTMLInputElement;
  private _opts: SubmitForm.IOptions;
  private _paramRows!: HTMLElement;
  private _pipeline!: HTMLInputElement;
  private _result: ISubmitReply | null = null;
  private _status!: HTMLElement;
  private _training!: HTMLInputElement;
  private _workers!: HTMLInputElement;
  private _workersRow!: HTMLElement;
}

/** What was submitted last in this page session: the next dialog starts there. */
let lastChoices: ISubmitBody | null = null;

/**
 * The same default the server uses ("Train ResNet (v2)" -> "train-resnet-v2",
 * `gpuhub.jobs.model.default_name`), cut at the server's longest name.
 */
function defaultName(stem: string, maxLength: number): string {
  const slug = stem
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, maxLength)
    .replace(/-+$/, '');
  return slug || 'notebook';
}

/**
 * A dialog whose Submit button posts first and closes only when the server
 * accepted; a refusal leaves it open with the message in place.
 */
class SubmitDialog extends Dialog<void> {
  constructor(
    private _form: SubmitForm,
    title: string
  ) {
    super({
      title,
      body: _form,
      buttons: [
        Dialog.cancelButton(),
        Dialog.okButton({ label: 'Submit', ariaLabel: 'Submit job' })
      ],
      defaultButton: 1,
      focusNodeSelector: 'input[type=radio]:checked',
      hasClose: true
    });
    this.addClass('gpuhub-JobDialog');
  }

  resolve(index?: number): void {
    const chosen = index ?? 1;
    if (chosen !== 1) {
      super.resolve(index);
      return;
    }
    if (this._form.busy) {
      return;
    }
    const submitButton = this.node.querySelector<HTMLButtonElement>(
      '.jp-Dialog-footer .jp-mod-accept'
    );
    if (submitButton) {
      submitButton.disabled = true;
    }
    void this._form.submit().then(accepted => {
      if (submitButton) {
        submitButton.disabled = false;
      }
      if (accepted) {
        super.resolve(index);
      }
    });
  }
}

/** Open the dialog; resolves with the server's answer, or null if cancelled. */
export async function showSubmitDialog(
  options: SubmitForm.IOptions
): Promise<ISubmitReply | null> {
  const form = new SubmitForm(options);
  const name = options.notebook.split('/').pop();
  const dialog = new SubmitDialog(
    form,
    options.options.kubernetes ? `Run ${name} on the cluster` : `Run ${name} as a job`
  );
  const answer = await dialog.launch();
  return answer.button.accept ? form.result : null;
}
