/**
 * A job's log that follows the run: the last lines, refreshed while the job
 * runs and the log is on screen, scrolled to the end unless the reader has
 * scrolled up ("Follow the end" brings it back). Used in the Jobs panel and
 * in a main-area tab.
 */
import { MainAreaWidget } from '@jupyterlab/apputils';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { h } from '../dom';
import { jobsIcon } from './icon';
import { LogFollower } from './model';
import { FINAL_STATUSES, JobStatus } from './types';

/**
 * Papermill ends its "Executing Cell 3" lines with a ruler of dashes and
 * logs each output with a trailing blank line; on screen both are noise.
 * Drop rulers that follow text, and blank lines.
 */
export function tidyLog(text: string): string {
  return text
    .replace(/([^\s-])-{8,}$/gm, '$1')
    .replace(/\n(?:[ \t]*\n)+/g, '\n');
}

export namespace LogPane {
  export interface IOptions {
    jobId: string;
    jobName: string;
    /** Seconds between fetches while the job runs. */
    interval: number;
    /** How many of the last lines to show. */
    lines: number;
    /** True when the log is not on screen: fetching pauses. */
    hidden: () => boolean;
    /** The job's status as last known. */
    status: () => JobStatus;
    /** Offered as "Open in a tab" when given. */
    openInTab?: () => void;
  }
}

export class LogPane {
  constructor(private _opts: LogPane.IOptions) {
    const id = `gpuhub-job-log-${_opts.jobId.replace(/[^A-Za-z0-9_-]/g, '_')}-${++LogPane._count}`;
    this.id = id;
    this._status = h(
      'div',
      { className: 'gpuhub-Job-logStatus' },
      'Loading the log…'
    );
    this._pre = h('pre', {
      className: 'gpuhub-Job-log',
      id,
      role: 'log',
      tabindex: 0,
      'aria-label': `Log of ${_opts.jobName}`
    });
    this._jump = h(
      'button',
      {
        type: 'button',
        className: 'jp-mod-styled gpuhub-Job-action',
        hidden: true
      },
      'Follow the end'
    );
    this._jump.addEventListener('click', () => {
      this._pre.scrollTop = this._pre.scrollHeight;
      this._jump.hidden = true;
    });
    this._pre.addEventListener('scroll', () => {
      this._jump.hidden = this._atBottom();
    });
    const tools = h('div', { className: 'gpuhub-Job-logTools' }, this._jump);
    if (_opts.openInTab) {
      const tab = h(
        'button',
        { type: 'button', className: 'gpuhub-Job-linkButton' },
        'Open in a tab'
      );
      tab.setAttribute(
        'aria-label',
        `Open the log of ${_opts.jobName} in a tab`
      );
      tab.addEventListener('click', () => _opts.openInTab!());
      tools.append(tab);
    }
    this.node = h(
      'div',
      { className: 'gpuhub-Job-logPane' },
      this._status,
      this._pre,
      tools
    );
    this._follower = new LogFollower(_opts.jobId, {
      interval: _opts.interval,
      tail: _opts.lines,
      hidden: _opts.hidden
    });
    this._follower.changed.connect(this._render, this);
  }

  readonly id: string;
  readonly node: HTMLElement;

  /** Fetch now (shown again, or the job just ended: its last word). */
  refresh(): void {
    void this._follower.refresh();
  }

  dispose(): void {
    this._follower.dispose();
  }

  private _render(follower: LogFollower): void {
    const stick = this._atBottom();
    const text = tidyLog(follower.text);
    if (this._pre.textContent !== text) {
      this._pre.textContent = text;
    }
    this._pre.hidden = !text; // no empty box while waiting for the first lines
    if (stick) {
      this._pre.scrollTop = this._pre.scrollHeight;
    }
    this._jump.hidden = this._atBottom();
    const final = FINAL_STATUSES.has(this._opts.status());
    let status = '';
    if (follower.error) {
      status = `Could not load the log: ${follower.error}`;
    } else if (!follower.text) {
      status = final
        ? 'The job wrote no log.'
        : this._opts.status() === 'queued'
          ? 'Queued: the log starts when the job runs.'
          : 'Waiting for the first lines…';
    } else if (!final) {
      status = `Following the last ${this._opts.lines} lines.`;
    }
    this._status.textContent = status;
    this._status.hidden = !status;
  }

  private _atBottom(): boolean {
    const pre = this._pre;
    return pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
  }

  private static _count = 0;
  private _follower: LogFollower;
  private _jump: HTMLButtonElement;
  private _pre: HTMLElement;
  private _status: HTMLElement;
}

/** A job's log in a main-area tab, for reading a long run side by side with code. */
export class JobLogWidget extends MainAreaWidget<Widget> {
  constructor(options: Omit<LogPane.IOptions, 'hidden' | 'openInTab'>) {
    const content = new Widget();
    content.addClass('gpuhub-JobLogTab');
    super({ content });
    this._pane = new LogPane({ ...options, hidden: () => !this.isVisible });
    content.node.append(this._pane.node);
    this.id = `gpuhub-job-log-tab-${options.jobId}`;
    this.title.label = `Log: ${options.jobName}`;
    this.title.icon = jobsIcon;
    this.title.closable = true;
  }

  /** The job's status changed (the panel tells): fetch its last lines. */
  refresh(): void {
    this._pane.refresh();
  }

  dispose(): void {
    this._pane.dispose();
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._pane.refresh();
  }

  private _pane: LogPane;
}
