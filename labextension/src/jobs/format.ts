/** Small formatting helpers for the jobs UI. */
import { IJob, IKindOption, JobKind, JobStatus } from './types';

/**
 * A kind as the server names it in `GET /gpuhub/api/jobs/options` (`label`:
 * "training job", "PyTorchJob", ...), capitalised to stand alone; the kind
 * itself when the server did not name it.
 */
export function kindLabel(
  kind: JobKind,
  kinds: readonly IKindOption[] | null | undefined
): string {
  const label = kinds?.find(k => k.kind === kind)?.label || kind;
  return label.charAt(0).toUpperCase() + label.slice(1);
}

export const STATUS_LABELS: Record<JobStatus, string> = {
  queued: 'Queued',
  pending: 'Pending',
  running: 'Running',
  succeeded: 'Succeeded',
  failed: 'Failed',
  cancelled: 'Cancelled'
};

const ORDINAL_SUFFIXES: Record<number, string> = { 1: 'st', 2: 'nd', 3: 'rd' };

/** 1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, 22nd, 101st, 111th. */
export function ordinal(n: number): string {
  const teen = n % 100 >= 11 && n % 100 <= 13;
  return `${n}${(!teen && ORDINAL_SUFFIXES[n % 10]) || 'th'}`;
}

/**
 * A job's status in words: "Running", or for a queued job its place in line,
 * "Queued, 3rd in line" ("Queued" when the queue does not say).
 */
export function statusText(
  job: Pick<IJob, 'status' | 'queue_position'>
): string {
  const label = STATUS_LABELS[job.status] ?? job.status;
  const position = job.queue_position;
  if (
    job.status === 'queued' &&
    typeof position === 'number' &&
    Number.isInteger(position) &&
    position > 0
  ) {
    return `${label}, ${ordinal(position)} in line`;
  }
  return label;
}

/** "42 s", "3 min 07 s", "2 h 05 min". */
export function formatDuration(seconds: number | null): string {
  if (seconds === null || !isFinite(seconds)) {
    return '';
  }
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) {
    return `${s} s`;
  }
  const m = Math.floor(s / 60);
  if (m < 60) {
    return `${m} min ${String(s % 60).padStart(2, '0')} s`;
  }
  const h = Math.floor(m / 60);
  return `${h} h ${String(m % 60).padStart(2, '0')} min`;
}

/** Seconds a job has run: from the server's figure, moved on locally while it runs. */
export function elapsedSeconds(
  started: string | null,
  finished: string | null,
  now: number = Date.now()
): number | null {
  if (!started) {
    return null;
  }
  const start = Date.parse(started);
  const end = finished ? Date.parse(finished) : now;
  return isNaN(start) || isNaN(end) ? null : Math.max(0, (end - start) / 1000);
}

/** "epochs = 3, lr = 0.1, +2 more": what tells two runs of one notebook apart. */
export function parameterSummary(
  parameters: Record<string, unknown> | null | undefined,
  shown = 3,
  width = 14
): string {
  const entries = Object.entries(parameters ?? {});
  const cut = (text: string): string =>
    text.length > width ? `${text.slice(0, width - 1)}…` : text;
  const parts = entries
    .slice(0, shown)
    .map(
      ([k, v]) => `${k} = ${cut(typeof v === 'string' ? v : JSON.stringify(v))}`
    );
  if (entries.length > shown) {
    parts.push(`+${entries.length - shown} more`);
  }
  return parts.join(', ');
}

/** "1 core", "2 cores", "0.5 cores". */
export function plural(count: number, word: string): string {
  return `${count} ${count === 1 ? word : `${word}s`}`;
}

/** The one way the lab writes a moment ("27 Nov 2026, 14:03", the reader's zone). */
export { formatTime } from '../time';
