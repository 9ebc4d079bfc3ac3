/** The shape of `GET /gpuhub/api/metrics` (see DESIGN.md and metrics/handlers.py). */

export interface IGpuProcess {
  pid: number;
  /** Bytes, or null when NVML does not know (some containers). */
  memory_used: number | null;
  kernel_id: string | null;
  /** Notebook path of the kernel's session, relative to the server root. */
  path: string | null;
}

export interface IGpu {
  index: number;
  uuid: string;
  name: string;
  /** Percent, or null where the device has no counter (MIG slices under NVML). */
  utilization: number | null;
  memory_used: number | null;
  memory_total: number | null;
  /** Degrees Celsius. */
  temperature: number | null;
  /** Watts. */
  power: number | null;
  mig: boolean;
  processes: IGpuProcess[];
  /** Why this one device could not be read (the others still are). */
  error?: string | null;
  parent_uuid?: string;
}

export interface IHistoryEntry {
  time: number;
  gpus: {
    uuid: string;
    utilization: number | null;
    memory_used: number | null;
    temperature: number | null;
    power: number | null;
  }[];
}

export interface IMetrics {
  available: boolean;
  reason: string | null;
  /** Seconds between two server samples: polling faster gains nothing. */
  interval: number;
  min_interval: number;
  source: string;
  time?: number;
  gpus: IGpu[];
  history: IHistoryEntry[];
}
