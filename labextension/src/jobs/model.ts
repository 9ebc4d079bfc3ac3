/**
 * The user's jobs, kept fresh with a lumino `Poll`: fast while the panel is
 * open (a job submitted by %submit shows within one poll), slow while the
 * panel is closed but a job is still active, queued in the cluster's queue,
 * pending or running (so its end can be announced), in standby when the
 * browser tab is hidden or nothing runs and nobody looks, backing off after
 * errors. `finished` fires for each job seen to end while the page is open.
 */
import { IDisposable } from '@lumino/disposable';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { GpuhubAPIError } from '../api';
import { JobsAPI } from './client';
import { FINAL_STATUSES, IJob } from './types';

export namespace JobsModel {
  export interface IOptions {
    /** Seconds between polls while the panel is open. */
    activeInterval: number;
    /** Seconds between polls while the panel is closed and a job runs. */
    idleInterval: number;
    /** True when nobody can see the jobs: polling pauses. */
    hidden: () => boolean;
  }
}

export class JobsModel implements IDisposable {
  constructor(options: JobsModel.IOptions) {
    this._options = { ...options };
    this._poll = new Poll({
      auto: true,
      factory: () => this._fetch(),
      frequency: {
        interval: this._intervalMs(),
        backoff: true,
        max: 5 * 60 * 1000
      },
      name: 'gpuhub:jobs',
      standby: () => document.hidden || (options.hidden() && !this.active)
    });
  }

  /** A job this page saw running has ended (succeeded, failed or cancelled). */
  get finished(): ISignal<this, IJob> {
    return this._finished;
  }

  /** Emitted after every poll, successful or not. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Newest first; null until the first answer. */
  get jobs(): IJob[] | null {
    return this._jobs;
  }

  /** Why the last poll failed (one sentence), or null. */
  get error(): string | null {
    return this._error;
  }

  /**
   * Some job has not ended: queued, pending or running; a
   * status this page does not know yet counts too, so its end is still seen.
   */
  get active(): boolean {
    return (this._jobs ?? []).some(job => !FINAL_STATUSES.has(job.status));
  }

  configure(activeInterval: number, idleInterval: number): void {
    this._options.activeInterval = activeInterval;
    this._options.idleInterval = idleInterval;
    this._applyFrequency();
  }

  /** Poll now (after a submit or cancel, or when the panel is shown). */
  refresh(): Promise<void> {
    return this._poll.refresh();
  }

  /** Put a job the server just answered with into the list at once. */
  upsert(job: IJob): void {
    const jobs = (this._jobs ?? []).filter(j => j.id !== job.id);
    this._setJobs(
      [job, ...jobs].sort((a, b) => b.created.localeCompare(a.created))
    );
    this._applyFrequency();
    this._changed.emit();
  }

  async cancel(id: string): Promise<IJob> {
    const job = await JobsAPI.cancel(id);
    this.upsert(job);
    return job;
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    Signal.clearData(this);
  }

  private _intervalMs(): number {
    // While the panel is open, every poll may bring a job submitted elsewhere (%submit,
    // the REST API): poll at the active pace so it shows within one poll. Hidden, only a
    // running job's end is awaited, at the idle pace.
    const seconds = !this._options.hidden()
      ? this._options.activeInterval
      : this._options.idleInterval;
    return Math.max(0.5, seconds) * 1000;
  }

  private _applyFrequency(): void {
    const interval = this._intervalMs();
    if (this._poll.frequency.interval !== interval) {
      this._poll.frequency = { ...this._poll.frequency, interval };
    }
  }

  private async _fetch(): Promise<void> {
    try {
      this._setJobs(await JobsAPI.list());
      this._error = null;
    } catch (error) {
      this._error =
        error instanceof GpuhubAPIError ? error.message : String(error);
      this._changed.emit();
      throw error; // the poll backs off
    }
    this._applyFrequency();
    this._changed.emit();
  }

  /** Keep the list, and announce jobs that ended since the last answer. */
  private _setJobs(jobs: IJob[]): void {
    const before = new Map((this._jobs ?? []).map(j => [j.id, j.status]));
    this._jobs = jobs;
    for (const job of jobs) {
      const was = before.get(job.id);
      if (was && !FINAL_STATUSES.has(was) && FINAL_STATUSES.has(job.status)) {
        this._finished.emit(job);
      }
    }
  }

  private _changed = new Signal<this, void>(this);
  private _error: string | null = null;
  private _finished = new Signal<this, IJob>(this);
  private _jobs: IJob[] | null = null;
  private _options: JobsModel.IOptions;
  private _poll: Poll;
}

/**
 * Follows one job's log: polls the last `tail` lines while the job runs
 * (and the log is on screen), once more when it ends, then stops.
 */
export class LogFollower implements IDisposable {
  constructor(
    readonly jobId: string,
    options: { interval: number; tail: number; hidden: () => boolean }
  ) {
    this._tail = options.tail;
    this._poll = new Poll({
      auto: true,
      factory: () => this._fetch(),
      frequency: {
        interval: Math.max(0.5, options.interval) * 1000,
        backoff: true,
        max: 60 * 1000
      },
      name: `gpuhub:job-log:${jobId}`,
      standby: () => document.hidden || options.hidden()
    });
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get text(): string {
    return this._text;
  }

  get error(): string | null {
    return this._error;
  }

  /** Fetch now (e.g. when the log is opened again). */
  refresh(): Promise<void> {
    return this._poll.isDisposed ? Promise.resolve() : this._poll.refresh();
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._poll.dispose();
    Signal.clearData(this);
  }

  private async _fetch(): Promise<void> {
    try {
      const answer = await JobsAPI.logs(this.jobId, this._tail);
      this._error = null;
      if (answer.logs !== this._text) {
        this._text = answer.logs;
      }
      if (FINAL_STATUSES.has(answer.status)) {
        // The run is over and this was its last word: stop asking.
        this._poll.dispose();
      }
    } catch (error) {
      this._error =
        error instanceof GpuhubAPIError ? error.message : String(error);
      if (error instanceof GpuhubAPIError && error.status === 404) {
        this._poll.dispose();
      }
      if (!this._disposed) {
        this._changed.emit();
      }
      throw error;
    }
    if (!this._disposed) {
      this._changed.emit();
    }
  }

  private _changed = new Signal<this, void>(this);
  private _disposed = false;
  private _error: string | null = null;
  private _poll: Poll;
  private _tail: number;
  private _text = '';
}
