import { GpuhubAPIError, requestAPI } from '../../api';
import { GpuMetricsModel } from '../../gpu/model';
import { IGpu, IHistoryEntry, IMetrics } from '../../gpu/types';
import { nextEmission, settle } from '../utils';
import { FakeWebSocket, fakeSocketSettings } from './fixtures';

jest.mock('../../api', () => ({
  ...jest.requireActual('../../api'),
  requestAPI: jest.fn()
}));

const request = requestAPI as jest.MockedFunction<typeof requestAPI>;

function gpu(uuid: string, index = 0): IGpu {
  return {
    index,
    uuid,
    name: 'NVIDIA A100',
    utilization: 10,
    memory_used: 1,
    memory_total: 80,
    temperature: 40,
    power: 100,
    mig: false,
    processes: []
  };
}

/** A history entry at `time`: [uuid, utilization, memory] per GPU. */
function entry(
  time: number,
  ...values: [string, number | null, number | null][]
): IHistoryEntry {
  return {
    time,
    gpus: values.map(([uuid, utilization, memory_used]) => ({
      uuid,
      utilization,
      memory_used,
      temperature: null,
      power: null
    }))
  };
}

function metrics(
  gpus: IGpu[],
  history: IHistoryEntry[],
  interval = 1
): IMetrics {
  return {
    available: true,
    reason: null,
    interval,
    min_interval: 0.25,
    source: 'nvml',
    gpus,
    history
  };
}

/** Answers, in order, to the model's requests (the last one repeats). */
function answers(...list: (IMetrics | Error)[]): void {
  request.mockImplementation(async () => {
    const next = list.length > 1 ? list.shift()! : list[0];
    if (next instanceof Error) {
      throw next;
    }
    return next as any;
  });
}

/** Poll now; resolves once the answer is merged and the poll has settled. */
async function poll(model: GpuMetricsModel): Promise<void> {
  const changed = nextEmission(model.changed);
  await model.refresh();
  await changed;
  await settle(); // the poll takes in the result
}

function pollInterval(model: GpuMetricsModel): number {
  return (model as any)._poll.frequency.interval;
}

// Where sockets cannot open (a proxy refusing WebSockets), the model polls: these tests
// are about polling; model-stream.spec.ts is about the stream.
describe('GpuMetricsModel, polling', () => {
  let model: GpuMetricsModel;
  let idle: boolean;
  let background: boolean;

  // A minute between polls by default: the tests poll by hand, and a scheduled
  // poll on a loaded machine would take the answer meant for theirs.
  function create(windowSeconds = 300, interval = 60): GpuMetricsModel {
    model = new GpuMetricsModel({
      interval,
      windowSeconds,
      idle: () => idle,
      background: () => background,
      serverSettings: fakeSocketSettings(),
      maxSocketFailures: 1
    });
    return model;
  }

  beforeEach(() => {
    FakeWebSocket.reset();
    FakeWebSocket.mode = 'throw';
    idle = false;
    background = false;
    request.mockReset();
  });

  afterEach(() => {
    model?.dispose();
  });

  it('starts empty', () => {
    answers(metrics([], []));
    create();
    expect(model.metrics).toBeNull();
    expect(model.error).toBeNull();
    expect(model.gpus).toEqual([]);
    expect(model.times).toEqual([]);
    expect(model.series('nope')).toEqual({ utilization: [], memory_used: [] });
  });

  it('keeps the history of every GPU, aligned with the sample times', async () => {
    const first = metrics(
      [gpu('a'), gpu('b', 1)],
      [entry(100, ['a', 10, 1], ['b', 20, 2]), entry(101, ['a', 11, null])]
    );
    answers(first);
    create();
    await nextEmission(model.changed);
    expect(request).toHaveBeenLastCalledWith('metrics');
    expect(model.metrics).toBe(first);
    expect(model.gpus.map(g => g.uuid)).toEqual(['a', 'b']);
    expect(model.times).toEqual([100, 101]);
    expect(model.series('a')).toEqual({
      utilization: [10, 11],
      memory_used: [1, null]
    });
    // b has no value at 101: a gap, not a shifted series.
    expect(model.series('b')).toEqual({
      utilization: [20, null],
      memory_used: [2, null]
    });
  });

  it('asks only for what is newer, and skips what it has', async () => {
    answers(
      metrics([gpu('a')], [entry(100, ['a', 10, 1]), entry(101, ['a', 11, 1])]),
      metrics(
        [gpu('a')],
        // 101 is sent again (the server's since is inclusive): kept once.
        [entry(101, ['a', 99, 9]), entry(102, ['a', 12, 2])]
      )
    );
    create();
    await nextEmission(model.changed);
    await poll(model);
    expect(request).toHaveBeenLastCalledWith('metrics?since=101');
    expect(model.times).toEqual([100, 101, 102]);
    expect(model.series('a').utilization).toEqual([10, 11, 12]);
  });

  it('pads a GPU that appears with nulls and forgets one that went', async () => {
    answers(
      metrics([gpu('a')], [entry(100, ['a', 10, 1])]),
      metrics([gpu('b')], [entry(101, ['b', 50, 5])])
    );
    create();
    await nextEmission(model.changed);
    await poll(model);
    expect(model.times).toEqual([100, 101]);
    expect(model.series('b')).toEqual({
      utilization: [null, 50],
      memory_used: [null, 5]
    });
    expect(model.series('a')).toEqual({ utilization: [], memory_used: [] });
  });

  it('drops what has left the chart window', async () => {
    answers(
      metrics(
        [gpu('a')],
        [0, 5, 10, 15, 20, 25].map(t => entry(t, ['a', t, t]))
      )
    );
    create(10);
    await nextEmission(model.changed);
    expect(model.windowSeconds).toBe(10);
    expect(model.times).toEqual([15, 20, 25]);
    expect(model.series('a')).toEqual({
      utilization: [15, 20, 25],
      memory_used: [15, 20, 25]
    });
  });

  it('says why a poll failed, keeps the last figures and recovers', async () => {
    const good = metrics([gpu('a')], [entry(100, ['a', 10, 1])]);
    answers(
      good,
      new GpuhubAPIError('The metrics service is down.', 503),
      metrics([gpu('a')], [entry(101, ['a', 20, 2])])
    );
    create();
    await nextEmission(model.changed);
    await poll(model);
    expect(model.error).toBe('The metrics service is down.');
    expect(model.metrics).toBe(good);
    expect(model.times).toEqual([100]);
    await poll(model);
    expect(model.error).toBeNull();
    expect(model.times).toEqual([100, 101]);
  });

  it('never polls faster than the server samples, nor than 5 s for the status bar', async () => {
    answers(metrics([gpu('a')], [entry(100, ['a', 10, 1])], 2));
    create(300, 1);
    expect(pollInterval(model)).toBe(1000);
    await nextEmission(model.changed);
    expect(pollInterval(model)).toBe(2000); // the server's interval
    model.configure(3, 600);
    expect(pollInterval(model)).toBe(3000);
    expect(model.windowSeconds).toBe(600);
    background = true;
    model.wake();
    expect(pollInterval(model)).toBe(5000);
    background = false;
    model.configure(0.1, 600);
    expect(pollInterval(model)).toBe(2000);
  });

  it('never polls faster than every 250 ms', () => {
    answers(metrics([], [], 0));
    create(300, 0.01);
    expect(pollInterval(model)).toBe(250);
  });

  it('does not poll while nobody looks, and polls at once on waking', async () => {
    idle = true;
    answers(metrics([gpu('a')], [entry(100, ['a', 10, 1])]));
    create();
    await settle(30);
    expect(request).not.toHaveBeenCalled();
    idle = false;
    const changed = nextEmission(model.changed);
    model.wake();
    await changed;
    expect(request).toHaveBeenCalledTimes(1);
    expect(model.times).toEqual([100]);
  });

  it('stops with dispose', () => {
    answers(metrics([], []));
    create();
    expect(model.isDisposed).toBe(false);
    model.dispose();
    expect(model.isDisposed).toBe(true);
  });
});
