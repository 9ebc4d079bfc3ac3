/**
 * A stop this server is heading for (its GPU-hour budget's grace running out,
 * idle reclaim's warning, a share over its memory): the hub's holdings answer
 * gives the moment (`stops_at`) and why (`stops_why`). The lab counts down to
 * it in a notification and saves open documents with unsaved changes shortly
 * before, so that the stop loses nothing it could keep; what it could not save
 * is what the stopped dialog then names (`./stopped.ts`).
 *
 * It polls `GET /gpuhub/api/holdings` (shared by the server for a few
 * seconds): every 30 s, every 5 s once a budget nears its end or a stop is
 * due. Idle reclaim's warning has its own notification with "Keep my GPUs"
 * (`../gpu/reclaim.ts`); this one only saves for it.
 */
import { Notification } from '@jupyterlab/apputils';

import { requestAPI } from '../api';
import { duration } from '../gpu/reclaim';
import { hubServer } from './stopped';

/** What the hub says of this user's holdings, as far as a stop goes. */
export interface IStopHoldings {
  available?: boolean;
  holdings?: {
    kind: string;
    name: string;
    stops_at?: number | null;
    stops_why?: string | null;
  }[];
  budgets?: { state?: string }[];
}

/** When this server stops (epoch seconds) and why. */
export interface IStop {
  at: number;
  why: string;
}

/** Seconds before the stop at which open documents are saved. */
export const SAVE_LEAD_S = 30;
export const CALM_MS = 30_000;
export const NEAR_MS = 5_000;
/** Moments closer than this are one stop; a new stop (after a grant, say) is further. */
export const SAME_STOP_S = 5;

/** This server's coming stop in a holdings answer, or null when none is due. */
export function stopOf(data: IStopHoldings, server: string): IStop | null {
  const mine = (data.holdings ?? []).find(
    h => h.kind === 'server' && h.name === server
  );
  if (!mine || typeof mine.stops_at !== 'number') {
    return null;
  }
  return { at: mine.stops_at, why: mine.stops_why ?? '' };
}

/** Whether two moments the hub gave are one stop (they differ by clock reads only). */
export function sameStop(a: number | null, b: number): boolean {
  return a !== null && Math.abs(a - b) < SAME_STOP_S;
}

/** How soon to ask again: often while a stop is due or a budget nears its end. */
export function nextPollMs(
  data: IStopHoldings | null,
  stop: IStop | null
): number {
  const near = (data?.budgets ?? []).some(b => b.state && b.state !== 'ok');
  return stop || near ? NEAR_MS : CALM_MS;
}

/** Whether it is time to save: the stop is at most `SAVE_LEAD_S` away. */
export function saveDue(stop: IStop | null, nowS: number): boolean {
  return stop !== null && stop.at - nowS <= SAVE_LEAD_S;
}

/** The countdown's sentence; '' for idle reclaim, which has its own. */
export function countdownText(stop: IStop, nowS: number): string {
  const why =
    stop.why === 'budget'
      ? 'your GPU-hour budget is used up and its grace runs out'
      : stop.why === 'share'
        ? 'it uses more GPU memory than its share'
        : stop.why === 'booking'
          ? 'its GPUs are booked from then'
          : '';
  if (!why) {
    return '';
  }
  const left = duration(Math.max(0, stop.at - nowS));
  return `This server stops in ${left}: ${why}. Open notebooks with unsaved changes are saved ${SAVE_LEAD_S} s before; save anything else now.`;
}

/** An open document, as far as saving goes (JupyterLab's DocumentWidget). */
interface IDocumentLike {
  context?: {
    path: string;
    model: { dirty: boolean; readOnly?: boolean };
    save(): Promise<void>;
  };
}

/** The paths of open documents with unsaved changes. */
export function unsavedPaths(widgets: Iterable<unknown>): string[] {
  const paths = new Set<string>();
  for (const widget of widgets) {
    const context = (widget as IDocumentLike).context;
    if (context?.model?.dirty) {
      paths.add(context.path);
    }
  }
  return [...paths].sort();
}

/** Save every open document with unsaved changes; the paths saved. */
export async function saveOpen(widgets: Iterable<unknown>): Promise<string[]> {
  const saved = new Set<string>();
  const seen = new Set<string>();
  for (const widget of widgets) {
    const context = (widget as IDocumentLike).context;
    if (
      !context?.model?.dirty ||
      context.model.readOnly ||
      seen.has(context.path)
    ) {
      continue;
    }
    seen.add(context.path);
    try {
      await context.save();
      saved.add(context.path);
    } catch (error) {
      console.warn(
        `gpuhub: could not save ${context.path} before the stop`,
        error
      );
    }
  }
  return [...saved].sort();
}

/** Counts down to this server's stop and saves open documents before it. */
export class StopWatcher {
  /** `widgets`: the lab's open documents (`app.shell.widgets('main')`). */
  constructor(
    private readonly _widgets: () => Iterable<unknown>,
    private readonly _now: () => number = () => Date.now() / 1000
  ) {}

  /** The stop due, as last read (null: none). */
  get stop(): IStop | null {
    return this._stop;
  }

  /** What was saved for the stop. */
  get saved(): readonly string[] {
    return this._saved;
  }

  start(): void {
    if (hubServer()) {
      void this._poll();
    }
  }

  dispose(): void {
    window.clearTimeout(this._timer);
    window.clearInterval(this._ticker);
  }

  /** Read the holdings once and act on what they say. */
  async poll(): Promise<void> {
    const hub = hubServer();
    if (!hub) {
      return;
    }
    let data: IStopHoldings | null = null;
    try {
      data = await requestAPI<IStopHoldings>('holdings');
    } catch (error) {
      console.debug('gpuhub: no holdings for the stop watch', error);
    }
    if (data?.available) {
      this._data = data;
      this._set(stopOf(data, hub.server));
    }
  }

  /**
   * Save now if the stop is close enough: once per stop (the hub's moment for one stop
   * moves by milliseconds between answers), so that what the countdown asked the person
   * to save themselves stays their choice.
   */
  async saveIfDue(): Promise<void> {
    const stop = this._stop;
    if (
      !stop ||
      sameStop(this._savedFor, stop.at) ||
      !saveDue(stop, this._now())
    ) {
      return;
    }
    this._savedFor = stop.at;
    const saved = await saveOpen(this._widgets());
    this._saved = [...new Set([...this._saved, ...saved])].sort();
  }

  private async _poll(): Promise<void> {
    await this.poll();
    this._timer = window.setTimeout(
      () => void this._poll(),
      nextPollMs(this._data, this._stop)
    );
  }

  private _set(stop: IStop | null): void {
    this._stop = stop;
    window.clearInterval(this._ticker);
    this._show();
    if (stop) {
      this._ticker = window.setInterval(() => this._show(), 1000);
    }
  }

  /** The countdown, and the save once it is due. */
  private _show(): void {
    const stop = this._stop;
    const text = stop ? countdownText(stop, this._now()) : '';
    if (!text) {
      if (this._notification !== null) {
        Notification.dismiss(this._notification);
        this._notification = null;
      }
    } else if (this._notification === null) {
      this._notification = Notification.warning(text, { autoClose: false });
    } else {
      Notification.update({
        id: this._notification,
        message: text,
        type: 'warning',
        autoClose: false
      });
    }
    void this.saveIfDue();
  }

  private _data: IStopHoldings | null = null;
  private _notification: string | null = null;
  private _saved: string[] = [];
  private _savedFor: number | null = null;
  private _stop: IStop | null = null;
  private _ticker = 0;
  private _timer = 0;
}
