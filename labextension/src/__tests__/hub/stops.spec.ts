import { PageConfig } from '@jupyterlab/coreutils';

import { stoppedBody } from '../../hub/stopped';
import {
  CALM_MS,
  NEAR_MS,
  SAVE_LEAD_S,
  StopWatcher,
  countdownText,
  nextPollMs,
  saveDue,
  saveOpen,
  stopOf,
  unsavedPaths
} from '../../hub/stops';

/** An open document as JupyterLab's DocumentWidget has it: its context. */
function doc(path: string, dirty: boolean, fail = false) {
  const model = { dirty, readOnly: false };
  return {
    context: {
      path,
      model,
      async save(this: unknown) {
        if (fail) {
          throw new Error('the server is gone');
        }
        model.dirty = false;
      }
    }
  };
}

describe('stopOf', () => {
  const holdings = {
    available: true,
    holdings: [
      { kind: 'job', name: 'gpu', stops_at: 50, stops_why: 'idle' },
      { kind: 'server', name: 'other', stops_at: 60, stops_why: 'budget' },
      { kind: 'server', name: 'gpu', stops_at: 100, stops_why: 'budget' }
    ]
  };

  it("finds this server's stop, not a job's or another server's", () => {
    expect(stopOf(holdings, 'gpu')).toEqual({ at: 100, why: 'budget' });
    expect(stopOf(holdings, 'other')).toEqual({ at: 60, why: 'budget' });
  });

  it('is null when nothing stops this server', () => {
    expect(
      stopOf({ holdings: [{ kind: 'server', name: '', stops_at: null }] }, '')
    ).toBeNull();
    expect(stopOf({ holdings: [] }, '')).toBeNull();
    expect(stopOf({}, '')).toBeNull();
  });
});

describe('polling and saving times', () => {
  it('asks often once a budget nears its end or a stop is due', () => {
    expect(nextPollMs(null, null)).toBe(CALM_MS);
    expect(nextPollMs({ budgets: [{ state: 'ok' }] }, null)).toBe(CALM_MS);
    expect(nextPollMs({ budgets: [{ state: 'warning' }] }, null)).toBe(NEAR_MS);
    expect(nextPollMs({}, { at: 1, why: 'budget' })).toBe(NEAR_MS);
  });

  it('saves only within SAVE_LEAD_S of the stop', () => {
    const stop = { at: 1000, why: 'budget' };
    expect(saveDue(stop, 1000 - SAVE_LEAD_S - 1)).toBe(false);
    expect(saveDue(stop, 1000 - SAVE_LEAD_S)).toBe(true);
    expect(saveDue(stop, 1010)).toBe(true);
    expect(saveDue(null, 1010)).toBe(false);
  });
});

describe('StopWatcher', () => {
  it('saves once per stop, though the moment moves by clock reads', async () => {
    const widgets = [doc('a.ipynb', true)];
    let now = 1000;
    const watcher = new StopWatcher(
      () => widgets,
      () => now
    );
    const fetchMock = jest.fn();
    (globalThis as any).fetch = fetchMock;
    const answer = (at: number) =>
      new Response(
        JSON.stringify({
          available: true,
          holdings: [
            { kind: 'server', name: 'gpu', stops_at: at, stops_why: 'budget' }
          ]
        })
      );
    PageConfig.setOption('hubPrefix', '/hub/');
    PageConfig.setOption('hubUser', 'ann');
    PageConfig.setOption('hubServerName', 'gpu');
    fetchMock.mockResolvedValueOnce(answer(1100));
    await watcher.poll();
    await watcher.saveIfDue();
    expect(watcher.saved).toEqual([]); // 100 s before: not yet
    now = 1100 - SAVE_LEAD_S;
    await watcher.saveIfDue();
    expect(watcher.saved).toEqual(['a.ipynb']);
    widgets[0].context.model.dirty = true; // typed after the save
    fetchMock.mockResolvedValueOnce(answer(1100.003));
    await watcher.poll();
    await watcher.saveIfDue();
    expect(unsavedPaths(widgets)).toEqual(['a.ipynb']); // that is the person's to save
    watcher.dispose();
  });
});

describe('countdownText', () => {
  it('says when and why a budget stop comes, and that notebooks are saved', () => {
    expect(countdownText({ at: 1090, why: 'budget' }, 1000)).toBe(
      `This server stops in 90 s: your GPU-hour budget is used up and its grace runs out. Open notebooks with unsaved changes are saved ${SAVE_LEAD_S} s before; save anything else now.`
    );
    expect(countdownText({ at: 1600, why: 'share' }, 1000)).toContain(
      'stops in 10 min: it uses more GPU memory than its share.'
    );
    expect(countdownText({ at: 1300, why: 'booking' }, 1000)).toContain(
      'stops in 5 min: its GPUs are booked from then'
    );
  });

  it('never counts below zero', () => {
    expect(countdownText({ at: 900, why: 'budget' }, 1000)).toContain(
      'stops in 0 s'
    );
  });

  it('leaves idle reclaim to its own warning (with Keep my GPUs)', () => {
    expect(countdownText({ at: 1090, why: 'idle' }, 1000)).toBe('');
  });
});

describe('unsaved documents', () => {
  it('lists each dirty document once, and nothing else', () => {
    const widgets = [
      doc('b.ipynb', true),
      doc('a.ipynb', true),
      doc('clean.ipynb', false),
      doc('a.ipynb', true), // the same document in a second view
      { title: 'a launcher, no context' }
    ];
    expect(unsavedPaths(widgets)).toEqual(['a.ipynb', 'b.ipynb']);
  });

  it('saves the dirty ones, and says which it could not', async () => {
    const widgets = [
      doc('a.ipynb', true),
      doc('gone.ipynb', true, true),
      doc('c.ipynb', false)
    ];
    const warn = jest
      .spyOn(console, 'warn')
      .mockImplementation(() => undefined);
    expect(await saveOpen(widgets)).toEqual(['a.ipynb']);
    expect(unsavedPaths(widgets)).toEqual(['gone.ipynb']);
    expect(warn).toHaveBeenCalledTimes(1);
    warn.mockRestore();
  });
});

describe('stoppedBody', () => {
  it('never says files are safe when changes were lost', () => {
    const body = stoppedBody('Your server was stopped.', ['a.ipynb'], []);
    expect(body).toContain(
      'Unsaved changes to a.ipynb were not saved before the stop and are lost'
    );
    expect(body).not.toContain('No unsaved changes');
  });

  it('says what was saved for the stop, and that nothing was lost', () => {
    expect(stoppedBody(null, [], ['a.ipynb', 'b.ipynb'])).toBe(
      'This server has stopped. Your saved files are safe; start it again to go on working. Saved just before the stop: a.ipynb, b.ipynb. No unsaved changes in this tab were lost.'
    );
  });
});
