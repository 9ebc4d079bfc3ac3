/** Fakes shared by the jobs tests (not a test file: no `.spec`). */
import { IJob, IJobOptions, IKindOption } from '../../jobs/types';

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

/** A kind as the server describes it (`IKindOption`): a kind gpuhub runs by default. */
export function kind(
  over: Partial<IKindOption> & { kind: string }
): IKindOption {
  return {
    label: over.kind,
    available: true,
    reason: null,
    distributed: false,
    takes_runtime: false,
    runs_in: null,
    no_claims: null,
    description: '',
    run_page: 'Run page',
    here: false,
    ...over
  };
}

/**
 * The options of a cluster's server (`local`: of a workstation's, where the
 * training job runs here), with gpuhub's kinds as the server describes them.
 */
export function jobOptions(over: Partial<IJobOptions> = {}): IJobOptions {
  return {
    kinds: [
      kind({ kind: 'job', label: 'training job', here: !!over.local }),
      kind({ kind: 'pytorchjob', label: 'PyTorchJob', distributed: true }),
      kind({
        kind: 'tfjob',
        label: 'TFJob',
        distributed: true,
        available: false,
        reason: 'The TFJob operator is not installed.'
      }),
      kind({
        kind: 'trainjob',
        label: 'TrainJob',
        distributed: true,
        takes_runtime: true,
        no_claims:
          "Kubeflow Trainer has no field for a node's DRA resource claims"
      }),
      kind({
        kind: 'pipeline',
        label: 'pipeline step',
        runs_in: 'Kubeflow Pipelines',
        no_claims:
          "Kubeflow Pipelines has no field for a step's DRA resource claims",
        description:
          'The notebook as a one-step Kubeflow pipeline; its run page links from the Jobs panel.',
        run_page: 'KFP run page'
      })
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
