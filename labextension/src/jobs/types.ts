/**
 * Shapes of `/gpuhub/api/jobs` answers (see `gpuhub_lab/jobs_api.py` and
 * `gpuhub.jobs.model.JobRecord.to_json`).
 */

import type { IEstimate } from '../gpu/holdings';

/**
 * A job kind's name ("job", "pytorchjob", ...): the server's, as its options
 * list them (`IKindOption`); the lab names none itself.
 */
export type JobKind = string;
/**
 * A job's status. `queued`: accepted, and held by the cluster's queue
 * (Kueue) until GPUs are free; then `pending` while its pods start.
 */
export type JobStatus =
  'queued' | 'pending' | 'running' | 'succeeded' | 'failed' | 'cancelled';

/**
 * Every status, active (not ended: polled, can be cancelled) or final. A
 * Record, so a status added to `JobStatus` must be placed here.
 */
const PHASES: Record<JobStatus, 'active' | 'final'> = {
  queued: 'active',
  pending: 'active',
  running: 'active',
  succeeded: 'final',
  failed: 'final',
  cancelled: 'final'
};

/** Ended: succeeded, failed or cancelled. Any other status is active. */
export const FINAL_STATUSES: ReadonlySet<string> = new Set(
  (Object.keys(PHASES) as JobStatus[]).filter(s => PHASES[s] === 'final')
);

export interface IFailedCell {
  index: number;
  execution_count: number | null;
  source: string;
  ename: string;
  evalue: string;
  /** The error's last lines as the kernel printed them (traceback or stderr). */
  error_lines?: string;
}

export interface IJob {
  id: string;
  name: string;
  kind: JobKind;
  backend: string;
  status: JobStatus;
  owner: string;
  notebook: string;
  created: string;
  started: string | null;
  finished: string | null;
  elapsed: number | null;
  image: string | null;
  cpu: string | null;
  memory: string | null;
  gpu_type: string | null;
  gpus: number;
  workers: number;
  gpu: string;
  parameters: Record<string, unknown>;
  output: string | null;
  url: string | null;
  /** While queued: 1 for next in line; null (or absent) when the queue does not say. */
  queue_position?: number | null;
  /** The server's words on the state, e.g. why a job is queued. */
  message: string | null;
  /** Waiting for GPUs (queued, pending): the hub's estimated start, null where it has none. */
  estimate?: IEstimate | null;
  /** That estimate in the hub's words ("Likely to start around 14:30 UTC, ..."). */
  estimate_text?: string | null;
  error: string | null;
  failed_cell: IFailedCell | null;
  progress: { done: number; total: number } | null;
}

/**
 * A kind the server offers, with what the dialog and the panel need to know
 * of it (`gpuhub.jobs.kinds.base.JobKind.facts`, docs/jobs.md): a new kind
 * needs no change here.
 */
export interface IKindOption {
  kind: JobKind;
  /** How sentences name it: "training job", "PyTorchJob". */
  label: string;
  available: boolean;
  reason: string | null;
  /** It runs the notebook on several workers at once (`workers`). */
  distributed: boolean;
  /** It runs through a runtime the admin offers (`runtime`, `runtimes`). */
  takes_runtime: boolean;
  /**
   * Where its runs live when they are not gpuhub's ("Kubeflow Pipelines"):
   * a choice of its own in the dialog; null for the kinds gpuhub runs.
   */
  runs_in: string | null;
  /** Why it cannot have GPUs of a type claimed through DRA; null if it can. */
  no_claims: string | null;
  /** What the dialog says of it where it is a choice of its own. */
  description: string;
  /** How the panel names the page of one of its jobs (`IJob.url`). */
  run_page: string;
  /** It runs on this server, whose GPUs `IJobOptions.local` describes. */
  here: boolean;
}

export interface IImageOption {
  key: string;
  display_name: string;
  description?: string | null;
}

export interface IGpuTypeOption {
  key: string;
  display_name: string;
  description?: string | null;
  max_gpus: number;
  mig: boolean;
  /** Claimed through DRA: a kind with `no_claims` cannot have it. */
  dra?: boolean;
  /**
   * How the type shares its devices: by memory (a job gets `default` of one
   * device's `memory`, as quantities like "8G"), or by time (`replicas` units
   * per device); null or absent for whole GPUs.
   */
  sharing?:
    | {
        kind: 'memory';
        memory: string;
        min: string;
        max: string;
        default: string;
      }
    | { kind: 'time'; replicas: number }
    | null;
}

/** `GET /gpuhub/api/jobs/options`: what this user may choose. */
export interface IJobOptions {
  kinds: IKindOption[];
  available: boolean;
  reason: string | null;
  kubernetes: boolean;
  max_workers: number;
  /** The runtimes the admin offers (for the kinds that take one), and the default. */
  runtimes?: string[];
  default_runtime?: string | null;
  /** Longest job name the server takes; its default name is cut there. */
  max_name_length: number;
  local: { gpus: number; gpu_type: string | null } | null;
  images?: IImageOption[];
  custom_images?: boolean;
  gpu_types?: IGpuTypeOption[];
  max_gpus?: number;
  /** What the server fills in for a field a request leaves out (%submit, the API). */
  defaults?: { gpus: number; gpu_type?: string };
  /**
   * On a cluster: the whole GPUs the user's quota (which their servers share)
   * leaves for a job, and why none when it leaves none; null where it does
   * not apply or the hub does not say.
   */
  quota?: { left: number; note: string | null } | null;
  cpu?: { min: number; max: number; default: string };
  memory?: { min: string; max: string; default: string };
}

/** The body of `POST /gpuhub/api/jobs` (docs/architecture.md). */
export interface ISubmitBody {
  notebook: string;
  kind: JobKind;
  image?: string;
  cpu?: number | string;
  memory?: string;
  gpu_type?: string;
  gpus?: number | string;
  workers?: number | string;
  /** The runtime of a kind that takes one (`IKindOption.takes_runtime`). */
  runtime?: string;
  parameters: Record<string, unknown>;
  name?: string;
}

export interface ISubmitReply {
  id: string;
  status: JobStatus;
  url: string | null;
  job: IJob;
  /**
   * What the submit could not do as asked, in one sentence: parameters for a
   * notebook without a cell tagged "parameters" were neither run nor recorded.
   */
  warning?: string;
}
