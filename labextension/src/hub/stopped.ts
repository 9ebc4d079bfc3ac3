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

/** What the hub tells a user about a stopped server or a cancelled job. */
export interface INotice {
  key: string;
  kind: 'server' | 'job';
  server: string;
  when: string;
  by: string;
  reason: string;
  text: string;
}

interface IHubNotices {
  user: string;
  notices: INotice[];
  xsrf: string;
  servers: Record<string, { active: boolean; ready: boolean }>;
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

/** Whether this server is gone, and why: one per page. */
export class ServerGone {
  static readonly instance = new ServerGone();

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

  /** A gpuhub request was answered with ``status``: maybe the server is gone. */
  report(status: number): void {
    if (NOT_RUNNING.has(status) && hubServer()) {
      void this.check();
    }
  }

  /**
   * Ask the hub whether this server still runs and why it stopped; true when
   * it is not running (then the panel and a dialog say so, once).
   */
  async check(): Promise<boolean> {
    if (this._gone) {
      return true;
    }
    if (this._checking === null) {
      this._checking = this._ask().finally(() => {
        this._checking = null;
      });
    }
    return this._checking;
  }

  private async _ask(): Promise<boolean> {
    const hub = hubServer();
    if (!hub) {
      return false;
    }
    let data: IHubNotices;
    try {
      const answer = await fetch(URLExt.join(hub.prefix, 'gpuhub/notices'), {
        credentials: 'same-origin',
        headers: { Accept: 'application/json' }
      });
      if (!answer.ok) {
        return false;
      }
      data = (await answer.json()) as IHubNotices;
    } catch {
      return false; // the hub cannot be reached either: nothing to say about the server
    }
    const state = data.servers?.[hub.server];
    if (state?.active) {
      return false; // running (or starting again): the connection will come back
    }
    this._gone = true;
    this._notice =
      data.notices.find(n => n.kind === 'server' && n.server === hub.server) ??
      null;
    this._changed.emit();
    void this._tell();
    return true;
  }

  private async _tell(): Promise<void> {
    const notice = this._notice;
    const result = await showDialog({
      title: notice ? 'Your server was stopped' : 'Your server is not running',
      body: notice
        ? notice.text
        : 'This server has stopped. Your files are safe; start it again to go on working.',
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
}
