/**
 * GPU reclaim in JupyterLab: the hub's idle clock of this server, a warning with the time
 * left and a "Keep my GPUs" button, and a line in the GPU sidebar.
 *
 * The server extension asks the hub with the server's own token (`/gpuhub/api/reclaim`);
 * this polls it politely: every 30 s, every 5 s while a warning runs, never while the tab
 * is hidden unless warned.
 */
import { Notification } from '@jupyterlab/apputils';
import { ISignal, Signal } from '@lumino/signaling';

import { GpuhubAPIError, requestAPI } from '../api';

export interface IIdleClock {
  idle_seconds: number;
  warn_after_seconds: number;
  warned: boolean;
  seconds_left: number | null;
  postpones: number;
  postpones_left: number;
  utilization_below: number;
}

export interface IReclaimState {
  enabled: boolean;
  server: IIdleClock | null;
}

export const KEEP_LABEL = 'Keep my GPUs';
const CALM_MS = 30_000;
const WARNED_MS = 5_000;

/** "12 min", "45 s", "1.5 h" */
export function duration(seconds: number): string {
  if (seconds < 120) {
    return `${Math.max(0, Math.round(seconds))} s`;
  }
  if (seconds < 7200) {
    return `${Math.round(seconds / 60)} min`;
  }
  return `${(seconds / 3600).toFixed(1)} h`;
}

/** The sidebar's line about the idle clock; '' when reclaim is off or nothing is idle. */
export function clockText(state: IReclaimState | null): string {
  const clock = state?.enabled ? state.server : null;
  if (!clock) {
    return '';
  }
  const below = `${Math.round(clock.utilization_below * 100)} %`;
  if (clock.warned && clock.seconds_left !== null) {
    return `GPUs idle for ${duration(clock.idle_seconds)}: this server stops in ${duration(clock.seconds_left)} unless you keep them.`;
  }
  if (clock.idle_seconds <= 0) {
    return `GPUs busy. Servers whose GPUs stay below ${below} for ${duration(clock.warn_after_seconds)} are stopped.`;
  }
  return `GPUs idle (below ${below}) for ${duration(clock.idle_seconds)} of ${duration(clock.warn_after_seconds)} before a warning.`;
}

export class ReclaimWatcher {
  get changed(): ISignal<this, IReclaimState | null> {
    return this._changed;
  }

  get state(): IReclaimState | null {
    return this._state;
  }

  start(): void {
    document.addEventListener('visibilitychange', this._onVisible);
    void this._poll();
  }

  dispose(): void {
    document.removeEventListener('visibilitychange', this._onVisible);
    window.clearTimeout(this._timer);
  }

  async keep(): Promise<void> {
    try {
      const clock = await requestAPI<IIdleClock>('reclaim/keep', {
        method: 'POST',
        body: '{}'
      });
      this._set({ enabled: true, server: clock });
      Notification.success(
        clock.postpones_left > 0
          ? `Kept. You may keep these GPUs ${clock.postpones_left} more time${clock.postpones_left === 1 ? '' : 's'}.`
          : 'Kept. This was the last time: use the GPUs or save your work.',
        { autoClose: 5000 }
      );
    } catch (error) {
      const message =
        error instanceof GpuhubAPIError ? error.message : String(error);
      Notification.error(message, { autoClose: false });
    }
  }

  private _onVisible = (): void => {
    if (!document.hidden) {
      window.clearTimeout(this._timer);
      void this._poll();
    }
  };

  private async _poll(): Promise<void> {
    const warned = this._state?.server?.warned ?? false;
    if (!document.hidden || warned) {
      try {
        this._set(await requestAPI<IReclaimState>('reclaim'));
      } catch (error) {
        console.debug('gpuhub: no reclaim state', error);
      }
    }
    const next = this._state?.server?.warned ? WARNED_MS : CALM_MS;
    this._timer = window.setTimeout(() => void this._poll(), next);
  }

  private _set(state: IReclaimState | null): void {
    this._state = state;
    this._notify(state);
    this._changed.emit(state);
  }

  private _notify(state: IReclaimState | null): void {
    const clock = state?.enabled ? state.server : null;
    if (!clock?.warned || clock.seconds_left === null) {
      if (this._notification !== null) {
        Notification.dismiss(this._notification);
        this._notification = null;
      }
      return;
    }
    const message = `Your GPUs have been idle for ${duration(clock.idle_seconds)}. This server stops in ${duration(clock.seconds_left)} to give them back; your files are safe.`;
    const actions =
      clock.postpones_left > 0
        ? [
            {
              label: KEEP_LABEL,
              caption: `Postpone the stop (${clock.postpones_left} left)`,
              callback: () => void this.keep()
            }
          ]
        : [];
    if (this._notification === null) {
      this._notification = Notification.warning(message, {
        autoClose: false,
        actions
      });
    } else {
      Notification.update({
        id: this._notification,
        message,
        type: 'warning',
        autoClose: false,
        actions
      });
    }
  }

  private _changed = new Signal<this, IReclaimState | null>(this);
  private _notification: string | null = null;
  private _state: IReclaimState | null = null;
  private _timer = 0;
}
