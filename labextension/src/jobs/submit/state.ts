/**
 * The submit dialog's state: what the fields say (the request body), what
 * applies as they change (rows shown, the GPU hint), the server's refusals
 * shown next to the field they name, the quota line, and the choices the
 * next dialog starts from.
 */
import { GpuhubAPIError, IProblem, requestAPI } from '../../api';
import { IBudget, costText } from '../../gpu/budgets';
import { IHoldings, summary } from '../../gpu/holdings';
import { parseParameterValue } from '../params';
import { IGpuTypeOption, IJobOptions, ISubmitBody, JobKind } from '../types';
import {
  CUSTOM_IMAGE,
  FieldName,
  isDistributed,
  kindInfo,
  maxGpus,
  runsHere,
  SubmitFields
} from './fields';

const UNITS: Record<string, number> = {
  '': 1,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60
};

/** Bytes of a memory quantity as the server writes it ("8G", "512Mi"); NaN otherwise. */
export function memoryBytes(quantity: string): number {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([kMGTPE]i?)?\s*$/.exec(quantity);
  const unit = match ? UNITS[match[2] ?? ''] : undefined;
  return match && unit !== undefined ? Number(match[1]) * unit : NaN;
}

/**
 * The GPUs a request counts as, as the hub counts them (a share counts its
 * fraction: its memory of the device's, or its units of the device's
 * replicas), times its workers; null when the GPU field is not a number yet.
 */
export function gpuAmount(
  gpus: number,
  workers: number,
  type: IGpuTypeOption | undefined
): number | null {
  if (!Number.isFinite(gpus) || gpus < 0 || !Number.isFinite(workers)) {
    return null;
  }
  if (gpus === 0) {
    return 0;
  }
  const sharing = type?.sharing;
  let each = gpus;
  if (sharing?.kind === 'memory') {
    // One device's memory share: the server gives its default (the dialog asks none).
    const part = memoryBytes(sharing.default) / memoryBytes(sharing.memory);
    each = Number.isFinite(part) ? part : gpus;
  } else if (sharing?.kind === 'time' && sharing.replicas > 0) {
    each = gpus / sharing.replicas;
  }
  return each * Math.max(1, workers);
}

/** What was submitted last in this page session: the next dialog starts there. */
let lastChoices: ISubmitBody | null = null;

export class FormState {
  constructor(
    private _fields: SubmitFields,
    private _opts: SubmitFields.IOptions
  ) {}

  /** The choices the last accepted submit made, if any (this page session). */
  static get last(): ISubmitBody | null {
    return lastChoices;
  }

  /** Remember an accepted submit's choices for the next dialog. */
  static remember(body: ISubmitBody): void {
    lastChoices = body;
  }

  kind(): JobKind {
    return this._fields.kind();
  }

  maxGpus(): number {
    return maxGpus(
      this._opts.options,
      this.kind(),
      this._fields.gpuType?.value
    );
  }

  /** The request body as the form stands. */
  body(): ISubmitBody {
    const f = this._fields;
    const kind = this.kind();
    const body: ISubmitBody = {
      notebook: this._opts.notebook,
      kind,
      parameters: this.parameters()
    };
    const image = f.image?.value;
    if (image === CUSTOM_IMAGE) {
      body.image = f.customImage!.value.trim();
    } else if (image) {
      body.image = image;
    }
    const cpu = f.cpu.value.trim();
    if (cpu) {
      // Numbers as numbers; anything else as typed, for the server to judge.
      body.cpu = /^\d+(\.\d+)?$/.test(cpu) ? Number(cpu) : cpu;
    }
    const memory = f.memory.value.trim();
    if (memory) {
      body.memory = memory;
    }
    const gpus = f.gpus.value.trim();
    if (gpus) {
      body.gpus = /^\d+$/.test(gpus) ? Number(gpus) : gpus;
    }
    if (f.gpuType && Number(gpus) > 0) {
      body.gpu_type = f.gpuType.value;
    }
    const info = kindInfo(this._opts.options, kind);
    if (info?.distributed) {
      const workers = f.workers.value.trim();
      body.workers = /^\d+$/.test(workers) ? Number(workers) : workers;
    }
    if (info?.takes_runtime && f.runtime.value) {
      body.runtime = f.runtime.value;
    }
    const name = f.name.value.trim();
    if (name) {
      body.name = name;
    }
    return body;
  }

  parameters(): Record<string, unknown> {
    const f = this._fields;
    const result: Record<string, unknown> = {};
    for (const row of Array.from(f.paramRows.children)) {
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

  /**
   * Start from what this user submitted last (this page session): the same
   * kind, image and resources, where the options still offer them.
   */
  restore(last: ISubmitBody): void {
    const f = this._fields;
    const selectable = (
      select: HTMLSelectElement | null,
      value: unknown
    ): boolean =>
      !!select &&
      Array.from(select.options).some(o => o.value === value && !o.disabled);
    const apart = f.elsewhere.get(last.kind);
    if (apart) {
      if (!apart.disabled) {
        apart.checked = true;
      }
    } else if (selectable(f.mode, last.kind)) {
      f.training.checked = true;
      f.mode.value = last.kind;
    }
    if (last.workers !== undefined) {
      f.workers.value = String(last.workers);
    }
    if (selectable(f.image, last.image)) {
      f.image!.value = String(last.image);
    } else if (
      last.image &&
      f.customImage &&
      selectable(f.image, CUSTOM_IMAGE)
    ) {
      f.image!.value = CUSTOM_IMAGE;
      f.customImage.value = String(last.image);
    }
    // Never more GPUs than the quota leaves now (a server may have started since).
    const left = this._opts.options.quota?.left;
    const gpus =
      left !== undefined && typeof last.gpus === 'number'
        ? Math.min(last.gpus, left)
        : last.gpus;
    for (const [input, value] of [
      [f.cpu, last.cpu],
      [f.memory, last.memory],
      [f.gpus, gpus]
    ] as const) {
      if (value !== undefined && !input.readOnly) {
        input.value = String(value);
      }
    }
    if (selectable(f.gpuType, last.gpu_type)) {
      f.gpuType!.value = String(last.gpu_type);
    }
  }

  /** Show and hide what applies; refresh the hints. */
  sync(): void {
    const f = this._fields;
    const kind = this.kind();
    const info = kindInfo(this._opts.options, kind);
    f.mode.disabled = !f.training.checked;
    f.workersRow.hidden = !info?.distributed;
    f.runtimeRow.hidden = !info?.takes_runtime;
    if (f.customRow) {
      f.customRow.hidden = f.image?.value !== CUSTOM_IMAGE;
    }
    const gpus = Number(f.gpus.value);
    const o = this._opts.options;
    if (f.gpuTypeRow) {
      f.gpuTypeRow.hidden = !(gpus > 0);
    }
    // A kind whose pods cannot claim GPUs through DRA says so by such a type.
    const type = (o.gpu_types ?? []).find(t => t.key === f.gpuType?.value);
    f.gpuTypeHelp.textContent =
      type?.dra && info?.no_claims
        ? `A ${info.label} cannot have ${type.display_name} GPUs: ${info.no_claims}.`
        : '';
    const max = this.maxGpus();
    const quota = o.quota ?? null;
    const perWorker = info?.distributed ? ' per worker' : '';
    let help: string;
    if (max === 0) {
      help =
        o.local &&
        runsHere(o, kind) &&
        ((o.gpu_types ?? []).length === 0 || o.local.gpus === 0)
          ? 'This server has no GPU, so jobs here run on CPU.'
          : 'Your limits allow no GPU, so the job runs on CPU.';
    } else if (quota?.note) {
      // The quota, which servers share, leaves none: the server's sentence says why.
      help = quota.note;
      if (gpus > 0) {
        help += ` ${gpus} is more than your quota leaves; the server will refuse it.`;
      }
    } else {
      const most = quota ? Math.min(max, quota.left) : max;
      help = `0 for a CPU-only job; up to ${most} for you${perWorker}`;
      help += most < max ? ', what your GPU quota leaves.' : '.';
      if (gpus > most) {
        help += ` ${gpus} is more than that; the server will refuse it.`;
      }
    }
    f.gpusHelp.textContent = help;
    this._syncBudget();
  }

  /**
   * What the job would cost per hour of each GPU-hour budget that applies;
   * hidden when none does. A job on this server's GPUs costs nothing more:
   * the server's GPUs count already.
   */
  private _syncBudget(): void {
    const f = this._fields;
    const o = this._opts.options;
    const kind = this.kind();
    const gpus = f.gpus.value.trim() === '' ? 0 : Number(f.gpus.value);
    let rate: number | null = null; // null: on this server's GPUs, counted already
    if (o.kubernetes || !runsHere(o, kind) || gpus === 0) {
      const workers = isDistributed(o, kind)
        ? Number(f.workers.value.trim() || '1')
        : 1;
      const type = (o.gpu_types ?? []).find(t => t.key === f.gpuType?.value);
      rate = gpuAmount(gpus, workers, type);
      if (rate === null) {
        f.budget.hidden = true; // the GPU field says what is wrong with it
        return;
      }
    }
    const text = costText(rate, this._budgets);
    f.budget.textContent = text;
    f.budget.hidden = !text;
    f.budget.classList.toggle(
      'gpuhub-mod-over',
      this._budgets.some(b => b.state === 'over') && rate !== 0
    );
  }

  /** "You hold 1 of your 4 GPUs." from the hub's ledger, shown when it answers. */
  loadQuota(): void {
    const line = this._fields.quota;
    requestAPI<IHoldings>('holdings')
      .then(data => {
        this._budgets = Array.isArray(data.budgets) ? data.budgets : [];
        this._syncBudget();
        if (!data.available || data.quota === null) {
          return;
        }
        line.textContent = `${summary(data)} ${quotaNote(this._opts.options)}`;
        line.hidden = false;
      })
      .catch(() => undefined); // the quota is checked on submit anyway
  }

  private _budgets: IBudget[] = [];

  /**
   * Everything the server refused, each sentence under the field it names
   * (those naming no field shown here at the top); the first in the
   * dialog's order is scrolled into view and focused.
   */
  showError(error: unknown): void {
    const f = this._fields;
    const problems: IProblem[] =
      error instanceof GpuhubAPIError
        ? error.errors
        : [
            {
              field: null,
              message:
                error instanceof Error
                  ? error.message
                  : `The job could not be submitted: ${String(error)}`
            }
          ];
    const shown: HTMLElement[] = [];
    const general: string[] = [];
    for (const { field, message } of problems) {
      const target = field ? f.errors.get(field as FieldName) : undefined;
      if (!target || target.parentElement?.closest('[hidden]')) {
        general.push(message);
        continue;
      }
      target.textContent = target.hidden
        ? message
        : `${target.textContent} ${message}`;
      target.hidden = false;
      const control = f.controls.get(field as FieldName);
      if (control) {
        control.setAttribute('aria-invalid', 'true');
        control.setAttribute(
          'aria-describedby',
          `${control.id}-help ${target.id}`
        );
      }
      shown.push(control ?? target);
    }
    if (general.length) {
      f.general.textContent = general.join(' ');
      f.general.hidden = false;
      shown.push(f.general);
    }
    const first = shown.sort((a, b) =>
      a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING ? -1 : 1
    )[0];
    if (first) {
      first.scrollIntoView({ block: 'center' });
      if (first !== f.general) {
        first.focus({ preventScroll: true });
      }
    }
  }

  /** The field was edited: its error, if any, goes. */
  clearError(field: FieldName): void {
    const f = this._fields;
    const error = f.errors.get(field);
    if (error) {
      error.hidden = true;
      error.textContent = '';
    }
    const control = f.controls.get(field);
    if (control) {
      control.removeAttribute('aria-invalid');
      control.setAttribute('aria-describedby', `${control.id}-help`);
    }
  }

  /** Before a new submit: every error goes (the reason jobs are unavailable stays). */
  clearErrors(): void {
    const f = this._fields;
    for (const field of f.errors.keys()) {
      this.clearError(field);
    }
    if (this._opts.options.available) {
      f.general.hidden = true;
      f.general.textContent = '';
    }
  }
}

/**
 * Whose GPUs a job counts against, after the quota's summary: on a cluster its
 * own; here, this server's, which count already, unless it has none.
 */
export function quotaNote(o: IJobOptions): string {
  if (o.kubernetes) {
    return "This job's GPUs count toward your quota, with your servers'.";
  }
  if (o.local && o.local.gpus > 0) {
    return "A job here runs on this server's GPUs, which count already.";
  }
  return 'A job here runs on this server, which has no GPU, so it holds none.';
}
