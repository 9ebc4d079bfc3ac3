/**
 * When this server is stopped under the user (by an admin from the fleet page,
 * by idle reclaim, by the user elsewhere), JupyterLab says so: that it was
 * stopped, by whom and why, and offers to start it again.
 *
 * The hub answers requests for a server that is not running with 424 (503
 * before JupyterHub 2): any gpuhub request that gets one, and JupyterLab's
 * "connection lost", lead here. The reason comes from the hub itself
 * (`GET <hub>/gpuhub/notices`, a page request the hub's login cookie
 * authenticates: the server that would have forwarded it is gone).
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { PageConfig, URLExt } from '@jupyterlab/coreutils';
import { ISignal, Signal } from '@lumino/signaling';

import { localText } from '../time';

/** What the hub tells a user about a stopped server or a cancelled job. */
export interface INotice {
  key: string;
  kind: 'server' | 'job';
  server: string;
  when: string;
  by: string;
  reason: string;
  text: string;
  /** The moment in `text`, as the hub writes it (UTC); `when` is the same for machines. */
  at?: string;
}

interface IHubNotices {
  user: string;
  notices: INotice[];
  xsrf: string;
  servers: Record<
    string,
    { active: boolean; ready: boolean; pending?: string | null }
  >;
}

/** The hub's answers that mean "this server is not running". */
export const NOT_RUNNING = new Set([424, 503]);

/** This server as the hub names it, or null outside a hub. */
export function hubServer(): {
  prefix: string;
  user: string;
  server: string;
} | null {
  const prefix = PageConfig.getOption('hubPrefix');
  const user = PageConfig.getOption('hubUser');
  if (!prefix || !user) {
    return null;
  }
  return { prefix, user, server: PageConfig.getOption('hubServerName') };
}

/** The hub's page that starts this server again (its spawn form). */
export function startAgainUrl(): string {
  const hub = hubServer();
  if (!hub) {
    return '/';
  }
  const server = hub.server ? `/${encodeURIComponent(hub.server)}` : '';
  return URLExt.join(
    hub.prefix,
    'spawn',
    encodeURIComponent(hub.user) + server
  );
}

/**
 * Milliseconds between the questions to the hub while it still calls this
 * server active: the hub marks a server stopped only once its stop has ended
 * (the process or pod gone, seconds after its connections broke), so right
 * after the server died it may still say "active". About 20 s in all, then
 * the server is taken to be running and the connection to be what failed.
 */
export const RECHECK_MS: readonly number[] = [
  250, 500, 1000, 1500, 2500, 3500, 5000, 5000
];

/**
 * How long (ms) to keep asking while the hub says it is stopping this server
 * (`pending: "stop"`): the stop is under way and ends with the server gone, however
 * long a busy hub or a slow pod takes; asked every `STOPPING_POLL_MS`.
 */
export const STOPPING_WAIT_MS = 5 * 60 * 1000;
export const STOPPING_POLL_MS = 1000;

/**
 * Milliseconds to wait, once or twice, for the notice of a server the hub
 * already lists as stopped: an admin's or idle reclaim's reason is recorded
 * as the stop ends, a moment after the server stops being active.
 */
export const NOTICE_WAIT_MS: readonly number[] = [500, 1000];

/** What the hub says of this server: stopped (and why), being stopped, still
 * active, or nothing. */
interface IAnswer {
  state: 'gone' | 'stopping' | 'active' | 'unknown';
  notice: INotice | null;
}

/**
 * The stopped dialog's words: the hub's notice (or that the server stopped), then,
 * truthfully, what became of this tab's unsaved changes: saved before the stop, or
 * not saved and only in this tab (lost on leaving it), or none lost.
 */
export function stoppedBody(
  noticeText: string | null,
  unsaved: readonly string[],
  saved: readonly string[] = []
): string {
  const parts = [
    noticeText ??
      'This server has stopped. Your saved files are safe; start it again to go on working.'
  ];
  if (saved.length) {
    parts.push(`Saved just before the stop: ${saved.join(', ')}.`);
  }
  if (unsaved.length) {
    parts.push(
      `Unsaved changes to ${unsaved.join(', ')} were not saved before the stop and are lost: ` +
        'they are only in this browser tab, until you leave or reload it; copy what you need first.'
    );
  } else {
    parts.push('No unsaved changes in this tab were lost.');
  }
  return parts.join(' ');
}

function sleep(ms: number): Promise<void> {
  return new Promise(resolve => setTimeout(resolve, ms));
}

/** Whether this server is gone, and why: one per page. */
export class ServerGone {
  static readonly instance = new ServerGone();

  /**
   * ``recheck``: the waits between questions while the hub says "active";
   * ``noticeWait``: those for the notice of a server the hub says is stopped;
   * ``stopping``: how long and how often to ask while the hub is stopping it.
   */
  constructor(
    private readonly _recheck: readonly number[] = RECHECK_MS,
    private readonly _noticeWait: readonly number[] = NOTICE_WAIT_MS,
    private readonly _stopping: { waitMs: number; pollMs: number } = {
      waitMs: STOPPING_WAIT_MS,
      pollMs: STOPPING_POLL_MS
    }
  ) {}

  /** Emitted once this server is known to be stopped. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** True once the hub says this server is not running. */
  get gone(): boolean {
    return this._gone;
  }

  /** Why it was stopped, when the hub knows (an admin's or idle reclaim's notice). */
  get notice(): INotice | null {
    return this._notice;
  }

  /**
   * Where the dialog reads this tab's documents: those with unsaved changes now,
   * and those saved for the stop (`./stops.ts`).
   */
  documents(unsaved: () => string[], saved: () => readonly string[]): void {
    this._unsaved = unsaved;
    this._savedForStop = saved;
  }

  /** A gpuhub request was answered with ``status``: maybe the server is gone. */
  report(status: number): void {
    if (NOT_RUNNING.has(status) && hubServer()) {
      void this.check();
    }
  }

  /**
   * Ask the hub whether this server still runs and why it stopped; true when
   * it is not running (then the panel and a dialog say so, once). While the
   * hub is stopping it, ask again until it is stopped (`STOPPING_WAIT_MS` at
   * most); while the hub still calls it active, ask again (`RECHECK_MS`): a
   * server that just died is "active" until the hub notices.
   */
  async check(): Promise<boolean> {
    if (this._gone) {
      return true;
    }
    if (this._checking === null) {
      this._checking = this._askPatiently().finally(() => {
        this._checking = null;
      });
    }
    return this._checking;
  }

  private async _askPatiently(): Promise<boolean> {
    const stopDeadline = Date.now() + this._stopping.waitMs;
    let rechecks = 0;
    let answer = await this._ask();
    for (;;) {
      if (answer.state === 'stopping' && Date.now() < stopDeadline) {
        await sleep(this._stopping.pollMs); // it ends with the server gone
      } else if (answer.state === 'active' && rechecks < this._recheck.length) {
        await sleep(this._recheck[rechecks++]);
      } else {
        break;
      }
      answer = await this._ask();
    }
    if (answer.state !== 'gone') {
      return false; // still active (running: the connection comes back), or no answer
    }
    for (const wait of this._noticeWait) {
      if (answer.notice) {
        break;
      }
      await sleep(wait);
      const again = await this._ask();
      if (again.state === 'gone') {
        answer = again;
      }
    }
    this._gone = true;
    this._notice = answer.notice;
    this._changed.emit();
    void this._tell();
    return true;
  }

  private async _ask(): Promise<IAnswer> {
    const hub = hubServer();
    const unknown: IAnswer = { state: 'unknown', notice: null };
    if (!hub) {
      return unknown;
    }
    let data: IHubNotices;
    try {
      const answer = await fetch(URLExt.join(hub.prefix, 'gpuhub/notices'), {
        credentials: 'same-origin',
        headers: { Accept: 'application/json' }
      });
      if (!answer.ok) {
        return unknown;
      }
      data = (await answer.json()) as IHubNotices;
    } catch {
      return unknown; // the hub cannot be reached either: nothing to say about the server
    }
    const server = data.servers?.[hub.server];
    if (server?.active) {
      // Being stopped; or running, starting again, or not yet marked stopped.
      const stopping = server.pending === 'stop';
      return { state: stopping ? 'stopping' : 'active', notice: null };
    }
    const notice =
      data.notices.find(n => n.kind === 'server' && n.server === hub.server) ??
      null;
    return { state: 'gone', notice };
  }

  private async _tell(): Promise<void> {
    const notice = this._notice;
    const result = await showDialog({
      title: notice ? 'Your server was stopped' : 'Your server is not running',
      body: stoppedBody(
        notice ? localText(notice) : null, // its moment in the reader's own zone
        this._unsaved(),
        this._savedForStop()
      ),
      buttons: [
        Dialog.cancelButton({ label: 'Close' }),
        Dialog.okButton({ label: 'Start it again' })
      ],
      defaultButton: 1
    });
    if (result.button.accept) {
      window.location.href = startAgainUrl();
    }
  }

  private _changed = new Signal<this, void>(this);
  private _checking: Promise<boolean> | null = null;
  private _gone = false;
  private _notice: INotice | null = null;
  private _unsaved: () => string[] = () => [];
  private _savedForStop: () => readonly string[] = () => [];
}
