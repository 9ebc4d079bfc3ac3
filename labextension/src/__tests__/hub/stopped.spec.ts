import { showDialog } from '@jupyterlab/apputils';
import { PageConfig } from '@jupyterlab/coreutils';

import {
  INotice,
  NOT_RUNNING,
  RECHECK_MS,
  ServerGone,
  hubServer,
  startAgainUrl
} from '../../hub/stopped';
import { formatTime } from '../../time';

jest.mock('@jupyterlab/apputils', () => ({
  ...jest.requireActual('@jupyterlab/apputils'),
  showDialog: jest.fn()
}));

const dialog = showDialog as jest.MockedFunction<typeof showDialog>;
const fetchMock = jest.fn();

function notice(over: Partial<INotice> = {}): INotice {
  return {
    key: 'n1',
    kind: 'server',
    server: 'gpu',
    when: '2025-01-01T10:00:00Z',
    by: 'admin',
    reason: 'maintenance',
    text: 'An admin stopped your server gpu for maintenance.',
    ...over
  };
}

/** The hub's `gpuhub/notices` answer. */
function hubAnswer(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), { status });
}

/** The hub's answers in turn (the last one repeats), each with the server's notice. */
function serversInTurn(...servers: Record<string, unknown>[]): void {
  fetchMock.mockImplementation(async () =>
    hubAnswer({
      user: 'ann',
      xsrf: 'x',
      notices: [notice()],
      servers: servers.length > 1 ? servers.shift() : servers[0]
    })
  );
}

function inHub(server = 'gpu', user = 'ann', prefix = '/hub/'): void {
  PageConfig.setOption('hubPrefix', prefix);
  PageConfig.setOption('hubUser', user);
  PageConfig.setOption('hubServerName', server);
}

beforeEach(() => {
  (globalThis as any).fetch = fetchMock;
  fetchMock.mockReset();
  dialog.mockReset();
  dialog.mockResolvedValue({
    button: { accept: false },
    isChecked: null,
    value: null
  } as any);
  PageConfig.setOption('hubPrefix', '');
  PageConfig.setOption('hubUser', '');
  PageConfig.setOption('hubServerName', '');
});

describe('hubServer and startAgainUrl', () => {
  it('are null and the root outside a hub', () => {
    expect(hubServer()).toBeNull();
    expect(startAgainUrl()).toBe('/');
    PageConfig.setOption('hubPrefix', '/hub/'); // a prefix, but no user
    expect(hubServer()).toBeNull();
  });

  it("name this server and its spawn page under the hub's prefix", () => {
    inHub('gpu', 'ann', '/jupyter/hub/');
    expect(hubServer()).toEqual({
      prefix: '/jupyter/hub/',
      user: 'ann',
      server: 'gpu'
    });
    expect(startAgainUrl()).toBe('/jupyter/hub/spawn/ann/gpu');
  });

  it('spawn the default server without a server segment', () => {
    inHub('', 'ann');
    expect(startAgainUrl()).toBe('/hub/spawn/ann');
  });

  it('encode user and server names', () => {
    inHub('my server', 'a@b.org');
    expect(startAgainUrl()).toBe('/hub/spawn/a%40b.org/my%20server');
  });
});

describe('ServerGone', () => {
  it('treats 424 and 503 as "not running"', () => {
    expect(Array.from(NOT_RUNNING).sort()).toEqual([424, 503]);
  });

  it('asks the hub only about a "not running" answer, and only in a hub', async () => {
    const gone = new ServerGone();
    const check = jest.spyOn(gone, 'check').mockResolvedValue(false);
    gone.report(424);
    expect(check).not.toHaveBeenCalled(); // outside a hub
    inHub();
    gone.report(500);
    gone.report(404);
    expect(check).not.toHaveBeenCalled();
    gone.report(503);
    gone.report(424);
    expect(check).toHaveBeenCalledTimes(2);
  });

  it('is not gone outside a hub', async () => {
    const gone = new ServerGone();
    expect(await gone.check()).toBe(false);
    expect(fetchMock).not.toHaveBeenCalled();
  });

  it('is not gone while the hub keeps saying the server is active', async () => {
    inHub();
    fetchMock.mockImplementation(async () =>
      hubAnswer({
        user: 'ann',
        notices: [],
        xsrf: 'x',
        servers: { gpu: { active: true, ready: false } }
      })
    );
    const gone = new ServerGone([1, 2]);
    expect(await gone.check()).toBe(false);
    expect(gone.gone).toBe(false);
    expect(fetchMock).toHaveBeenCalledTimes(3); // asked, then asked again twice
    const [url, init] = fetchMock.mock.calls[0];
    expect(url).toBe('/hub/gpuhub/notices');
    expect(init.credentials).toBe('same-origin');
    expect(dialog).not.toHaveBeenCalled();
  });

  it('asks again while the hub still calls a dead server active', async () => {
    // The hub marks a server stopped only once its stop has ended: right after
    // the server died it is still "active", and a moment later it is not.
    inHub('gpu');
    const stopping = { gpu: { active: true, ready: false } };
    const stopped = { gpu: { active: false, ready: false } };
    serversInTurn(stopping, stopping, stopped);
    const gone = new ServerGone([1, 1, 1, 1]);
    expect(await gone.check()).toBe(true);
    expect(fetchMock).toHaveBeenCalledTimes(3);
    expect(dialog).toHaveBeenCalledTimes(1);
    expect(dialog.mock.calls[0][0]!.title).toBe('Your server was stopped');
  });

  it('keeps asking while the hub is stopping the server, however long', async () => {
    // A busy hub or a slow pod: the stop takes longer than the rechecks, but the hub
    // says it is under way (pending "stop"), and it ends with the server gone.
    inHub('gpu');
    const stopping = { gpu: { active: true, ready: false, pending: 'stop' } };
    const stopped = { gpu: { active: false, ready: false, pending: null } };
    serversInTurn(stopping, stopping, stopping, stopping, stopping, stopped);
    const gone = new ServerGone([1], [1], { waitMs: 60_000, pollMs: 1 });
    expect(await gone.check()).toBe(true);
    expect(fetchMock).toHaveBeenCalledTimes(6);
    expect(dialog.mock.calls[0][0]!.title).toBe('Your server was stopped');
  });

  it('stops waiting for a stop that never ends', async () => {
    inHub('gpu');
    fetchMock.mockImplementation(async () =>
      hubAnswer({
        user: 'ann',
        xsrf: 'x',
        notices: [],
        servers: { gpu: { active: true, ready: false, pending: 'stop' } }
      })
    );
    const gone = new ServerGone([1], [1], { waitMs: 30, pollMs: 5 });
    expect(await gone.check()).toBe(false);
    expect(gone.gone).toBe(false);
    expect(dialog).not.toHaveBeenCalled();
  });

  it('waits a moment for the notice of a server the hub lists as stopped', async () => {
    // The admin's reason is recorded as the stop ends, just after the server
    // stops being active: "was stopped, by whom and why", not "not running".
    inHub('gpu');
    const stopped = { gpu: { active: false, ready: false } };
    const notices: INotice[][] = [[], [notice()]];
    fetchMock.mockImplementation(async () =>
      hubAnswer({
        user: 'ann',
        xsrf: 'x',
        notices: notices.shift() ?? [notice()],
        servers: stopped
      })
    );
    const gone = new ServerGone([], [1, 1]);
    expect(await gone.check()).toBe(true);
    expect(fetchMock).toHaveBeenCalledTimes(2);
    expect(gone.notice).toEqual(notice());
    expect(dialog).toHaveBeenCalledTimes(1);
    expect(dialog.mock.calls[0][0]!.title).toBe('Your server was stopped');
  });

  it('waits longer between questions, and not for ever', () => {
    const waits = Array.from(RECHECK_MS);
    expect(waits).toEqual([...waits].sort((a, b) => a - b));
    const total = waits.reduce((a, b) => a + b, 0);
    expect(total).toBeGreaterThanOrEqual(10_000); // a slow stop (a process, a pod)
    expect(total).toBeLessThanOrEqual(30_000); // then JupyterLab's own dialog
  });

  it('says nothing when the hub cannot answer', async () => {
    inHub();
    const gone = new ServerGone();
    fetchMock.mockResolvedValue(hubAnswer({}, 500));
    expect(await gone.check()).toBe(false);
    fetchMock.mockRejectedValue(new TypeError('offline'));
    expect(await gone.check()).toBe(false);
    expect(gone.gone).toBe(false);
  });

  it("is gone when the hub lists it inactive, with the server's own notice", async () => {
    inHub('gpu');
    const mine = notice();
    fetchMock.mockResolvedValue(
      hubAnswer({
        user: 'ann',
        xsrf: 'x',
        notices: [
          notice({ kind: 'job', key: 'j', text: 'A job was cancelled.' }),
          notice({ server: 'other', key: 'o', text: 'Another server.' }),
          mine
        ],
        servers: { gpu: { active: false, ready: false } }
      })
    );
    const gone = new ServerGone();
    let emitted = 0;
    gone.changed.connect(() => emitted++);
    expect(await gone.check()).toBe(true);
    expect(gone.gone).toBe(true);
    expect(gone.notice).toEqual(mine);
    expect(emitted).toBe(1);
    expect(dialog).toHaveBeenCalledTimes(1);
    const options = dialog.mock.calls[0][0]!;
    expect(options.title).toBe('Your server was stopped');
    // No moment in it: as the hub wrote it, and what became of unsaved changes.
    expect(options.body).toBe(
      `${mine.text} No unsaved changes in this tab were lost.`
    );
    // Once gone, always gone: no more questions to the hub.
    expect(await gone.check()).toBe(true);
    expect(fetchMock).toHaveBeenCalledTimes(1);
  });

  it("writes the notice's moment in the reader's own zone", async () => {
    inHub('gpu');
    const when = '2026-11-27T00:58:00+00:00';
    const at = '27 Nov 2026, 00:58 UTC';
    fetchMock.mockResolvedValue(
      hubAnswer({
        user: 'ann',
        xsrf: 'x',
        notices: [
          notice({
            when,
            at,
            text: `Your server was stopped on ${at} by admin.`
          })
        ],
        servers: { gpu: { active: false, ready: false } }
      })
    );
    expect(await new ServerGone().check()).toBe(true);
    const options = dialog.mock.calls[0][0]!;
    expect(options.body).toBe(
      `Your server was stopped on ${formatTime(when)} by admin. No unsaved changes in this tab were lost.`
    );
    expect(options.body).not.toMatch(/UTC/);
  });

  it('names the changes a stop lost, and what was saved for it', async () => {
    inHub('gpu');
    fetchMock.mockResolvedValue(
      hubAnswer({
        user: 'ann',
        xsrf: 'x',
        notices: [notice({ text: 'Your server was stopped.' })],
        servers: { gpu: { active: false, ready: false } }
      })
    );
    const gone = new ServerGone();
    gone.documents(
      () => ['late.ipynb'],
      () => ['train.ipynb']
    );
    expect(await gone.check()).toBe(true);
    const body = dialog.mock.calls[0][0]!.body as string;
    expect(body).toBe(
      'Your server was stopped. Saved just before the stop: train.ipynb. ' +
        'Unsaved changes to late.ipynb were not saved before the stop and are lost: ' +
        'they are only in this browser tab, until you leave or reload it; copy what you need first.'
    );
  });

  it('is gone without a notice when the hub no longer lists the server', async () => {
    inHub('gpu');
    fetchMock.mockResolvedValue(
      hubAnswer({ user: 'ann', xsrf: 'x', notices: [], servers: {} })
    );
    const gone = new ServerGone();
    expect(await gone.check()).toBe(true);
    expect(gone.notice).toBeNull();
    expect(dialog.mock.calls[0][0]!.title).toBe('Your server is not running');
  });

  it('asks the hub once for checks that overlap', async () => {
    inHub('gpu');
    let reply!: (r: Response) => void;
    fetchMock.mockReturnValue(new Promise<Response>(r => (reply = r)));
    const gone = new ServerGone([]);
    const first = gone.check();
    const second = gone.check();
    reply(
      hubAnswer({
        user: 'ann',
        xsrf: 'x',
        notices: [],
        servers: { gpu: { active: true, ready: true } }
      })
    );
    expect(await first).toBe(false);
    expect(await second).toBe(false);
    expect(fetchMock).toHaveBeenCalledTimes(1);
  });
});
