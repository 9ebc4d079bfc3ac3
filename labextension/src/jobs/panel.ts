/**
 * The Jobs sidebar panel: the user's jobs with live status, elapsed time,
 * GPUs, a log that follows the run, cancel, the KFP run link, the executed
 * notebook, and the failing cell of a failed run.
 *
 * Items are kept by job id and updated in place, so focus, open logs and
 * scroll positions survive every poll.
 */
import { Dialog, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { h, setText } from '../dom';
import {
  elapsedSeconds,
  formatDuration,
  formatTime,
  kindLabel,
  parameterSummary,
  plural,
  statusText
} from './format';
import { jobsIcon } from './icon';
import { LogPane } from './log';
import { JobsModel } from './model';
import { formatParameterValue } from './params';
import { FINAL_STATUSES, IJob, IKindOption } from './types';

/** "1 core", "4 cores", "500m CPU" (Kubernetes millicores as the server wrote them). */
function cpuText(cpu: string | null | undefined): string {
  if (cpu === null || cpu === undefined) {
    return '? cores';
  }
  return /^\d+(\.\d+)?$/.test(cpu) ? plural(Number(cpu), 'core') : `${cpu} CPU`;
}

export namespace JobsPanel {
  export interface IOptions {
    model: JobsModel;
    /** Open the "Run on cluster" dialog for the current notebook. */
    runCurrent: () => void;
    /** Whether there is a notebook to run (the header button's state). */
    currentNotebook: () => string | null;
    /** Open a file (the executed notebook, or the source) in JupyterLab. */
    open: (path: string) => void;
    /** Open a job's executed notebook, in a tab named after the job. */
    openResult: (job: IJob) => void;
    /** Open a job's log in a main-area tab. */
    openLog: (job: IJob) => void;
    logInterval: number;
    logLines: number;
  }
}

export class JobsPanel extends Widget {
  constructor(options: JobsPanel.IOptions) {
    super();
    this._opts = options;
    this.id = 'gpuhub-jobs-panel';
    this.addClass('gpuhub-SidePanel');
    this.addClass('gpuhub-JobsPanel');
    this.title.icon = jobsIcon;
    this.title.caption = 'Jobs: notebooks running in the background';
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', 'Jobs');

    this._runButton = h(
      'button',
      {
        type: 'button',
        className: 'jp-mod-styled jp-mod-accept gpuhub-JobsPanel-run'
      },
      'Run as job…'
    );
    this._runButton.addEventListener('click', () => options.runCurrent());
    this._runHint = h('div', { className: 'gpuhub-JobsPanel-hint' });
    this._error = h('div', {
      className: 'gpuhub-JobsPanel-error',
      role: 'status',
      hidden: true
    });
    this._empty = h(
      'div',
      { className: 'gpuhub-JobsPanel-empty', hidden: true },
      h('p', {}, h('strong', {}, 'No jobs yet.')),
      h(
        'p',
        {},
        'A job runs a copy of a notebook from top to bottom on the GPUs you choose, ' +
          'while you keep working here. You can follow its log, and open the executed ' +
          'notebook, with every output, when it is done.'
      ),
      h(
        'p',
        {},
        'To start one, open a notebook and choose ',
        (this._runName = h('em', {}, 'Run as job')),
        ' in its toolbar, the button above, or the command palette (GPU section). ' +
          'Tag a cell \u201cparameters\u201d to set values per run.'
      )
    );
    this._loading = h(
      'div',
      { className: 'gpuhub-JobsPanel-hint' },
      'Loading jobs…'
    );
    this._list = h('ul', {
      className: 'gpuhub-JobsPanel-list',
      'aria-label': 'Your jobs'
    });
    this.node.append(
      h(
        'div',
        { className: 'gpuhub-JobsPanel-header' },
        h(
          'h2',
          { className: 'gpuhub-SidePanel-title gpuhub-JobsPanel-title' },
          'Jobs'
        ),
        this._runButton,
        this._runHint
      ),
      this._error,
      this._loading,
      this._empty,
      this._list
    );
    options.model.changed.connect(this._render, this);
    this._render();
  }

  /** Re-check whether a notebook is open (the shell's current widget changed). */
  /** "Run as job" locally, "Run on cluster" on Kubernetes (known once options load). */
  setRunLabel(label: string, onCluster: boolean): void {
    this._runButton.textContent = `${label}…`;
    this._runName.textContent = label;
    this.title.caption = onCluster
      ? 'Jobs: notebooks running on the cluster'
      : 'Jobs: notebooks running in the background on this server';
  }

  /** How the server names each kind (the options' `label`), for the job lines. */
  setKinds(kinds: readonly IKindOption[]): void {
    this._kinds = kinds;
    for (const item of this._items.values()) {
      item.tick();
    }
  }

  updateRunButton(): void {
    const path = this._opts.currentNotebook();
    this._runButton.disabled = path === null;
    this._runHint.textContent = path
      ? `Current notebook: ${path}`
      : 'Open a notebook to run it as a job.';
  }

  /** Open a job's log and bring it into view (after a submit). */
  follow(jobId: string): void {
    this._followOnArrival = jobId;
    this._render();
  }

  configure(logInterval: number, logLines: number): void {
    this._opts.logInterval = logInterval;
    this._opts.logLines = logLines;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    for (const item of this._items.values()) {
      item.dispose();
    }
    this._items.clear();
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this.updateRunButton();
    void this._opts.model.refresh();
    for (const item of this._items.values()) {
      item.wake();
    }
  }

  private _render(): void {
    const { model } = this._opts;
    this.updateRunButton();
    this._error.hidden = model.error === null;
    this._error.textContent = model.error
      ? `Could not refresh the jobs: ${model.error} Retrying.`
      : '';
    const jobs = model.jobs;
    this._loading.hidden = jobs !== null || model.error !== null;
    this._empty.hidden = jobs === null || jobs.length > 0;
    if (jobs === null) {
      return;
    }
    const seen = new Set<string>();
    let previous: ChildNode | null = null;
    for (const job of jobs) {
      seen.add(job.id);
      let item = this._items.get(job.id);
      if (!item) {
        item = new JobItem(job, this._opts, model, () => this._kinds);
        this._items.set(job.id, item);
      } else {
        item.update(job);
      }
      // Keep DOM order = list order without re-appending nodes that are in place.
      const expected: ChildNode | null = previous
        ? previous.nextSibling
        : this._list.firstChild;
      if (expected !== item.node) {
        this._list.insertBefore(item.node, expected);
      }
      previous = item.node;
    }
    for (const [id, item] of this._items) {
      if (!seen.has(id)) {
        item.node.remove();
        item.dispose();
        this._items.delete(id);
      }
    }
    if (this._followOnArrival) {
      const item = this._items.get(this._followOnArrival);
      if (item) {
        this._followOnArrival = null;
        item.showLog(true);
        item.node.scrollIntoView({ block: 'nearest' });
      }
    }
  }

  private _empty: HTMLElement;
  private _error: HTMLElement;
  private _followOnArrival: string | null = null;
  private _items = new Map<string, JobItem>();
  private _kinds: readonly IKindOption[] | null = null;
  private _list: HTMLElement;
  private _loading: HTMLElement;
  private _opts: JobsPanel.IOptions;
  private _runButton: HTMLButtonElement;
  private _runName!: HTMLElement;
  private _runHint: HTMLElement;
}

/** One job in the list. */
class JobItem {
  constructor(
    job: IJob,
    private _opts: JobsPanel.IOptions,
    private _model: JobsModel,
    private _kinds: () => readonly IKindOption[] | null
  ) {
    this._job = job;
    const titleId = `gpuhub-job-${cssSafe(job.id)}-title`;
    this.node = h('li', {
      className: 'gpuhub-Job',
      'aria-labelledby': titleId,
      'data-job-id': job.id
    });
    this._title = h('span', { className: 'gpuhub-Job-name', id: titleId });
    this._badge = h('span', { className: 'gpuhub-Job-badge' });
    this._meta = h('div', { className: 'gpuhub-Job-meta' });
    this._summary = h('div', { className: 'gpuhub-Job-summary' });
    this._message = h('div', { className: 'gpuhub-Job-message' });
    this._failure = h('div', { className: 'gpuhub-Job-failure', hidden: true });
    this._estimateText = h('summary', {});
    this._estimateWhy = h('ul', {});
    this._estimate = h(
      'details',
      { className: 'gpuhub-Job-estimate', hidden: true },
      this._estimateText,
      this._estimateWhy
    );
    this._progress = h('progress', {
      className: 'gpuhub-Job-progress',
      max: 1,
      value: 0
    });
    this._actions = h('div', { className: 'gpuhub-Job-actions' });
    this._logToggle = this._button('Show log', () =>
      this.showLog(!this._logOpen)
    );
    this._logToggle.setAttribute('aria-expanded', 'false');
    this._openResult = this._button('Open result', () => {
      if (this._job.output) {
        this._opts.openResult(this._job);
      }
    });
    this._runPage = h(
      'a',
      {
        className: 'gpuhub-Job-link',
        target: '_blank',
        rel: 'noopener noreferrer'
      },
      'Run page'
    );
    this._cancel = this._button(
      'Cancel',
      () => void this._confirmCancel(),
      'gpuhub-mod-warn'
    );
    this._actions.append(
      this._logToggle,
      this._openResult,
      this._runPage,
      this._cancel
    );
    this._detailsList = h('dl', { className: 'gpuhub-Job-detailsList' });
    this._details = h(
      'details',
      { className: 'gpuhub-Job-details' },
      h('summary', {}, 'Details'),
      this._detailsList
    );

    this.node.append(
      h('div', { className: 'gpuhub-Job-head' }, this._title, this._badge),
      this._summary,
      this._meta,
      this._progress,
      this._message,
      this._estimate,
      this._failure,
      this._details,
      this._actions
    );
    this.update(job);
  }

  readonly node: HTMLLIElement;

  update(job: IJob): void {
    this._job = job;
    this._title.textContent = job.name;
    this._title.title = `${job.notebook} (${job.id})`;
    // Two runs of one notebook share a name: when they started and with what tells them apart.
    const summary = [
      `${job.status === 'queued' ? 'queued since' : 'started'} ${formatTime(job.started ?? job.created)}`,
      parameterSummary(job.parameters)
    ]
      .filter(Boolean)
      .join(' \u00b7 ');
    if (this._summary.textContent !== summary) {
      this._summary.textContent = summary;
    }
    // "Queued, 3rd in line": the place in the cluster's queue, the reason in the message.
    const status = statusText(job);
    this._badge.textContent = status;
    this._badge.className = `gpuhub-Job-badge gpuhub-mod-${job.status}`;
    this._badge.setAttribute('aria-label', `Status: ${status}`);
    this.node.dataset.status = job.status;
    this.tick();

    const done = job.progress?.done ?? 0;
    const total = job.progress?.total ?? 0;
    this._progress.hidden = !(job.status === 'running' && total > 0);
    this._progress.max = Math.max(total, 1);
    this._progress.value = done;
    this._progress.setAttribute('aria-label', `${done} of ${total} cells run`);

    this._message.textContent =
      job.status === 'failed'
        ? (job.error ?? job.message ?? '')
        : (job.message ?? '');
    this._message.hidden = !this._message.textContent;
    this._message.classList.toggle('gpuhub-mod-error', job.status === 'failed');

    this._renderEstimate(job);
    this._renderFailure(job);
    this._renderDetails(job);

    this._openResult.hidden = !job.output;
    this._openResult.title = job.output ? `Open ${job.output}` : '';
    const url = safeUrl(job.url);
    this._runPage.hidden = url === null;
    if (url) {
      this._runPage.href = url;
      this._runPage.title = `${url} (opens in a new tab)`;
    }
    this._cancel.hidden = FINAL_STATUSES.has(job.status);
    this._cancel.setAttribute('aria-label', `Cancel ${job.name}`);
    if (FINAL_STATUSES.has(job.status) && this._lastStatus !== job.status) {
      this._log?.refresh(); // its last word
    }
    this._lastStatus = job.status;
  }

  /**
   * Kind, GPUs and run time. The run time is the server's, from the start and
   * finish it records (finished - started once finished, now - started on its
   * clock while running): never moved on by this browser's clock, so it never
   * goes back when the job ends between two polls.
   */
  tick(): void {
    const job = this._job;
    const seconds =
      job.elapsed ??
      (job.finished ? elapsedSeconds(job.started, job.finished) : null);
    const kinds = this._kinds();
    const parts = [
      kinds ? kindLabel(job.kind, kinds) : '', // known once the options load
      job.gpu, // "CPU only", "2 x NVIDIA A100", "3 workers, 4 x ... each"
      seconds === null
        ? `submitted ${formatTime(job.created)}`
        : formatDuration(seconds)
    ].filter(Boolean);
    const text = parts.join(' \u00b7 ');
    if (this._meta.textContent !== text) {
      this._meta.textContent = text;
    }
    // How the server names the page of a job of its kind ("KFP run page").
    const page = kinds?.find(k => k.kind === job.kind)?.run_page || 'Run page';
    const label = `${page} of ${job.name} (opens in a new tab)`;
    if (this._runPage.textContent !== page) {
      this._runPage.textContent = page;
    }
    if (this._runPage.getAttribute('aria-label') !== label) {
      this._runPage.setAttribute('aria-label', label);
    }
  }

  showLog(open: boolean): void {
    this._logOpen = open;
    this._logToggle.textContent = open ? 'Hide log' : 'Show log';
    this._logToggle.setAttribute('aria-expanded', String(open));
    if (open && !this._log) {
      this._log = new LogPane({
        jobId: this._job.id,
        jobName: this._job.name,
        interval: this._opts.logInterval,
        lines: this._opts.logLines,
        hidden: () => !this._logOpen || !this.node.isConnected,
        status: () => this._job.status,
        openInTab: () => this._opts.openLog(this._job)
      });
      this._logToggle.setAttribute('aria-controls', this._log.id);
      this.node.append(this._log.node);
    } else if (open) {
      this._log?.refresh();
    }
    if (this._log) {
      this._log.node.hidden = !open;
    }
  }

  /** The panel became visible again: refresh an open log at once. */
  wake(): void {
    if (this._logOpen) {
      this._log?.refresh();
    }
  }

  dispose(): void {
    this._log?.dispose();
    this._log = null;
  }

  /** What was asked for: source notebook, resources, parameters, times, id. */
  private _renderDetails(job: IJob): void {
    const params = Object.entries(job.parameters ?? {});
    const rows: [string, string | HTMLElement][] = [];
    const source = h(
      'button',
      {
        type: 'button',
        className: 'gpuhub-Job-linkButton',
        title: `Open ${job.notebook}`
      },
      job.notebook
    );
    source.addEventListener('click', () => this._opts.open(job.notebook));
    rows.push(['Notebook', source]);
    if (job.output) {
      rows.push(['Result', job.output]);
    }
    rows.push(['Image', job.image ?? "This server's image"]);
    const each = job.workers > 1 ? ' per worker' : '';
    rows.push([
      'CPU, memory',
      `${cpuText(job.cpu)}, ${job.memory ?? '?'}${each}`
    ]);
    rows.push(['GPUs', job.gpu]);
    rows.push([
      'Parameters',
      params.length
        ? params.map(([k, v]) => `${k} = ${formatParameterValue(v)}`).join(', ')
        : 'none'
    ]);
    rows.push(['Submitted', formatTime(job.created)]);
    if (job.finished) {
      rows.push(['Finished', formatTime(job.finished)]);
    }
    rows.push(['Job id', job.id]);
    const key = JSON.stringify(
      rows.map(([k, v]) => [k, typeof v === 'string' ? v : v.textContent])
    );
    if (key === this._detailsKey) {
      return;
    }
    this._detailsKey = key;
    this._detailsList.replaceChildren(
      ...rows.flatMap(([term, value]) => [
        h('dt', {}, term),
        h('dd', {}, value)
      ])
    );
  }

  /**
   * Waiting for GPUs: when it likely starts, in the hub's words, its reasons
   * behind the summary (one keyboard stop); updated in place, so an open one
   * stays open across polls.
   */
  private _renderEstimate(job: IJob): void {
    const waiting = job.status === 'queued' || job.status === 'pending';
    const text = waiting ? (job.estimate_text ?? '') : '';
    this._estimate.hidden = !text;
    setText(this._estimateText, text);
    const because = text
      ? (job.estimate?.because ?? []).filter(
          reason => typeof reason === 'string' && reason
        )
      : [];
    const key = because.join('\n');
    if (this._estimateWhy.dataset.key !== key) {
      this._estimateWhy.dataset.key = key;
      this._estimateWhy.replaceChildren(
        ...because.map(reason => h('li', {}, reason))
      );
    }
    this._estimateWhy.hidden = !because.length;
  }
  private _renderFailure(job: IJob): void {
    const cell = job.status === 'failed' ? job.failed_cell : null;
    this._failure.hidden = cell === null;
    if (cell === null) {
      this._failure.textContent = '';
      return;
    }
    const key = JSON.stringify(cell);
    if (this._failureKey === key) {
      return;
    }
    this._failureKey = key;
    // The server's sentence (in the message line) says what failed; here is where.
    const where =
      cell.execution_count !== null
        ? `Failing cell (In [${cell.execution_count}]):`
        : `Failing cell (cell ${cell.index + 1}):`;
    const parts: HTMLElement[] = [
      h('div', { className: 'gpuhub-Job-failureHead' }, where),
      h(
        'pre',
        {
          className: 'gpuhub-Job-cell',
          'aria-label': 'Source of the failing cell',
          tabindex: 0
        },
        cell.source
      )
    ];
    // The error's last lines (where it was raised, and what), as the kernel printed them.
    const lines = cell.error_lines || `${cell.ename}: ${cell.evalue}`;
    parts.push(
      h('div', { className: 'gpuhub-Job-failureHead' }, 'Error:'),
      h(
        'pre',
        {
          className: 'gpuhub-Job-cell gpuhub-Job-errorLines',
          'aria-label': 'The last lines of the error',
          tabindex: 0
        },
        lines
      )
    );
    this._failure.replaceChildren(...parts);
  }

  private async _confirmCancel(): Promise<void> {
    const job = this._job;
    const result = await showDialog({
      title: `Cancel ${job.name}?`,
      body:
        job.backend === 'local'
          ? 'The run stops now. The executed notebook keeps the cells that already ran.'
          : 'The run stops now and its pods are removed. Outputs written so far stay where the job wrote them.',
      buttons: [
        Dialog.cancelButton({ label: 'Keep running' }),
        Dialog.warnButton({
          label: 'Cancel job',
          ariaLabel: `Cancel job ${job.name}`
        })
      ],
      defaultButton: 0
    });
    if (!result.button.accept) {
      return;
    }
    try {
      await this._model.cancel(job.id);
    } catch (error) {
      void showErrorMessage(
        'Could not cancel the job',
        (error as Error).message
      );
    }
  }

  private _button(
    label: string,
    onClick: () => void,
    extra = ''
  ): HTMLButtonElement {
    const button = h(
      'button',
      { type: 'button', className: `jp-mod-styled gpuhub-Job-action ${extra}` },
      label
    );
    button.addEventListener('click', onClick);
    return button;
  }

  private _actions: HTMLElement;
  private _badge: HTMLElement;
  private _cancel: HTMLButtonElement;
  private _details: HTMLDetailsElement;
  private _detailsKey = '';
  private _estimate: HTMLDetailsElement;
  private _estimateText: HTMLElement;
  private _estimateWhy: HTMLElement;
  private _detailsList: HTMLElement;
  private _failure: HTMLElement;
  private _failureKey = '';
  private _job: IJob;
  private _lastStatus: string | null = null;
  private _log: LogPane | null = null;
  private _logOpen = false;
  private _logToggle: HTMLButtonElement;
  private _message: HTMLElement;
  private _meta: HTMLElement;
  private _summary: HTMLElement;
  private _openResult: HTMLButtonElement;
  private _progress: HTMLProgressElement;
  private _runPage: HTMLAnchorElement;
  private _title: HTMLElement;
}

/** Only http(s) links leave the page; anything else (javascript:, data:) is dropped. */
function safeUrl(url: string | null): string | null {
  if (!url) {
    return null;
  }
  try {
    const parsed = new URL(url, window.location.href);
    return parsed.protocol === 'http:' || parsed.protocol === 'https:'
      ? parsed.href
      : null;
  } catch {
    return null;
  }
}

function cssSafe(id: string): string {
  return id.replace(/[^A-Za-z0-9_-]/g, '_');
}
