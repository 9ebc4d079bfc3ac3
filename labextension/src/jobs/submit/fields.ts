/**
 * The submit dialog's fields: builds the inputs (what to run, resources,
 * papermill parameters, name), each with its label, help line and an error
 * line the server can fill. What the inputs mean is `./state.ts`'s job.
 */
import { h, uid } from '../../dom';
import { kindLabel } from '../format';
import { parseParameterValue } from '../params';
import { IJobOptions, IKindOption, JobKind } from '../types';

/** The image select's entry for a reference typed by the user. */
export const CUSTOM_IMAGE = '__custom__';

/** Fields the server may name, in the order they appear. */
export type FieldName =
  | 'kind'
  | 'workers'
  | 'runtime'
  | 'image'
  | 'cpu'
  | 'memory'
  | 'gpu_type'
  | 'gpus'
  | 'parameters'
  | 'name';

/**
 * What the server says of `kind` (distributed, runtime, where it runs...),
 * if it offers it: the lab knows the kinds only from there.
 */
export function kindInfo(
  o: IJobOptions,
  kind: JobKind
): IKindOption | undefined {
  return o.kinds.find(k => k.kind === kind);
}

/** Whether `kind` runs this server's notebook on several workers. */
export function isDistributed(o: IJobOptions, kind: JobKind): boolean {
  return kindInfo(o, kind)?.distributed ?? false;
}

/** Whether `kind` runs on this server, within its GPUs (`o.local`). */
export function runsHere(o: IJobOptions, kind: JobKind): boolean {
  return !!o.local && (kindInfo(o, kind)?.here ?? false);
}

/**
 * The most GPUs one request may ask for: the chosen type's limit (else the
 * largest), and no more than this server has when a job runs here.
 */
export function maxGpus(
  o: IJobOptions,
  kind: JobKind,
  gpuType: string | undefined
): number {
  const type = (o.gpu_types ?? []).find(t => t.key === gpuType);
  let max = type ? type.max_gpus : (o.max_gpus ?? 0);
  if (o.local && runsHere(o, kind)) {
    max = Math.min(max, o.local.gpus);
  }
  return max;
}

export namespace SubmitFields {
  export interface IOptions {
    /** Notebook path relative to the server root. */
    notebook: string;
    options: IJobOptions;
    /** Parameters found in the notebook's `parameters` cell, as written there. */
    suggested: Array<[string, string]>;
  }

  export interface IEvents {
    /** A choice that changes what applies (kind, image, GPU type or count). */
    changed: () => void;
    /** The person edited a field the server may have refused. */
    edited: (field: FieldName) => void;
  }
}

/** The inputs of the dialog, built once from the options; `nodes` go into the form. */
export class SubmitFields {
  constructor(
    options: SubmitFields.IOptions,
    private _events: SubmitFields.IEvents
  ) {
    this._opts = options;
    const { notebook } = options;
    this.general = h('div', {
      className: 'gpuhub-JobForm-general',
      role: 'alert',
      hidden: true
    });
    if (!options.options.available) {
      this.general.hidden = false;
      this.general.textContent =
        options.options.reason ?? 'Jobs are not available on this server.';
    }
    this.status = h('div', {
      className: 'gpuhub-JobForm-status',
      role: 'status',
      'aria-live': 'polite'
    });
    this.quota = h('p', {
      className: 'gpuhub-JobForm-quota',
      'aria-live': 'polite',
      hidden: true
    });
    this.budget = h('p', {
      className: 'gpuhub-JobForm-budget',
      'aria-live': 'polite',
      hidden: true
    });
    this.nodes = [
      h(
        'p',
        { className: 'gpuhub-JobForm-intro' },
        'Runs a copy of ',
        h('code', {}, notebook),
        ' from top to bottom with papermill. The notebook is saved first; ' +
          'the executed copy opens from the Jobs panel.'
      ),
      this.general,
      this._buildKind(),
      this._buildResources(),
      this._buildParameters(),
      this._buildName(),
      this.status
    ];
  }

  /** The form's content, in order. */
  readonly nodes: HTMLElement[];
  /** A refusal that names no field shown here, or why jobs are unavailable. */
  readonly general: HTMLElement;
  /** "Saving the notebook…", "Submitting…". */
  readonly status: HTMLElement;
  /** "You hold 1 of your 4 GPUs.", hidden until the hub answers. */
  readonly quota: HTMLElement;
  /** What the job would cost per hour of the GPU-hour budgets, hidden where none applies. */
  readonly budget: HTMLElement;
  /** Each field's error line and control, by the name the server uses. */
  readonly errors = new Map<FieldName, HTMLElement>();
  readonly controls = new Map<FieldName, HTMLElement>();

  /** The choice of the kinds gpuhub runs, whose kind `mode` picks. */
  training!: HTMLInputElement;
  /**
   * A choice of its own for each kind whose runs live elsewhere (a pipeline
   * step's, in Kubeflow Pipelines), by kind, in the server's order.
   */
  readonly elsewhere = new Map<JobKind, HTMLInputElement>();
  mode!: HTMLSelectElement;
  workers!: HTMLInputElement;
  workersRow!: HTMLElement;
  runtime!: HTMLSelectElement;
  runtimeRow!: HTMLElement;
  image: HTMLSelectElement | null = null;
  customImage: HTMLInputElement | null = null;
  customRow: HTMLElement | null = null;
  cpu!: HTMLInputElement;
  memory!: HTMLInputElement;
  gpus!: HTMLInputElement;
  gpusHelp!: HTMLElement;
  gpuType: HTMLSelectElement | null = null;
  gpuTypeRow: HTMLElement | null = null;
  /** Why the chosen kind cannot have the chosen type, when it cannot. */
  gpuTypeHelp: HTMLElement = h('span');
  paramRows!: HTMLElement;
  name!: HTMLInputElement;

  /** The kind the choices name: an elsewhere kind's, else `mode`'s. */
  kind(): JobKind {
    for (const [kind, input] of this.elsewhere) {
      if (input.checked) {
        return kind;
      }
    }
    return this.mode.value;
  }

  private _buildKind(): HTMLElement {
    const kindList = this._opts.options.kinds;
    const nameOf = (kind: JobKind): string => kindLabel(kind, kindList);
    // Only the kinds the admin offers are listed (the server's `kinds`, in
    // its order): those gpuhub runs under one choice, "Run as" picking one,
    // and each whose runs live elsewhere as a choice of its own.
    const ours = kindList.filter(k => !k.runs_in);
    const apart = kindList.filter(k => k.runs_in);
    const single = ours.filter(k => !k.distributed);
    const group = uid('gpuhub-kind');
    const mkRadio = (value: string, label: string, help: string) => {
      const id = uid('gpuhub-kind-radio');
      const helpId = `${id}-help`;
      const input = h('input', {
        type: 'radio',
        name: group,
        id,
        value,
        'aria-describedby': helpId
      });
      input.addEventListener('change', () => this._events.changed());
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
      single.length ? nameOf(single[0].kind) : 'Training job',
      'The whole notebook as one run, on one node or distributed over workers.'
    );
    this.training = training.input;
    const others = apart.map(info => {
      const radio = mkRadio(info.kind, nameOf(info.kind), info.description);
      this.elsewhere.set(info.kind, radio.input);
      if (!info.available) {
        radio.input.disabled = true;
        radio.help.textContent =
          info.reason ??
          `${nameOf(info.kind)}s are not offered on this server.`;
        radio.node.classList.add('gpuhub-mod-disabled');
      }
      return radio;
    });

    // "Run as" inside the training choice.
    const modeId = uid('gpuhub-mode');
    this.mode = h('select', {
      id: modeId,
      'aria-describedby': `${modeId}-help`
    });
    // Unavailable kinds stay in the list, disabled; the server's reasons sit
    // behind a short "why" that keyboard and screen reader users can open.
    const unavailable: string[] = [];
    const reasons: string[] = [];
    for (const info of ours) {
      const { kind, available } = info;
      // One node or several: the server's name for a distributed kind follows.
      const text = info.distributed
        ? `Distributed: ${nameOf(kind)}`
        : single.length > 1
          ? `Single node: ${nameOf(kind)}`
          : 'Single node';
      this.mode.append(
        h(
          'option',
          { value: kind, disabled: !available },
          available ? text : `${text} (unavailable)`
        )
      );
      if (!available) {
        unavailable.push(nameOf(kind));
        reasons.push(
          info.reason ?? `${nameOf(kind)} is not offered on this server.`
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
    this.mode.addEventListener('change', () => this._events.changed());
    const workersId = uid('gpuhub-workers');
    this.workers = h('input', {
      id: workersId,
      type: 'text',
      inputmode: 'numeric',
      value: 2,
      'aria-describedby': `${workersId}-help`
    });
    // The workers multiply the job's GPU-hours per hour (the budget line).
    this.workers.addEventListener('input', () => this._events.changed());
    this.workersRow = this._row(
      'workers',
      'Workers',
      this.workers,
      `Each worker gets the CPU, memory and GPUs below; up to ${this._opts.options.max_workers} workers.`
    );
    const runtimeId = uid('gpuhub-runtime');
    this.runtime = h('select', {
      id: runtimeId,
      'aria-describedby': `${runtimeId}-help`
    });
    const runtimes = this._opts.options.runtimes ?? [];
    for (const name of runtimes) {
      this.runtime.append(h('option', { value: name }, name));
    }
    const preferred = this._opts.options.default_runtime;
    if (preferred && runtimes.includes(preferred)) {
      this.runtime.value = preferred;
    }
    this.runtime.addEventListener('change', () =>
      this._events.edited('runtime')
    );
    const runners = ours
      .filter(k => k.takes_runtime)
      .map(k => nameOf(k.kind))
      .join(' or ');
    this.runtimeRow = this._row(
      'runtime',
      'Runtime',
      this.runtime,
      runtimes.length
        ? `The Kubeflow training runtime the ${runners} runs through, as your admin offers them.`
        : 'No training runtime is offered here; ask your admin.'
    );
    const modeRow = this._row('kind', 'Run as', this.mode, why);
    training.node.append(
      h(
        'div',
        { className: 'gpuhub-JobForm-nested' },
        modeRow,
        this.workersRow,
        this.runtimeRow
      )
    );

    const first = ours.find(k => k.available);
    if (!first) {
      this.training.disabled = true;
      training.node.classList.add('gpuhub-mod-disabled');
    }
    // Preselect the first available choice and mode.
    const other = others.find(radio => !radio.input.disabled);
    if (first || !other) {
      this.training.checked = true;
      if (first) {
        this.mode.value = first.kind;
      }
    } else {
      other.input.checked = true;
    }

    return h(
      'fieldset',
      { className: 'gpuhub-JobForm-section' },
      h('legend', {}, 'What to run'),
      training.node,
      ...others.map(radio => radio.node)
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
      this.image = h('select', { id, 'aria-describedby': `${id}-help` });
      for (const image of images) {
        this.image.append(
          h('option', { value: image.key }, image.display_name)
        );
      }
      if (o.custom_images) {
        this.image.append(
          h('option', { value: CUSTOM_IMAGE }, 'Custom image…')
        );
      }
      this.image.addEventListener('change', () => this._events.changed());
      const described = images
        .filter(i => i.description)
        .map(i => ` ${i.display_name}: ${i.description}.`)
        .join('');
      section.append(
        this._row(
          'image',
          'Image',
          this.image,
          `The software environment the job runs in.${described}`,
          true
        )
      );
      if (o.custom_images) {
        const cid = uid('gpuhub-custom-image');
        this.customImage = h('input', {
          id: cid,
          type: 'text',
          spellcheck: 'false',
          autocomplete: 'off',
          placeholder: 'registry/name:tag',
          'aria-describedby': `${cid}-help`
        });
        this.customRow = this._row(
          null,
          'Custom image reference',
          this.customImage,
          'It must match what your admin allows.',
          true
        );
        section.append(this.customRow);
      }
    }
    // CPU and memory
    const cpuId = uid('gpuhub-cpu');
    this.cpu = h('input', {
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
        this.cpu,
        o.cpu ? `${o.cpu.min} to ${o.cpu.max} cores.` : ''
      )
    );
    const memId = uid('gpuhub-memory');
    this.memory = h('input', {
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
        this.memory,
        o.memory
          ? `${o.memory.min} to ${o.memory.max}, written like 16G or 512Mi.`
          : ''
      )
    );
    // GPU type and count
    const types = o.gpu_types ?? [];
    const gpusId = uid('gpuhub-gpus');
    const max = maxGpus(o, this.kind(), undefined);
    this.gpus = h('input', {
      id: gpusId,
      type: 'text',
      inputmode: 'numeric',
      // The server's default, so the dialog, %submit and the API agree.
      value: Math.min(o.defaults?.gpus ?? 1, max),
      readonly: max === 0,
      'aria-describedby': `${gpusId}-help`
    });
    this.gpus.addEventListener('input', () => this._events.changed());
    this.gpusHelp = h('span');
    section.append(this._row('gpus', 'GPUs', this.gpus, this.gpusHelp));
    if (types.length) {
      const id = uid('gpuhub-gpu-type');
      this.gpuType = h('select', { id, 'aria-describedby': `${id}-help` });
      for (const t of types) {
        this.gpuType.append(
          h(
            'option',
            { value: t.key },
            t.mig ? `${t.display_name} (MIG slice)` : t.display_name
          )
        );
      }
      const preferred = o.local?.gpu_type;
      if (preferred && types.some(t => t.key === preferred)) {
        this.gpuType.value = preferred;
      }
      this.gpuType.addEventListener('change', () => this._events.changed());
      this.gpuTypeRow = this._row(
        'gpu_type',
        'GPU type',
        this.gpuType,
        this.gpuTypeHelp,
        true
      );
      section.append(this.gpuTypeRow);
    }
    section.append(this.quota, this.budget);
    return section;
  }

  private _buildParameters(): HTMLElement {
    const helpId = uid('gpuhub-params-help');
    this.paramRows = h('div', {
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
    this.errors.set('parameters', error);
    const section = h(
      'fieldset',
      { className: 'gpuhub-JobForm-section', 'aria-describedby': helpId },
      h('legend', {}, 'Parameters'),
      h('div', { className: 'gpuhub-JobForm-help', id: helpId }, help),
      this.paramRows,
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
    this.name = h('input', {
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
      this.name,
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
    this.paramRows.append(row);
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
      this.errors.set(field, error);
      this.controls.set(field, control);
      control.addEventListener('input', () => this._events.edited(field));
    }
    return row;
  }

  private _opts: SubmitFields.IOptions;
}

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
