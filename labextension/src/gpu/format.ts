/** Human figures for the GPU panel and the status bar. */
import { IAssigned } from './types';

const GIB = 1024 ** 3;

export function gib(bytes: number | null | undefined, digits = 1): string {
  return bytes === null || bytes === undefined
    ? '–'
    : `${(bytes / GIB).toFixed(digits)} GiB`;
}

export function percent(value: number | null | undefined): string {
  return value === null || value === undefined
    ? 'n/a'
    : `${Math.round(value)} %`;
}

export function unit(value: number | null | undefined, suffix: string): string {
  return value === null || value === undefined
    ? ''
    : `${Math.round(value)} ${suffix}`;
}

/** The last path segment: what a person calls the notebook. */
export function basename(path: string): string {
  const parts = path.split('/');
  return parts[parts.length - 1] || path;
}

/**
 * "GPUs 0, 1 (NVIDIA RTX A6000) assigned", "Your share: 8 GB of GPU 3 (T4)": what the hub
 * gave this server.
 */
export function assignedText(assigned: IAssigned): string {
  if (assigned.share_text) {
    return `Your share: ${assigned.share_text}`;
  }
  const noun = assigned.devices.length === 1 ? 'GPU' : 'GPUs';
  return `${noun} ${assigned.devices.join(', ')} (${assigned.gpu_type}) assigned`;
}
