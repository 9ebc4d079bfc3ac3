/**
 * The model's stream: one socket per tab at `gpuhub/api/metrics/stream`, its
 * messages merged into the charts' history, reconnects, the fallback to
 * polling, and closing when nobody shows the figures (panel and status bar
 * item, real widgets, sharing one model).
 */
import { Widget } from '@lumino/widgets';

import { requestAPI } from '../../api';
import { GpuMetricsModel } from '../../gpu/model';
import { GpuPanel } from '../../gpu/panel';
import { nobodyShows } from '../../gpu/plugin';
import { GpuStatus } from '../../gpu/status';
import { IHistoryEntry, IMetrics } from '../../gpu/types';
import { nextEmission, settle, until } from '../utils';
import { FakeWebSocket, fakeSocketSettings, gpu, metrics } from './fixtures';

jest.mock('../../api', () => ({
  ...jest.requireActual('../../api'),
  requestAPI: jest.fn()
}));

const request = requestAPI as jest.MockedFunction<typeof requestAPI>;

function entry(time: number, uuid: string, utilization: number): IHistoryEntry {
  return {
    time,
    gpus: [
      { uuid, utilization, memory_used: 1, temperature: null, power: null }
    ]
  };
}

/** The first message: the GET body, with history. */
function first(time: number, history: IHistoryEntry[]): IMetrics {
  return metrics({
    time,
    interval: 0.1,
    gpus: [gpu({ uuid: 'A', utilization: 5 })],
    history
  });
}

/** A later message: one sample, no history. */
function sample(time: number, utilization: number): Partial<IMetrics> {
  const body: Partial<IMetrics> = metrics({
    time,
    interval: 0.1,
    gpus: [gpu({ uuid: 'A', utilization })]
  });
  delete body.history;
  return body;
}

describe('GpuMetricsModel, stream', () => {
  let model: GpuMetricsModel;
  let idle: boolean;

  function create(
    options: Partial<GpuMetricsModel.IOptions> = {}
  ): GpuMetricsModel {
    model = new GpuMetricsModel({
      interval: 1,
      windowSeconds: 300,
      idle: () => idle,
      serverSettings: fakeSocketSettings(),
      reconnectMs: 5,
      closeDelayMs: 0,
      ...options
    });
    return model;
  }

  const socket = () => {
    const live = FakeWebSocket.live;
    expect(live).toHaveLength(1);
    return live[0];
  };

  beforeEach(() => {
    FakeWebSocket.reset();
    idle = false;
    request.mockReset();
    request.mockImplementation(async () => first(100, [entry(100, 'A', 1)]));
  });

  afterEach(() => model?.dispose());

  it('opens one socket at the stream URL, token appended as Jupyter does', () => {
    create();
    expect(model.transport).toBe('stream');
    expect(socket().url).toBe(
      'ws://localhost:8888/user/ada/gpuhub/api/metrics/stream?token=s3cret'
    );
    model.wake();
    model.wake();
    expect(FakeWebSocket.made).toHaveLength(1);
    expect(request).not.toHaveBeenCalled();
  });

  it('takes the history of the first message, then one sample per message', async () => {
    create();
    const changed = nextEmission(model.changed);
    socket().deliver(first(101, [entry(100, 'A', 1), entry(101, 'A', 2)]));
    await changed;
    expect(model.times).toEqual([100, 101]);
    expect(model.series('A').utilization).toEqual([1, 2]);
    expect(model.metrics!.time).toBe(101);
    expect(model.error).toBeNull();

    socket().deliver(sample(101.1, 30));
    socket().deliver(sample(101.2, 40));
    await nextEmission(model.changed);
    expect(model.times).toEqual([100, 101, 101.1, 101.2]);
    expect(model.series('A').utilization).toEqual([1, 2, 30, 40]);
    expect(model.metrics!.gpus[0].utilization).toBe(40);
    expect(request).not.toHaveBeenCalled();
  });

  it('tells its listeners once per animation frame, however many samples came', async () => {
    create();
    socket().deliver(first(100, [entry(100, 'A', 1)]));
    await nextEmission(model.changed);
    const heard = jest.fn();
    model.changed.connect(heard);
    for (let i = 1; i <= 10; i++) {
      socket().deliver(sample(100 + i / 10, i));
    }
    expect(heard).not.toHaveBeenCalled(); // not within the messages' task
    await until(() => heard.mock.calls.length > 0);
    await settle(50); // a few frames more: nothing new, nothing said
    expect(heard).toHaveBeenCalledTimes(1);
    expect(model.series('A').utilization).toHaveLength(11);
  });

  it('ignores a message it cannot read, and keeps the figures', async () => {
    create();
    socket().deliver(first(100, [entry(100, 'A', 1)]));
    await nextEmission(model.changed);
    socket().onmessage!({ data: 'not json' });
    socket().deliver({ nothing: 'here' });
    await settle(30);
    expect(model.times).toEqual([100]);
    expect(model.metrics!.time).toBe(100);
  });

  it('opens a socket again when one that worked closes, and keeps streaming', async () => {
    create();
    socket().deliver(first(100, [entry(100, 'A', 1)]));
    const gone = socket();
    gone.drop(); // e.g. the server restarted
    await until(() => FakeWebSocket.live.length === 1);
    expect(FakeWebSocket.made).toHaveLength(2);
    expect(model.transport).toBe('stream');
    socket().deliver(first(101, [entry(100, 'A', 1), entry(101, 'A', 7)]));
    await until(() => model.times.length === 2);
    expect(model.series('A').utilization).toEqual([1, 7]); // 100 kept once
    expect(request).not.toHaveBeenCalled();
  });

  it('polls the GET endpoint where sockets keep being refused', async () => {
    FakeWebSocket.mode = 'refuse';
    create({ maxSocketFailures: 3 });
    await until(() => model.times.length === 1);
    expect(model.transport).toBe('polling');
    expect(FakeWebSocket.made).toHaveLength(3); // three tries, with backoff between
    expect(FakeWebSocket.live).toHaveLength(0);
    expect(request).toHaveBeenCalledWith('metrics');
    expect(model.series('A').utilization).toEqual([1]);
  });

  it('tries a socket again after polling a while, and stops polling when it opens', async () => {
    FakeWebSocket.mode = 'refuse';
    // Retrying after every poll here; after five minutes by default.
    create({ maxSocketFailures: 2, socketRetryMs: 0 });
    await until(() => request.mock.calls.length > 0);
    FakeWebSocket.mode = 'accept';
    request.mockImplementation(async () => first(101, [entry(101, 'A', 2)]));
    void model.refresh();
    // (A socket made just before is still refused: wait for one that opened.)
    await until(() => FakeWebSocket.live.some(s => s.readyState === 1));
    const polls = request.mock.calls.length;
    socket().deliver(sample(101.1, 3));
    await until(() => model.times.length === 3);
    await settle(30);
    expect(request).toHaveBeenCalledTimes(polls);
    expect(model.transport).toBe('stream');
  });

  it('polls when the browser will not make a socket at all', async () => {
    FakeWebSocket.mode = 'throw';
    create({ maxSocketFailures: 2 });
    await until(() => model.transport === 'polling');
    await until(() => model.times.length === 1);
    expect(request).toHaveBeenCalledWith('metrics');
  });

  it('closes the socket while nobody looks and opens one when someone does', async () => {
    create();
    const open = socket();
    open.deliver(first(100, [entry(100, 'A', 1)]));
    idle = true;
    model.wake();
    expect(open.closedByClient).toBe(true);
    expect(FakeWebSocket.live).toHaveLength(0);
    await settle(30); // its close event comes later: no reconnect, no poll
    expect(FakeWebSocket.live).toHaveLength(0);
    expect(model.transport).toBe('stream');
    expect(request).not.toHaveBeenCalled();

    idle = false;
    model.wake();
    expect(FakeWebSocket.made).toHaveLength(2);
    expect(FakeWebSocket.live).toHaveLength(1);
  });

  it('keeps the socket through a glance away, and closes it after a while', async () => {
    create({ closeDelayMs: 40 });
    const open = socket();
    idle = true;
    model.wake();
    idle = false;
    model.wake(); // back before the delay: the same socket goes on
    await settle(60);
    expect(open.closedByClient).toBe(false);
    idle = true;
    model.wake();
    expect(open.closedByClient).toBe(false);
    await until(() => open.closedByClient);
    expect(FakeWebSocket.made).toHaveLength(1);
  });

  it('closes the socket while the tab is hidden', () => {
    create();
    const open = socket();
    const hidden = jest.spyOn(document, 'hidden', 'get').mockReturnValue(true);
    try {
      document.dispatchEvent(new Event('visibilitychange'));
      expect(open.closedByClient).toBe(true);
    } finally {
      hidden.mockRestore();
    }
    document.dispatchEvent(new Event('visibilitychange'));
    expect(FakeWebSocket.live).toHaveLength(1);
  });

  it('closes its socket with dispose', () => {
    create();
    const open = socket();
    model.dispose();
    expect(open.closedByClient).toBe(true);
  });
});

describe('one model for the panel and the status bar item', () => {
  let model: GpuMetricsModel;
  let panel: GpuPanel;
  let status: GpuStatus;

  beforeEach(() => {
    FakeWebSocket.reset();
    request.mockReset();
    request.mockImplementation(() => new Promise(() => undefined)); // holdings
    model = new GpuMetricsModel({
      interval: 1,
      windowSeconds: 300,
      idle: () => nobodyShows(panel ?? null, status ?? null),
      serverSettings: fakeSocketSettings(),
      closeDelayMs: 0
    });
    panel = new GpuPanel({
      model,
      commands: { execute: jest.fn() } as any,
      kernels: { shutdown: jest.fn() } as any
    });
    status = new GpuStatus(model, () => undefined);
  });

  afterEach(() => {
    panel.dispose();
    status.dispose();
    model.dispose();
  });

  it('streams over one socket while either shows, and none while neither does', async () => {
    expect(FakeWebSocket.made).toHaveLength(0); // nothing attached yet
    Widget.attach(panel, document.body);
    Widget.attach(status, document.body);
    expect(FakeWebSocket.live).toHaveLength(1);

    // Both draw from the one socket.
    FakeWebSocket.live[0].deliver(first(100, [entry(100, 'A', 1)]));
    await until(
      () => panel.node.querySelectorAll('.gpuhub-GpuCard').length === 1
    );
    await until(() => status.node.textContent!.startsWith('GPU 5%'));

    panel.hide();
    expect(FakeWebSocket.live).toHaveLength(1); // the status bar still shows
    status.hide();
    expect(FakeWebSocket.live).toHaveLength(0);
    panel.show();
    expect(FakeWebSocket.live).toHaveLength(1);
    panel.hide();
    status.show();
    expect(FakeWebSocket.live).toHaveLength(1);
    status.dispose(); // the status bar item goes (its setting turned off)
    expect(FakeWebSocket.live).toHaveLength(0);
    expect(FakeWebSocket.made).toHaveLength(3);
  });
});
