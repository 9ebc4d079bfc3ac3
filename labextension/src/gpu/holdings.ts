/**
 * "Your GPUs on this hub": every server and job of this user that holds GPUs,
 * against their quota, from the hub's GPU ledger (`GET /gpuhub/api/holdings`),
 * and a card per GPU-hour budget that applies to them (`./budgets.ts`).
 *
 * A section of the GPU sidebar. It polls slowly (the hub's answer is shared
 * by the server for a few seconds) and only while the sidebar is visible.
 * All text goes through `textContent`.
 */
import { Poll } from '@lumino/polling';

import { requestAPI } from '../api';
import { h } from '../dom';
import { BookingCard, IBookings } from './booking';
import { BudgetList, IBudget } from './budgets';

export interface IHolding {
  kind: 'server' | 'job';
  name: string;
  /** How the hub calls it: "server 'default'", "job 'train-x1'", "jobs of server 'b'". */
  label: string;
  gpus: number;
  /** A share of a GPU: what it counts as (0.5); null for whole GPUs. */
  share?: number | null;
  gpu_memory?: number | null;
  /** "8 GB of GPU 3 (T4), 0.5 GPU": the hub's words for what it holds. */
  text?: string;
  gpu_type: string;
  devices: number[];
  /** Claimed through DRA: the devices it was allocated, "GPU 3 (A100-SXM4-80GB) on a100-7". */
  device_names?: string[];
  since: number | null;
  /** Where it waits for its GPUs ("waiting in line"); null once it holds them. */
  waiting?: string | null;
  /** The hub's estimated start of a waiting holding; null once held or before the first. */
  estimate?: IEstimate | null;
  /** That estimate in the spawn page's words, written by the lab server (one home). */
  estimate_text?: string | null;
}

/** When a wait likely ends (docs/architecture.md, "When, not only where"): ISO-8601 instants. */
export interface IEstimate {
  /** The median. */
  likely: string;
  /** The 80th percentile. */
  by: string;
  /** From hard facts only; null when nothing bounds the wait. */
  latest: string | null;
  /** Why, in sentences. */
  because: string[];
}

export interface IHoldings {
  available: boolean;
  reason: string | null;
  quota: number | null;
  /** GPUs given (devices, pods bound to a node). */
  held: number;
  /** GPUs asked for by what waits for them (in line, in Kueue's queue): they count
   * against the quota, but are not held. */
  waiting?: number;
  holdings: IHolding[];
  /** The GPU-hour budgets that apply to this user; empty (or absent) when none does. */
  budgets?: IBudget[];
}

const POLL_MS = 15 * 1000;

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

/** "Server 'default'" / "Job 'train-1'" / "Jobs of server 'x'", as the hub says it. */
export function holderLabel(holding: IHolding): string {
  const label =
    holding.label || `${holding.kind} '${holding.name || 'default'}'`;
  return label.charAt(0).toUpperCase() + label.slice(1);
}

/** An amount of GPUs as the hub writes it: 2, 0.5, 0.33. */
function amount(n: number): string {
  return String(Number(n.toFixed(2)));
}

/**
 * One line of the summary, e.g. "You hold 3 of your 4 GPUs.", or with what
 * waits (never called held), "You hold 1 and wait for 1, 2 of your 4 GPUs."
 */
export function summary(data: IHoldings): string {
  if (!data.available) {
    return data.reason ?? 'The hub cannot say what you hold right now.';
  }
  const waiting = data.waiting ?? 0;
  if (waiting > 0) {
    const held = `You hold ${amount(data.held)} and wait for ${amount(waiting)}`;
    return data.quota === null
      ? `${held} GPU${waiting === 1 ? '' : 's'} on this hub.`
      : `${held}, ${amount(data.held + waiting)} of your ${plural(data.quota, 'GPU')}.`;
  }
  if (data.held === 0) {
    return data.quota === null
      ? 'You hold no GPUs on this hub.'
      : `You hold none of your ${plural(data.quota, 'GPU')}.`;
  }
  return data.quota === null
    ? `You hold ${plural(data.held, 'GPU')} on this hub.`
    : `You hold ${data.held} of your ${plural(data.quota, 'GPU')}.`;
}

/** A holding's key across polls: which estimate's reasons the reader left open. */
function holdingKey(holding: IHolding): string {
  return `${holding.kind}/${holding.name}`;
}

/**
 * A waiting holding's estimated start, in the hub's words, with its reasons
 * one keyboard stop away (a native `<details>`); null when there is none.
 */
export function estimateNode(
  holding: IHolding,
  open = false,
  onToggle?: (open: boolean) => void
): HTMLElement | null {
  const text = holding.waiting ? holding.estimate_text : null;
  if (!text) {
    return null;
  }
  const because = (holding.estimate?.because ?? []).filter(
    reason => typeof reason === 'string' && reason
  );
  if (!because.length) {
    return h('p', { className: 'gpuhub-Holdings-estimate' }, text);
  }
  const details = h(
    'details',
    { className: 'gpuhub-Holdings-estimate', open },
    h('summary', {}, text),
    h('ul', {}, ...because.map(reason => h('li', {}, reason)))
  );
  details.addEventListener('toggle', () => onToggle?.(details.open));
  return details;
}

export class HoldingsSection {
  readonly node: HTMLElement;

  /** `onData`: called with each answer, for what else in the sidebar follows it. */
  constructor(onData?: (data: IHoldings) => void) {
    this._onData = onData;
    this.node = h('section', {
      className: 'gpuhub-Holdings',
      'aria-label': 'Your GPUs on this hub'
    });
    const title = h(
      'h3',
      { className: 'gpuhub-Holdings-title' },
      'Your GPUs on this hub'
    );
    this._summary = h('p', {
      className: 'gpuhub-Holdings-summary',
      'aria-live': 'polite'
    });
    this._list = h('ul', { className: 'gpuhub-Holdings-list' });
    this.node.append(
      title,
      this._summary,
      this._budgets.node,
      this._list,
      this._booking.node
    );
    this._poll = new Poll({
      auto: true,
      factory: () => this._refresh(),
      frequency: { interval: POLL_MS, backoff: true, max: 5 * 60 * 1000 },
      name: 'gpuhub:holdings',
      standby: () => document.hidden || !this._active
    });
  }

  /** Poll while the sidebar shows this section; refresh at once when it appears. */
  setActive(active: boolean): void {
    const wasActive = this._active;
    this._active = active;
    // Before the poll's first tick (a panel restored open at start-up) the tick asks.
    if (active && !wasActive && this._poll.state.phase !== 'constructed') {
      void this._poll.refresh();
    }
  }

  dispose(): void {
    this._poll.dispose();
  }

  private async _refresh(): Promise<void> {
    // The next booking beside the holdings, asked in the same tick; its failure
    // is said in its card and does not hold the holdings back.
    const booking = requestAPI<IBookings>('bookings').then(
      data => this._booking.update(data),
      () =>
        this._booking.update({
          available: false,
          reason: 'Your bookings cannot be read right now.',
          book_url: null,
          bookings: []
        })
    );
    const data = await requestAPI<IHoldings>('holdings');
    this._render(data);
    await booking;
  }

  private _render(data: IHoldings): void {
    this._summary.textContent = summary(data);
    const rows = data.holdings.map(holding => {
      const type = holding.gpu_type ? ` ${holding.gpu_type}` : '';
      const named = holding.device_names ?? [];
      const devices = named.length
        ? `: ${named.join(', ')}`
        : holding.devices.length
          ? ` (GPU${holding.devices.length === 1 ? '' : 's'} ${holding.devices.join(', ')})`
          : '';
      return h(
        'li',
        { className: 'gpuhub-Holdings-item' },
        h('span', { className: 'gpuhub-Holdings-name' }, holderLabel(holding)),
        h(
          'span',
          { className: 'gpuhub-Holdings-detail' },
          (holding.share !== null && holding.share !== undefined && holding.text
            ? holding.text
            : `${holding.gpus} x${type}${devices}`) +
            (holding.waiting ? `, ${holding.waiting}` : '')
        ),
        estimateNode(holding, this._open.has(holdingKey(holding)), open => {
          if (open) {
            this._open.add(holdingKey(holding));
          } else {
            this._open.delete(holdingKey(holding));
          }
        })
      );
    });
    this._list.replaceChildren(...rows);
    this.node.classList.toggle('gpuhub-mod-empty', rows.length === 0);
    this._budgets.update(Array.isArray(data.budgets) ? data.budgets : []);
    this._onData?.(data);
  }

  private _active = false;
  /** Holdings whose estimate's reasons are open: kept open across polls. */
  private _open = new Set<string>();
  private _onData?: (data: IHoldings) => void;
  private _booking = new BookingCard();
  private _budgets = new BudgetList();
  private _list: HTMLElement;
  private _poll: Poll;
  private _summary: HTMLElement;
}
