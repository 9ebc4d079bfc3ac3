/**
 * This tab's GPU figures: one model, shared by the sidebar panel and the
 * status bar item, that keeps a bounded time series per GPU.
 *
 * The figures come pushed over one WebSocket per tab,
 * `{base_url}gpuhub/api/metrics/stream` (docs/architecture.md, "GPU charts
 * pushed"): its first message is the `GET /gpuhub/api/metrics` body with its
 * history, then one message per sample without `history`. A socket that
 * closes is opened again with backoff; where sockets keep failing (a proxy
 * that refuses WebSockets), the model polls the GET endpoint instead
 * (`@lumino/polling`, backing off after errors, asking only for history newer
 * than what it has) and tries a socket again now and then.
 *
 * Nobody looking (tab hidden, panel hidden and no status bar item showing)
 * for a couple of seconds: the socket is closed, so the server stops sampling
 * for us, and polling stands by. Someone looking again (`wake()`): it opens again.
 *
 * At 10 samples a second, listeners hear `changed` at most once per animation
 * frame, however many messages arrived in it.
 */
import { ServerConnection } from '@jupyterlab/services';
import { IDisposable } from '@lumino/disposable';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { requestAPI, serverSettings, websocketURL } from '../api';
import { IGpu, IHistoryEntry, IMetrics } from './types';

/** Seconds between polls when only the status bar is showing figures. */
const BACKGROUND_INTERVAL = 5;
/** The stream's path below gpuhub's API root. */
export const STREAM_PATH = 'metrics/stream';

/** One GPU's recent values, aligned with `GpuMetricsModel.times`. */
export interface ISeries {
  utilization: (number | null)[];
  memory_used: (number | null)[];
}

/** Where the figures come from now: pushed over the socket, or polled. */
export type Transport = 'stream' | 'polling';

export namespace GpuMetricsModel {
  export interface IOptions {
    /** Seconds between polls when polling (raised to the server's sampling interval). */
    interval: number;
    /** Seconds of history the charts show. */
    windowSeconds: number;
    /** True when nobody looks at the figures: the socket closes, polling pauses. */
    idle: () => boolean;
    /** True when only the status bar shows figures: poll at most every 5 s. */
    background?: () => boolean;
    /** Where the server is and how to authenticate (default: this page's). */
    serverSettings?: ServerConnection.ISettings;
    /** Sockets in a row that close before their first message, before polling takes over. */
    maxSocketFailures?: number;
    /** The first wait (ms) before opening a socket again; doubled after each failure. */
    reconnectMs?: number;
    /** How long (ms) to poll before trying a socket again. */
    socketRetryMs?: number;
    /**
     * How long (ms) nobody must look before the socket closes: a glance at
     * another tab, or JupyterLab laying out its shell at start-up, keeps it.
     */
    closeDelayMs?: number;
  }
}

/** A sample message (no `history`) as one history entry. */
function sampleEntry(metrics: IMetrics): IHistoryEntry[] {
  if (!metrics.available || typeof metrics.time !== 'number') {
    return [];
  }
  return [
    {
      time: metrics.time,
      gpus: metrics.gpus.map(g => ({
        uuid: g.uuid,
        utilization: g.utilization,
        memory_used: g.memory_used,
        temperature: g.temperature,
        power: g.power
      }))
    }
  ];
}

/** Run `callback` at the next animation frame (a timer where the page draws none). */
function nextFrame(callback: () => void): () => void {
  if (typeof requestAnimationFrame === 'function' && !document.hidden) {
    const id = requestAnimationFrame(callback);
    return () => cancelAnimationFrame(id);
  }
  const id = setTimeout(callback, 0);
  return () => clearTimeout(id);
}

export class GpuMetricsModel implements IDisposable {
  constructor(options: GpuMetricsModel.IOptions) {
    this._interval = options.interval;
    this._window = options.windowSeconds;
    this._idle = options.idle;
    this._background = options.background ?? (() => false);
    this._settings = options.serverSettings ?? serverSettings();
    this._maxFailures = Math.max(1, options.maxSocketFailures ?? 3);
    this._reconnectMs = options.reconnectMs ?? 1000;
    this._socketRetryMs = options.socketRetryMs ?? 5 * 60 * 1000;
    this._closeDelayMs = options.closeDelayMs ?? 2000;
    this._poll = new Poll({
      auto: true,
      factory: () => this._fetch(),
      frequency: { interval: this._pollMs(), backoff: true, max: 60 * 1000 },
      name: 'gpuhub:metrics',
      standby: () => this._transport !== 'polling' || !this._wanted()
    });
    document.addEventListener('visibilitychange', this._onVisibility);
    this._sync();
  }

  /** Emitted after new figures or an error, at most once per animation frame. */
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

  /** Pushed over the socket, or polled (after sockets failed). */
  get transport(): Transport {
    return this._transport;
  }

  /** Whether a socket is open or opening now. */
  get streaming(): boolean {
    return this._socket !== null;
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

  /** Ask now (after an action such as shutting a kernel down). */
  async refresh(): Promise<void> {
    if (this._transport === 'polling') {
      return this._poll.refresh();
    }
    await this._fetch().catch(() => undefined); // the stream goes on either way
  }

  /**
   * Someone started (or stopped) looking: open or close the socket, adjust
   * the polling pace, and poll at once when coming back from standby.
   */
  wake(): void {
    this._applyFrequency();
    this._sync();
    if (
      this._transport === 'polling' &&
      this._poll.state.phase === 'standby' &&
      this._wanted()
    ) {
      void this._poll.refresh();
    }
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    document.removeEventListener('visibilitychange', this._onVisibility);
    this._closeSocket();
    this._cancelFrame?.();
    this._poll.dispose();
    Signal.clearData(this);
  }

  private _wanted(): boolean {
    return !document.hidden && !this._idle();
  }

  private _onVisibility = (): void => {
    this.wake();
  };

  /** Open the socket when someone looks and none is open; close it when nobody does. */
  private _sync(): void {
    if (this.isDisposed) {
      return;
    }
    if (!this._wanted()) {
      if (this._closeDelayMs <= 0) {
        this._closeSocket();
      } else if (this._closing === null && this._socket !== null) {
        this._closing = setTimeout(() => {
          this._closing = null;
          if (!this._wanted()) {
            this._closeSocket();
          }
        }, this._closeDelayMs);
      } else if (this._socket === null) {
        this._closeSocket(); // a reconnect may wait: nobody needs it now
      }
      return;
    }
    if (this._closing !== null) {
      clearTimeout(this._closing);
      this._closing = null;
    }
    if (
      this._transport === 'stream' &&
      this._socket === null &&
      this._reconnect === null
    ) {
      this._openSocket();
    }
  }

  private _openSocket(): void {
    let socket: WebSocket;
    try {
      socket = new this._settings.WebSocket(
        websocketURL(STREAM_PATH, this._settings)
      );
    } catch {
      this._socketClosed(false);
      return;
    }
    this._socket = socket;
    let received = false;
    socket.onmessage = (event: MessageEvent) => {
      if (this._socket !== socket) {
        return;
      }
      received = true;
      this._failures = 0;
      this._take(event.data);
    };
    socket.onclose = () => {
      if (this._socket === socket) {
        this._socket = null;
        this._socketClosed(received);
      }
    };
    // An error is followed by a close: the close decides what happens next.
    socket.onerror = () => undefined;
  }

  /**
   * A socket closed that we did not close: open another after a while, or,
   * when sockets keep closing before their first message, poll instead.
   */
  private _socketClosed(received: boolean): void {
    if (!received) {
      this._failures++;
    }
    if (this._failures >= this._maxFailures) {
      this._transport = 'polling';
      this._retrySocketAt = Date.now() + this._socketRetryMs;
      this._applyFrequency();
      if (this._wanted()) {
        void this._poll.refresh();
      }
      return;
    }
    const delay =
      this._reconnectMs *
      2 ** Math.max(0, this._failures - 1) *
      (0.75 + Math.random() / 2);
    this._reconnect = setTimeout(() => {
      this._reconnect = null;
      this._sync();
    }, delay);
  }

  private _closeSocket(): void {
    if (this._closing !== null) {
      clearTimeout(this._closing);
      this._closing = null;
    }
    if (this._reconnect !== null) {
      clearTimeout(this._reconnect);
      this._reconnect = null;
    }
    const socket = this._socket;
    if (socket !== null) {
      this._socket = null; // its close event is ours: nothing to do about it
      socket.onmessage = null;
      socket.onclose = null;
      socket.onerror = null;
      socket.close();
    }
  }

  /** One message of the stream. */
  private _take(data: unknown): void {
    let metrics: IMetrics;
    try {
      metrics = JSON.parse(String(data));
    } catch {
      return; // not ours to judge; the next sample comes anyway
    }
    if (
      !metrics ||
      typeof metrics !== 'object' ||
      !Array.isArray(metrics.gpus)
    ) {
      return;
    }
    const history = Array.isArray(metrics.history)
      ? metrics.history
      : sampleEntry(metrics);
    metrics.history = [];
    this._accept(metrics, history);
    this._emitSoon();
  }

  private _accept(metrics: IMetrics, history: IHistoryEntry[]): void {
    const current = this._metrics?.time ?? -Infinity;
    // A GET answer that crossed a pushed sample never puts older figures back.
    if (metrics.time === undefined || metrics.time >= current) {
      this._metrics = metrics;
    }
    this._error = null;
    this._merge(metrics.gpus, history);
    this._applyFrequency();
  }

  private _emitSoon(): void {
    if (this._cancelFrame !== null) {
      return;
    }
    this._cancelFrame = nextFrame(() => {
      this._cancelFrame = null;
      this._changed.emit();
    });
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
      this._accept(metrics, metrics.history ?? []);
    } catch (error) {
      this._error = (error as Error).message || String(error);
      this._emitSoon();
      throw error; // let the poll back off
    }
    this._emitSoon();
    if (this._transport === 'polling' && Date.now() >= this._retrySocketAt) {
      // A while has passed: perhaps sockets go through now. One failure polls again.
      this._transport = 'stream';
      this._failures = this._maxFailures - 1;
      this._sync();
    }
  }

  private _merge(gpus: IGpu[], history: IHistoryEntry[]): void {
    const known = new Set(gpus.map(g => g.uuid));
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
    for (const entry of history) {
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
  private _cancelFrame: (() => void) | null = null;
  private _changed = new Signal<this, void>(this);
  private _closeDelayMs: number;
  private _closing: ReturnType<typeof setTimeout> | null = null;
  private _error: string | null = null;
  private _failures = 0;
  private _idle: () => boolean;
  private _interval: number;
  private _maxFailures: number;
  private _metrics: IMetrics | null = null;
  private _poll: Poll;
  private _reconnect: ReturnType<typeof setTimeout> | null = null;
  private _reconnectMs: number;
  private _retrySocketAt = 0;
  private _series = new Map<string, ISeries>();
  private _settings: ServerConnection.ISettings;
  private _socket: WebSocket | null = null;
  private _socketRetryMs: number;
  private _times: number[] = [];
  private _transport: Transport = 'stream';
  private _window: number;
}
