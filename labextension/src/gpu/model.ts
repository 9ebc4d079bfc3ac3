/**
 * Polls `/gpuhub/api/metrics` and keeps a bounded time series per GPU.
 *
 * Polling uses `@lumino/polling`: it backs off after errors and goes to
 * standby when nobody can see the result (tab hidden, panel closed and no
 * status bar item). Only history newer than what we have is requested
 * (`?since=`), so each poll moves a few hundred bytes.
 */
import { IDisposable } from '@lumino/disposable';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { requestAPI } from '../api';
import { IGpu, IMetrics } from './types';

/** One GPU's recent values, aligned with `GpuMetricsModel.times`. */
/** Seconds between polls when only the status bar is showing figures. */
const BACKGROUND_INTERVAL = 5;

export interface ISeries {
  utilization: (number | null)[];
  memory_used: (number | null)[];
}

export namespace GpuMetricsModel {
  export interface IOptions {
    /** Seconds between polls (raised to the server's sampling interval). */
    interval: number;
    /** Seconds of history the charts show. */
    windowSeconds: number;
    /** True when nobody looks at the figures: polling pauses. */
    idle: () => boolean;
    /** True when only the status bar shows figures: poll at most every 5 s. */
    background?: () => boolean;
  }
}

export class GpuMetricsModel implements IDisposable {
  constructor(options: GpuMetricsModel.IOptions) {
    this._interval = options.interval;
    this._window = options.windowSeconds;
    this._background = options.background ?? (() => false);
    this._poll = new Poll({
      auto: true,
      factory: () => this._fetch(),
      frequency: { interval: this._pollMs(), backoff: true, max: 60 * 1000 },
      name: 'gpuhub:metrics',
      standby: () => document.hidden || options.idle()
    });
  }

  /** Emitted after every poll, successful or not. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The latest answer, or null before the first one. */
  get metrics(): IMetrics | null {
    return this._metrics;
  }

  /** A one-sentence reason the last poll failed, or null. */
  get error(): string | null {
    return this._error;
  }

  get gpus(): IGpu[] {
    return this._metrics?.gpus ?? [];
  }

  get windowSeconds(): number {
    return this._window;
  }

  /** Sample times (epoch seconds) of the kept history, oldest first. */
  get times(): number[] {
    return this._times;
  }

  series(uuid: string): ISeries {
    return this._series.get(uuid) ?? { utilization: [], memory_used: [] };
  }

  /** Change the poll interval (seconds) and the chart window. */
  configure(interval: number, windowSeconds: number): void {
    this._interval = interval;
    this._window = windowSeconds;
    this._applyFrequency();
  }

  /** Poll now (after an action such as shutting a kernel down). */
  refresh(): Promise<void> {
    return this._poll.refresh();
  }

  /**
   * Someone started (or stopped) looking: adjust the pace, and poll at once
   * when coming back from standby.
   */
  wake(): void {
    this._applyFrequency();
    if (this._poll.state.phase === 'standby') {
      void this._poll.refresh();
    }
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  dispose(): void {
    this._poll.dispose();
    Signal.clearData(this);
  }

  private _pollMs(): number {
    const serverMin = this._metrics?.interval ?? 0;
    const floor = this._background() ? BACKGROUND_INTERVAL : 0.25;
    return Math.max(this._interval, serverMin, floor) * 1000;
  }

  private _applyFrequency(): void {
    const interval = this._pollMs();
    if (this._poll.frequency.interval !== interval) {
      this._poll.frequency = { ...this._poll.frequency, interval };
    }
  }

  private async _fetch(): Promise<void> {
    const since = this._times.length
      ? `?since=${this._times[this._times.length - 1]}`
      : '';
    try {
      const metrics = await requestAPI<IMetrics>(`metrics${since}`);
      this._error = null;
      this._metrics = metrics;
      this._merge(metrics);
      this._applyFrequency();
    } catch (error) {
      this._error = (error as Error).message || String(error);
      this._changed.emit();
      throw error; // let the poll back off
    }
    this._changed.emit();
  }

  private _merge(metrics: IMetrics): void {
    const known = new Set(metrics.gpus.map(g => g.uuid));
    for (const uuid of Array.from(this._series.keys())) {
      if (!known.has(uuid)) {
        this._series.delete(uuid);
      }
    }
    for (const uuid of known) {
      if (!this._series.has(uuid)) {
        this._series.set(uuid, {
          utilization: this._times.map(() => null),
          memory_used: this._times.map(() => null)
        });
      }
    }
    const last = this._times.length ? this._times[this._times.length - 1] : 0;
    for (const entry of metrics.history) {
      if (entry.time <= last) {
        continue;
      }
      this._times.push(entry.time);
      const byUuid = new Map(entry.gpus.map(g => [g.uuid, g]));
      for (const [uuid, series] of this._series) {
        const value = byUuid.get(uuid);
        series.utilization.push(value?.utilization ?? null);
        series.memory_used.push(value?.memory_used ?? null);
      }
    }
    // Drop what has left the chart window.
    const newest = this._times.length ? this._times[this._times.length - 1] : 0;
    let drop = 0;
    while (
      drop < this._times.length &&
      this._times[drop] < newest - this._window
    ) {
      drop++;
    }
    if (drop > 0) {
      this._times.splice(0, drop);
      for (const series of this._series.values()) {
        series.utilization.splice(0, drop);
        series.memory_used.splice(0, drop);
      }
    }
  }

  private _background: () => boolean;
  private _changed = new Signal<this, void>(this);
  private _error: string | null = null;
  private _interval: number;
  private _metrics: IMetrics | null = null;
  private _poll: Poll;
  private _series = new Map<string, ISeries>();
  private _times: number[] = [];
  private _window: number;
}
