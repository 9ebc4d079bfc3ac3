/** Fakes shared by the GPU tests (not a test file: no `.spec`). */
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
