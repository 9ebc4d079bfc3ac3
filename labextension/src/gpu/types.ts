/** The shape of `GET /gpuhub/api/metrics` (see docs/architecture.md and metrics/handlers.py). */

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

/** The GPUs the hub gave this server (from its spawner's environment), driver or not. */
export interface IAssigned {
  /** Indices as CUDA numbers them (or UUIDs where the spawner gave UUIDs). */
  devices: (number | string)[];
  /** The GPU type's display name: "NVIDIA A100 80GB", "GPU" when unnamed. */
  gpu_type: string;
  simulated: boolean;
  /** A share of one GPU: what it counts as (0.5), null for whole GPUs. */
  share?: number | null;
  /** Its GPU memory in bytes (shared by memory), else null. */
  gpu_memory?: number | null;
  /** "8 GB of GPU 3 (T4)", "0.25 of GPU 0 (A10, time-sliced)"; null for whole GPUs. */
  share_text?: string | null;
}

export interface IMetrics {
  available: boolean;
  /** Null for a CPU-only server (or a plain JupyterLab outside a hub). */
  assigned?: IAssigned | null;
  reason: string | null;
  /** Seconds between two server samples: polling faster gains nothing. */
  interval: number;
  min_interval: number;
  /** "nvml", "dcgm" or "simulated". */
  source: string;
  time?: number;
  gpus: IGpu[];
  history: IHistoryEntry[];
}
