/** Fakes shared by the jobs tests (not a test file: no `.spec`). */
import { IJob, IJobOptions } from '../../jobs/types';

export function job(over: Partial<IJob> = {}): IJob {
  return {
    id: 'j1',
    name: 'train-resnet',
    kind: 'job',
    backend: 'kubernetes',
    status: 'running',
    owner: 'ann',
    notebook: 'work/train.ipynb',
    created: '2025-03-01T10:00:00Z',
    started: '2025-03-01T10:00:05Z',
    finished: null,
    elapsed: 30,
    image: null,
    cpu: '2',
    memory: '8G',
    gpu_type: 'a100',
    gpus: 1,
    workers: 1,
    gpu: '1 x NVIDIA A100',
    parameters: {},
    output: null,
    url: null,
    message: null,
    error: null,
    failed_cell: null,
    progress: null,
    ...over
  };
}

export function jobOptions(over: Partial<IJobOptions> = {}): IJobOptions {
  return {
    kinds: [
      { kind: 'job', label: 'training job', available: true, reason: null },
      {
        kind: 'pytorchjob',
        label: 'PyTorchJob',
        available: true,
        reason: null
      },
      {
        kind: 'tfjob',
        label: 'TFJob',
        available: false,
        reason: 'The TFJob operator is not installed.'
      },
      { kind: 'trainjob', label: 'TrainJob', available: true, reason: null },
      {
        kind: 'pipeline',
        label: 'pipeline step',
        available: true,
        reason: null
      }
    ],
    available: true,
    reason: null,
    kubernetes: true,
    max_workers: 8,
    runtimes: ['torch-distributed', 'deepspeed'],
    default_runtime: 'deepspeed',
    max_name_length: 40,
    local: null,
    images: [
      { key: 'cuda', display_name: 'CUDA notebook', description: 'PyTorch' },
      { key: 'cpu', display_name: 'CPU notebook' }
    ],
    custom_images: true,
    gpu_types: [
      {
        key: 'a100',
        display_name: 'NVIDIA A100',
        max_gpus: 4,
        mig: false
      },
      { key: 'a100-1g', display_name: 'A100 1g.10gb', max_gpus: 1, mig: true }
    ],
    max_gpus: 4,
    defaults: { gpus: 1 },
    cpu: { min: 1, max: 16, default: '4' },
    memory: { min: '1G', max: '64G', default: '16G' },
    ...over
  };
}
