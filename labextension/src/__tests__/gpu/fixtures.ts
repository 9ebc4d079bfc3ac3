/** Fakes shared by the GPU tests (not a test file: no `.spec`). */
import { ServerConnection } from '@jupyterlab/services';
import { Signal } from '@lumino/signaling';

import { GpuMetricsModel, ISeries } from '../../gpu/model';
import { IGpu, IMetrics } from '../../gpu/types';

export const GIB = 1024 ** 3;

export function gpu(over: Partial<IGpu> = {}): IGpu {
  return {
    index: 0,
    uuid: 'GPU-0',
    name: 'NVIDIA A100',
    utilization: 30,
    memory_used: 4 * GIB,
    memory_total: 40 * GIB,
    temperature: 64.6,
    power: 250.2,
    mig: false,
    processes: [],
    ...over
  };
}

export function metrics(over: Partial<IMetrics> = {}): IMetrics {
  return {
    available: true,
    reason: null,
    interval: 1,
    min_interval: 0.25,
    source: 'nvml',
    gpus: [gpu()],
    history: [],
    ...over
  };
}

/** What the panel and the status bar item read of a `GpuMetricsModel`, settable. */
export class FakeMetricsModel {
  metrics: IMetrics | null = null;
  error: string | null = null;
  times: number[] = [];
  windowSeconds = 300;
  seriesByUuid = new Map<string, ISeries>();
  readonly changed = new Signal<this, void>(this);
  readonly refresh = jest.fn(async () => undefined);
  readonly wake = jest.fn();

  series(uuid: string): ISeries {
    return this.seriesByUuid.get(uuid) ?? { utilization: [], memory_used: [] };
  }

  /** New figures: as the real model does after a poll. */
  set(metrics: IMetrics | null, error: string | null = null): void {
    this.metrics = metrics;
    this.error = error;
    this.changed.emit();
  }

  get asModel(): GpuMetricsModel {
    return this as unknown as GpuMetricsModel;
  }
}

/**
 * A browser WebSocket as the model uses it, driven by the test: `deliver()` a
 * message, `drop()` the connection as a server or proxy would. A socket made
 * while `FakeWebSocket.mode` is 'refuse' closes before it opens (a proxy that
 * refuses WebSockets); 'throw' throws at construction.
 */
export class FakeWebSocket {
  static mode: 'accept' | 'refuse' | 'throw' = 'accept';
  static made: FakeWebSocket[] = [];

  static reset(): void {
    FakeWebSocket.mode = 'accept';
    FakeWebSocket.made = [];
  }

  /** Sockets neither side has closed. */
  static get live(): FakeWebSocket[] {
    return FakeWebSocket.made.filter(s => s.readyState < 2);
  }

  constructor(readonly url: string) {
    if (FakeWebSocket.mode === 'throw') {
      throw new Error('WebSockets are not allowed here');
    }
    FakeWebSocket.made.push(this);
    if (FakeWebSocket.mode === 'refuse') {
      setTimeout(() => this.drop(), 0);
    } else {
      setTimeout(() => {
        if (this.readyState === 0) {
          this.readyState = 1;
          this.onopen?.({});
        }
      }, 0);
    }
  }

  readyState = 0;
  closedByClient = false;
  onopen: ((event: any) => void) | null = null;
  onmessage: ((event: any) => void) | null = null;
  onclose: ((event: any) => void) | null = null;
  onerror: ((event: any) => void) | null = null;

  /** The server sends one message. */
  deliver(body: unknown): void {
    this.readyState = 1;
    this.onmessage?.({ data: JSON.stringify(body) });
  }

  /** The server or a proxy ends the connection. */
  drop(): void {
    if (this.readyState >= 2) {
      return;
    }
    this.readyState = 3;
    this.onerror?.({});
    this.onclose?.({ code: 1006 });
  }

  close(): void {
    if (this.readyState >= 2) {
      return;
    }
    this.closedByClient = true;
    this.readyState = 3;
    const onclose = this.onclose;
    setTimeout(() => onclose?.({ code: 1000 }), 0); // as a browser: later
  }

  send(): void {
    throw new Error('the metrics stream takes no messages');
  }
}

/** Server settings whose WebSocket is `FakeWebSocket`, with a token to append. */
export function fakeSocketSettings(): ServerConnection.ISettings {
  return ServerConnection.makeSettings({
    baseUrl: 'http://localhost:8888/user/ada/',
    wsUrl: 'ws://localhost:8888/user/ada/',
    token: 's3cret',
    appendToken: true,
    WebSocket: FakeWebSocket as any
  });
}
