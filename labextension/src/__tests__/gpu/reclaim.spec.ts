import { Notification } from '@jupyterlab/apputils';

import { GpuhubAPIError, requestAPI } from '../../api';
import {
  IIdleClock,
  IReclaimState,
  KEEP_LABEL,
  ReclaimWatcher,
  clockText,
  duration
} from '../../gpu/reclaim';

jest.mock('../../api', () => ({
  ...jest.requireActual('../../api'),
  requestAPI: jest.fn()
}));

const request = requestAPI as jest.MockedFunction<typeof requestAPI>;

function clock(over: Partial<IIdleClock> = {}): IIdleClock {
  return {
    idle_seconds: 0,
    warn_after_seconds: 3600,
    warned: false,
    seconds_left: null,
    postpones: 0,
    postpones_left: 2,
    utilization_below: 0.05,
    ...over
  };
}

function state(over: Partial<IIdleClock> = {}): IReclaimState {
  return { enabled: true, server: clock(over) };
}

const WARNED = state({
  idle_seconds: 3600,
  warned: true,
  seconds_left: 600
});

describe('duration', () => {
  it('counts seconds below two minutes', () => {
    expect(duration(0)).toBe('0 s');
    expect(duration(45.4)).toBe('45 s');
    expect(duration(119)).toBe('119 s');
    expect(duration(-3)).toBe('0 s');
  });

  it('counts minutes below two hours', () => {
    expect(duration(120)).toBe('2 min');
    expect(duration(749)).toBe('12 min');
    expect(duration(7199)).toBe('120 min');
  });

  it('counts hours with one decimal from two hours', () => {
    expect(duration(7200)).toBe('2.0 h');
    expect(duration(5.5 * 3600)).toBe('5.5 h');
  });
});

describe('clockText', () => {
  it('is empty when reclaim is off or there is no clock', () => {
    expect(clockText(null)).toBe('');
    expect(clockText({ enabled: false, server: clock() })).toBe('');
    expect(clockText({ enabled: true, server: null })).toBe('');
  });

  it('says how busy GPUs are judged while they are busy', () => {
    expect(clockText(state({ idle_seconds: 0 }))).toBe(
      'GPUs busy. Servers whose GPUs stay below 5 % for 60 min are stopped.'
    );
  });

  it('counts the idle time up to the warning', () => {
    expect(clockText(state({ idle_seconds: 750 }))).toBe(
      'GPUs idle (below 5 %) for 13 min of 60 min before a warning.'
    );
  });

  it('says when the server stops once warned', () => {
    expect(clockText(WARNED)).toBe(
      'GPUs idle for 60 min: this server stops in 10 min unless you keep them.'
    );
  });

  it('does not announce a stop without a time left', () => {
    expect(
      clockText(state({ idle_seconds: 750, warned: true, seconds_left: null }))
    ).toBe('GPUs idle (below 5 %) for 13 min of 60 min before a warning.');
  });
});

describe('ReclaimWatcher', () => {
  let watcher: ReclaimWatcher;

  beforeEach(() => {
    jest.useFakeTimers();
    request.mockReset();
    Notification.dismiss();
    watcher = new ReclaimWatcher();
  });

  afterEach(() => {
    watcher.dispose();
    jest.useRealTimers();
    delete (document as any).hidden;
  });

  /** Answer `reclaim` with these states in turn (the last one repeats). */
  function answers(...states: IReclaimState[]): void {
    request.mockImplementation(
      async () => (states.length > 1 ? states.shift() : states[0]) as any
    );
  }

  const polls = () =>
    request.mock.calls.filter(([path]) => path === 'reclaim').length;

  it('shows the idle clock and polls every 30 s while calm', async () => {
    answers(state({ idle_seconds: 750 }));
    const seen: (IReclaimState | null)[] = [];
    watcher.changed.connect((_, s) => seen.push(s));
    watcher.start();
    await jest.advanceTimersByTimeAsync(0);
    expect(polls()).toBe(1);
    expect(watcher.state!.server!.idle_seconds).toBe(750);
    expect(seen).toHaveLength(1);
    expect(Notification.manager.count).toBe(0);
    await jest.advanceTimersByTimeAsync(29_000);
    expect(polls()).toBe(1);
    await jest.advanceTimersByTimeAsync(1_000);
    expect(polls()).toBe(2);
  });

  it('warns once with a Keep button, updates the warning, then withdraws it', async () => {
    answers(
      WARNED,
      state({ idle_seconds: 3630, warned: true, seconds_left: 570 }),
      state({ idle_seconds: 0 })
    );
    watcher.start();
    await jest.advanceTimersByTimeAsync(0);
    expect(Notification.manager.count).toBe(1);
    let [note] = Notification.manager.notifications;
    expect(note.type).toBe('warning');
    expect(note.message).toBe(
      'Your GPUs have been idle for 60 min. This server stops in 10 min to give them back; your files are safe.'
    );
    expect(note.options.autoClose).toBe(false);
    expect(note.options.actions!.map(a => [a.label, a.caption])).toEqual([
      [KEEP_LABEL, 'Postpone the stop (2 left)']
    ]);
    // Warned: every 5 s.
    await jest.advanceTimersByTimeAsync(5_000);
    expect(polls()).toBe(2);
    expect(Notification.manager.count).toBe(1);
    [note] = Notification.manager.notifications;
    expect(note.message).toContain('stops in 10 min'); // 570 s
    expect(note.message).toContain('idle for 61 min');
    await jest.advanceTimersByTimeAsync(5_000);
    expect(polls()).toBe(3);
    expect(Notification.manager.count).toBe(0);
  });

  it('offers no Keep button when no postpone is left', async () => {
    answers(
      state({
        idle_seconds: 3600,
        warned: true,
        seconds_left: 60,
        postpones_left: 0
      })
    );
    watcher.start();
    await jest.advanceTimersByTimeAsync(0);
    const [note] = Notification.manager.notifications;
    expect(note.options.actions).toEqual([]);
  });

  it('does not poll a hidden tab unless warned, and polls on its return', async () => {
    Object.defineProperty(document, 'hidden', {
      configurable: true,
      get: () => true
    });
    answers(state({ idle_seconds: 10 }));
    watcher.start();
    await jest.advanceTimersByTimeAsync(60_000);
    expect(polls()).toBe(0);
    delete (document as any).hidden;
    document.dispatchEvent(new Event('visibilitychange'));
    await jest.advanceTimersByTimeAsync(0);
    expect(polls()).toBe(1);
  });

  it('keeps the GPUs and says how many times are left', async () => {
    const kept = clock({ idle_seconds: 0, postpones: 1, postpones_left: 1 });
    request.mockResolvedValue(kept as any);
    await watcher.keep();
    expect(request).toHaveBeenCalledWith('reclaim/keep', {
      method: 'POST',
      body: '{}'
    });
    expect(watcher.state).toEqual({ enabled: true, server: kept });
    const [note] = Notification.manager.notifications;
    expect(note.type).toBe('success');
    expect(note.message).toBe('Kept. You may keep these GPUs 1 more time.');

    request.mockResolvedValue(clock({ postpones_left: 3 }) as any);
    await watcher.keep();
    expect(Notification.manager.notifications[0].message).toBe(
      'Kept. You may keep these GPUs 3 more times.'
    );

    request.mockResolvedValue(clock({ postpones_left: 0 }) as any);
    await watcher.keep();
    expect(Notification.manager.notifications[0].message).toMatch(
      /^Kept\. This was the last time/
    );
  });

  it("says the hub's refusal to keep", async () => {
    request.mockRejectedValue(new GpuhubAPIError('No postpones left.', 409));
    await watcher.keep();
    const [note] = Notification.manager.notifications;
    expect(note.type).toBe('error');
    expect(note.message).toBe('No postpones left.');
    expect(note.options.autoClose).toBe(false);
  });
});
