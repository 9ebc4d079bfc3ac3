import { GpuhubAPIError, requestAPI } from '../../../api';
import {
  CUSTOM_IMAGE,
  FieldName,
  SubmitFields,
  maxGpus
} from '../../../jobs/submit/fields';
import { FormState, gpuAmount, memoryBytes } from '../../../jobs/submit/state';
import { IJobOptions, ISubmitBody } from '../../../jobs/types';
import { formatTime } from '../../../time';
import { settle, until } from '../../utils';
import { jobOptions, kind } from '../fixtures';

jest.mock('../../../api', () => ({
  ...jest.requireActual('../../../api'),
  requestAPI: jest.fn()
}));

const request = requestAPI as jest.MockedFunction<typeof requestAPI>;

interface IForm {
  f: SubmitFields;
  state: FormState;
  form: HTMLFormElement;
}

/** The dialog's fields and state, wired as the dialog wires them, in the document. */
function build(
  options: IJobOptions = jobOptions(),
  suggested: Array<[string, string]> = [],
  notebook = 'work/Train ResNet (v2).ipynb'
): IForm {
  const opts = { notebook, options, suggested };
  // As the dialog does: the fields tell the state, made just after them.
  const f = new SubmitFields(opts, {
    changed: () => state.sync(),
    edited: (field: FieldName) => state.clearError(field)
  });
  const state = new FormState(f, opts);
  const form = document.createElement('form');
  form.append(...f.nodes);
  document.body.append(form);
  state.sync();
  return { f, state, form };
}

/** Type into a control, as a person would. */
function type(input: HTMLInputElement, value: string): void {
  input.value = value;
  input.dispatchEvent(new Event('input', { bubbles: true }));
}

/** The pipeline step's choice: a kind whose runs live elsewhere has one of its own. */
function pipeline(f: SubmitFields): HTMLInputElement {
  return f.elsewhere.get('pipeline')!;
}

function choose(select: HTMLSelectElement | HTMLInputElement, value?: string) {
  if (select instanceof HTMLInputElement) {
    select.checked = true;
  } else {
    select.value = value!;
  }
  select.dispatchEvent(new Event('change', { bubbles: true }));
}

function addParameter({ f, form }: IForm, key: string, value: string): void {
  const add = Array.from(form.querySelectorAll('button')).find(
    b => b.textContent === 'Add parameter'
  )!;
  add.click();
  const row = f.paramRows.lastElementChild!;
  type(row.querySelector('.gpuhub-JobForm-paramKey')!, key);
  type(row.querySelector('.gpuhub-JobForm-paramValue')!, value);
}

beforeEach(() => {
  request.mockReset();
  request.mockReturnValue(new Promise(() => undefined));
});

afterEach(() => {
  document.body.replaceChildren();
});

describe('maxGpus', () => {
  const o = jobOptions();

  it("is the chosen type's limit, else the largest", () => {
    expect(maxGpus(o, 'job', 'a100')).toBe(4);
    expect(maxGpus(o, 'job', 'a100-1g')).toBe(1);
    expect(maxGpus(o, 'job', undefined)).toBe(4);
    expect(maxGpus(o, 'job', 'unknown')).toBe(4);
    expect(maxGpus(jobOptions({ max_gpus: undefined }), 'job', 'x')).toBe(0);
  });

  it('is no more than this server has for a job run here', () => {
    const local = jobOptions({ local: { gpus: 2, gpu_type: 'a100' } });
    expect(maxGpus(local, 'job', 'a100')).toBe(2);
    expect(maxGpus(local, 'job', 'a100-1g')).toBe(1);
    expect(maxGpus(local, 'pipeline', 'a100')).toBe(4);
    expect(
      maxGpus(jobOptions({ local: { gpus: 0, gpu_type: null } }), 'job', 'a100')
    ).toBe(0);
  });
});

describe('SubmitFields', () => {
  it('offers the training kinds the server lists, unavailable ones disabled with why', () => {
    const { f, form } = build();
    const options = Array.from(f.mode.options).map(o => [
      o.value,
      o.textContent,
      o.disabled
    ]);
    expect(options).toEqual([
      ['job', 'Single node', false],
      ['pytorchjob', 'Distributed: PyTorchJob', false],
      ['tfjob', 'Distributed: TFJob (unavailable)', true],
      ['trainjob', 'Distributed: TrainJob', false]
    ]);
    const why = form.querySelector('.gpuhub-JobForm-why')!;
    expect(why.querySelector('summary')!.textContent).toBe(
      'TFJob is unavailable here; why?'
    );
    expect(why.querySelector('p')!.textContent).toBe(
      'The TFJob operator is not installed.'
    );
  });

  it('joins several unavailable kinds, with a reason for each', () => {
    const o = jobOptions();
    o.kinds = o.kinds
      .filter(k => k.kind !== 'trainjob')
      .map(k =>
        k.kind === 'pytorchjob' ? { ...k, available: false, reason: null } : k
      );
    const { f, form } = build(o);
    expect(Array.from(f.mode.options).map(x => x.value)).toEqual([
      'job',
      'pytorchjob',
      'tfjob'
    ]);
    const why = form.querySelector('.gpuhub-JobForm-why')!;
    expect(why.querySelector('summary')!.textContent).toBe(
      'PyTorchJob and TFJob are unavailable here; why?'
    );
    expect(
      Array.from(why.querySelectorAll('p')).map(p => p.textContent)
    ).toEqual([
      'PyTorchJob is not offered on this server.',
      'The TFJob operator is not installed.'
    ]);
  });

  it('starts on the first available training kind', () => {
    const o = jobOptions();
    o.kinds = o.kinds.map(k =>
      k.kind === 'job' ? { ...k, available: false } : k
    );
    const { f, state } = build(o);
    expect(f.training.checked).toBe(true);
    expect(f.mode.value).toBe('pytorchjob');
    expect(state.kind()).toBe('pytorchjob');
  });

  it('starts on the pipeline when no training kind is available', () => {
    const o = jobOptions();
    o.kinds = o.kinds.map(k =>
      k.kind === 'pipeline' ? k : { ...k, available: false }
    );
    const { f, state } = build(o);
    expect(f.training.disabled).toBe(true);
    expect(pipeline(f).checked).toBe(true);
    expect(state.kind()).toBe('pipeline');
    expect(f.mode.disabled).toBe(true);
  });

  it('disables the pipeline choice with the reason', () => {
    const o = jobOptions();
    o.kinds = o.kinds.map(k =>
      k.kind === 'pipeline'
        ? { ...k, available: false, reason: 'No Kubeflow Pipelines here.' }
        : k
    );
    const { f } = build(o);
    expect(pipeline(f).disabled).toBe(true);
    const help = document.getElementById(
      pipeline(f).getAttribute('aria-describedby')!
    )!;
    expect(help.textContent).toBe('No Kubeflow Pipelines here.');
  });

  it('fills in the defaults of the options', () => {
    const { f, form } = build();
    expect(f.cpu.value).toBe('4');
    expect(f.memory.value).toBe('16G');
    expect(f.gpus.value).toBe('1');
    expect(f.gpus.readOnly).toBe(false);
    expect(f.workers.value).toBe('2');
    expect(f.runtime.value).toBe('deepspeed');
    expect(f.image!.value).toBe('cuda');
    expect(Array.from(f.image!.options).map(o => o.value)).toEqual([
      'cuda',
      'cpu',
      CUSTOM_IMAGE
    ]);
    expect(f.gpuType!.value).toBe('a100');
    expect(Array.from(f.gpuType!.options).map(o => o.textContent)).toEqual([
      'NVIDIA A100',
      'A100 1g.10gb (MIG slice)'
    ]);
    expect(form.textContent).toContain('1 to 16 cores.');
    expect(form.textContent).toContain('1G to 64G, written like 16G');
    expect(form.textContent).toContain('CUDA notebook: PyTorch.');
    expect(f.general.hidden).toBe(true);
  });

  it('starts at the default GPU count, within the limit', () => {
    expect(build(jobOptions({ defaults: { gpus: 2 } })).f.gpus.value).toBe('2');
    expect(build(jobOptions({ defaults: { gpus: 9 } })).f.gpus.value).toBe('4');
    expect(build(jobOptions({ defaults: undefined })).f.gpus.value).toBe('1');
  });

  it('cannot ask for GPUs where the limit allows none', () => {
    const { f } = build(jobOptions({ max_gpus: 0, gpu_types: [] }));
    expect(f.gpus.value).toBe('0');
    expect(f.gpus.readOnly).toBe(true);
    expect(f.gpuType).toBeNull();
  });

  it('starts from what the quota leaves, and says why when it leaves none', () => {
    const note =
      'Your server holds your 1 GPU: this job runs without one, or stop the server first.';
    // The server lowers the default to what the quota leaves (0) and sends the sentence.
    const { f } = build(
      jobOptions({ defaults: { gpus: 0 }, quota: { left: 0, note } })
    );
    expect(f.gpus.value).toBe('0');
    expect(f.gpus.readOnly).toBe(false); // the limit allows GPUs; the quota is spent now
    expect(f.gpusHelp.textContent).toBe(note);
    type(f.gpus, '1');
    expect(f.gpusHelp.textContent).toBe(
      `${note} 1 is more than your quota leaves; the server will refuse it.`
    );
  });

  it('says how many GPUs the quota leaves when that is fewer than the limit', () => {
    const { f } = build(jobOptions({ quota: { left: 2, note: null } }));
    expect(f.gpus.value).toBe('1');
    expect(f.gpusHelp.textContent).toBe(
      '0 for a CPU-only job; up to 2 for you, what your GPU quota leaves.'
    );
    type(f.gpus, '3');
    expect(f.gpusHelp.textContent).toContain(
      '3 is more than that; the server will refuse it.'
    );
  });

  it("preselects this server's GPU type", () => {
    const { f } = build(
      jobOptions({ local: { gpus: 1, gpu_type: 'a100-1g' } })
    );
    expect(f.gpuType!.value).toBe('a100-1g');
  });

  it('offers no image choice when the admin offers none', () => {
    const { f } = build(jobOptions({ images: [], custom_images: false }));
    expect(f.image).toBeNull();
    expect(f.customImage).toBeNull();
  });

  it("suggests the server's default name for the notebook", () => {
    expect(build().f.name.placeholder).toBe('train-resnet-v2');
    expect(build(jobOptions({ max_name_length: 6 })).f.name.placeholder).toBe(
      'train'
    );
    expect(build(jobOptions(), [], 'dir/¿¿¿.ipynb').f.name.placeholder).toBe(
      'notebook'
    );
  });

  it('says why jobs are unavailable at the top', () => {
    const { f } = build(
      jobOptions({ available: false, reason: 'No cluster configured.' })
    );
    expect(f.general.hidden).toBe(false);
    expect(f.general.textContent).toBe('No cluster configured.');
  });

  it("offers the notebook's parameters, its values as placeholders", () => {
    const { f, form } = build(jobOptions(), [
      ['epochs', '3'],
      ['lr', '0.1']
    ]);
    const rows = Array.from(f.paramRows.children).map(row => {
      const key = row.querySelector<HTMLInputElement>(
        '.gpuhub-JobForm-paramKey'
      )!;
      const value = row.querySelector<HTMLInputElement>(
        '.gpuhub-JobForm-paramValue'
      )!;
      return [
        key.value,
        value.value,
        value.placeholder,
        value.getAttribute('aria-label')
      ];
    });
    expect(rows).toEqual([
      ['epochs', '', '3', 'Value of epochs'],
      ['lr', '', '0.1', 'Value of lr']
    ]);
    expect(form.textContent).toContain(
      'Empty values keep the notebook\u2019s own.'
    );
  });

  it('notes a value that looks like JSON but is not', () => {
    const form = build();
    addParameter(form, 'layers', '[64, 128');
    const note = form.f.paramRows.querySelector('.gpuhub-JobForm-paramNote')!;
    expect(note.textContent).toBe('Not valid JSON, so it is passed as text.');
    type(
      form.f.paramRows.querySelector('.gpuhub-JobForm-paramValue')!,
      '[64, 128]'
    );
    expect(note.textContent).toBe('');
  });
});

describe('FormState.body', () => {
  it('is the request as the form stands', () => {
    const { state } = build();
    expect(state.body()).toEqual({
      notebook: 'work/Train ResNet (v2).ipynb',
      kind: 'job',
      parameters: {},
      image: 'cuda',
      cpu: 4,
      memory: '16G',
      gpus: 1,
      gpu_type: 'a100'
    });
  });

  it('sends numbers as numbers and anything else as typed', () => {
    const { f, state } = build();
    type(f.cpu, ' 0.5 ');
    type(f.memory, ' 512Mi ');
    type(f.gpus, '2');
    expect(state.body()).toMatchObject({ cpu: 0.5, memory: '512Mi', gpus: 2 });
    type(f.cpu, '500m');
    type(f.gpus, 'two');
    const body = state.body();
    expect(body.cpu).toBe('500m');
    expect(body.gpus).toBe('two');
    expect(body.gpu_type).toBeUndefined(); // no GPU count, no type
  });

  it('leaves out what is left empty', () => {
    const { f, state } = build();
    type(f.cpu, '  ');
    type(f.memory, '');
    type(f.gpus, '');
    type(f.name, '   ');
    const body = state.body();
    for (const key of ['cpu', 'memory', 'gpus', 'gpu_type', 'name']) {
      expect(body).not.toHaveProperty(key);
    }
  });

  it('sends no GPU type for a CPU-only job', () => {
    const { f, state } = build();
    type(f.gpus, '0');
    expect(state.body().gpus).toBe(0);
    expect(state.body()).not.toHaveProperty('gpu_type');
  });

  it('sends workers for a distributed kind only', () => {
    const { f, state } = build();
    expect(state.body()).not.toHaveProperty('workers');
    choose(f.mode, 'pytorchjob');
    expect(state.body()).toMatchObject({ kind: 'pytorchjob', workers: 2 });
    type(f.workers, ' 3x ');
    expect(state.body().workers).toBe('3x');
  });

  it('sends the runtime for a TrainJob only', () => {
    const { f, state } = build();
    choose(f.mode, 'trainjob');
    expect(state.body()).toMatchObject({
      kind: 'trainjob',
      runtime: 'deepspeed',
      workers: 2
    });
    choose(f.mode, 'pytorchjob');
    expect(state.body()).not.toHaveProperty('runtime');
  });

  it('sends a pipeline step as such', () => {
    const { f, state } = build();
    choose(f.mode, 'pytorchjob');
    choose(pipeline(f));
    const body = state.body();
    expect(body.kind).toBe('pipeline');
    expect(body).not.toHaveProperty('workers');
  });

  it('sends a custom image reference, trimmed', () => {
    const { f, state } = build();
    choose(f.image!, CUSTOM_IMAGE);
    type(f.customImage!, '  ghcr.io/me/train:1  ');
    expect(state.body().image).toBe('ghcr.io/me/train:1');
  });

  it('sends the name, trimmed', () => {
    const { f, state } = build();
    type(f.name, '  sweep-1 ');
    expect(state.body().name).toBe('sweep-1');
  });

  it('reads parameters as JSON or text; empty suggested ones keep the notebook value', () => {
    const form = build(jobOptions(), [
      ['epochs', '3'],
      ['lr', '0.1']
    ]);
    const [epochs] = Array.from(form.f.paramRows.children);
    type(epochs.querySelector('.gpuhub-JobForm-paramValue')!, '10');
    addParameter(form, ' model ', 'resnet50');
    addParameter(form, 'layers', '[64, 128]');
    addParameter(form, 'note', '');
    addParameter(form, '', 'no name: dropped');
    expect(form.state.parameters()).toEqual({
      epochs: 10,
      model: 'resnet50',
      layers: [64, 128],
      note: ''
    });
    expect(form.state.body().parameters).toEqual(form.state.parameters());
  });

  it('drops a parameter whose row was removed', () => {
    const form = build();
    addParameter(form, 'a', '1');
    addParameter(form, 'b', '2');
    const remove = form.f.paramRows.querySelector<HTMLButtonElement>(
      '.gpuhub-JobForm-remove'
    )!;
    remove.click();
    expect(form.state.parameters()).toEqual({ b: 2 });
  });
});

describe('FormState.sync', () => {
  const help = (f: SubmitFields) => f.gpusHelp.textContent;

  it('shows the rows that apply to the kind', () => {
    const { f } = build();
    expect(f.workersRow.hidden).toBe(true);
    expect(f.runtimeRow.hidden).toBe(true);
    choose(f.mode, 'pytorchjob');
    expect(f.workersRow.hidden).toBe(false);
    expect(f.runtimeRow.hidden).toBe(true);
    choose(f.mode, 'trainjob');
    expect(f.workersRow.hidden).toBe(false);
    expect(f.runtimeRow.hidden).toBe(false);
    choose(pipeline(f));
    expect(f.mode.disabled).toBe(true);
    expect(f.workersRow.hidden).toBe(true);
    expect(f.runtimeRow.hidden).toBe(true);
  });

  it('shows the custom image box for a custom image only', () => {
    const { f } = build();
    expect(f.customRow!.hidden).toBe(true);
    choose(f.image!, CUSTOM_IMAGE);
    expect(f.customRow!.hidden).toBe(false);
    choose(f.image!, 'cpu');
    expect(f.customRow!.hidden).toBe(true);
  });

  it('asks for a GPU type only when GPUs are asked for', () => {
    const { f } = build();
    expect(f.gpuTypeRow!.hidden).toBe(false);
    type(f.gpus, '0');
    expect(f.gpuTypeRow!.hidden).toBe(true);
    type(f.gpus, '2');
    expect(f.gpuTypeRow!.hidden).toBe(false);
  });

  it('hints at the GPU limit of the chosen type and kind', () => {
    const { f } = build();
    expect(help(f)).toBe('0 for a CPU-only job; up to 4 for you.');
    choose(f.gpuType!, 'a100-1g');
    expect(help(f)).toBe('0 for a CPU-only job; up to 1 for you.');
    choose(f.gpuType!, 'a100');
    choose(f.mode, 'pytorchjob');
    expect(help(f)).toBe('0 for a CPU-only job; up to 4 for you per worker.');
  });

  it('warns, before the server does, about more GPUs than allowed', () => {
    const { f } = build();
    type(f.gpus, '6');
    expect(help(f)).toBe(
      '0 for a CPU-only job; up to 4 for you. 6 is more than that; the server will refuse it.'
    );
  });

  it('explains a CPU-only job', () => {
    const local = build(
      jobOptions({ kubernetes: false, local: { gpus: 0, gpu_type: null } })
    );
    expect(help(local.f)).toBe(
      'This server has no GPU, so jobs here run on CPU.'
    );
    document.body.replaceChildren();
    const limited = build(jobOptions({ max_gpus: 0, gpu_types: [] }));
    expect(help(limited.f)).toBe(
      'Your limits allow no GPU, so the job runs on CPU.'
    );
  });
});

describe('FormState.restore', () => {
  const last: ISubmitBody = {
    notebook: 'other.ipynb',
    kind: 'pytorchjob',
    workers: 3,
    image: 'cpu',
    cpu: 8,
    memory: '32G',
    gpus: 1,
    gpu_type: 'a100-1g',
    parameters: { ignored: true },
    name: 'not-restored'
  };

  it('starts from the choices of the last submit', () => {
    const { f, state } = build();
    state.restore(last);
    state.sync();
    expect(state.kind()).toBe('pytorchjob');
    expect(f.workers.value).toBe('3');
    expect(f.image!.value).toBe('cpu');
    expect(f.cpu.value).toBe('8');
    expect(f.memory.value).toBe('32G');
    expect(f.gpus.value).toBe('1');
    expect(f.gpuType!.value).toBe('a100-1g');
    expect(f.name.value).toBe('');
    expect(state.parameters()).toEqual({});
  });

  it('keeps the defaults where the options no longer offer the last choice', () => {
    const { f, state } = build();
    state.restore({
      ...last,
      kind: 'tfjob', // unavailable
      gpu_type: 'h100' // not offered
    });
    expect(state.kind()).toBe('job');
    expect(f.gpuType!.value).toBe('a100');
  });

  it('restores a pipeline step where pipelines are offered', () => {
    const { f, state } = build();
    state.restore({ ...last, kind: 'pipeline' });
    expect(pipeline(f).checked).toBe(true);
    expect(state.kind()).toBe('pipeline');
  });

  it('puts an image no longer listed in the custom box, if custom images are allowed', () => {
    const custom = build();
    custom.state.restore({ ...last, image: 'ghcr.io/me/x:1' });
    expect(custom.f.image!.value).toBe(CUSTOM_IMAGE);
    expect(custom.f.customImage!.value).toBe('ghcr.io/me/x:1');
    document.body.replaceChildren();
    const fixed = build(jobOptions({ custom_images: false }));
    fixed.state.restore({ ...last, image: 'ghcr.io/me/x:1' });
    expect(fixed.f.image!.value).toBe('cuda');
  });

  it('does not restore a GPU count the limits no longer allow editing', () => {
    const { f, state } = build(jobOptions({ max_gpus: 0, gpu_types: [] }));
    state.restore({ ...last, gpus: 2 });
    expect(f.gpus.value).toBe('0');
  });

  it('remembers the last accepted choices for this page', () => {
    FormState.remember(last);
    expect(FormState.last).toBe(last);
  });
});

describe('FormState.showError', () => {
  const errorOf = (f: SubmitFields, field: FieldName) => f.errors.get(field)!;

  it('puts each problem under the field it names and focuses the first', () => {
    const { f, state } = build();
    const scrolled = jest.spyOn(Element.prototype, 'scrollIntoView');
    state.showError(
      new GpuhubAPIError('Too many GPUs.', 400, 'gpus', [
        { field: 'gpus', message: 'Too many GPUs.' },
        { field: 'cpu', message: 'At most 16 cores.' },
        { field: 'gpus', message: 'And no such type.' }
      ])
    );
    const gpus = errorOf(f, 'gpus');
    expect(gpus.hidden).toBe(false);
    expect(gpus.textContent).toBe('Too many GPUs. And no such type.');
    expect(f.gpus.getAttribute('aria-invalid')).toBe('true');
    expect(f.gpus.getAttribute('aria-describedby')).toBe(
      `${f.gpus.id}-help ${gpus.id}`
    );
    expect(errorOf(f, 'cpu').textContent).toBe('At most 16 cores.');
    expect(errorOf(f, 'memory').hidden).toBe(true);
    expect(f.memory.hasAttribute('aria-invalid')).toBe(false);
    expect(f.general.hidden).toBe(true);
    // CPU comes before GPUs in the dialog: it is focused, not the first problem sent.
    expect(document.activeElement).toBe(f.cpu);
    expect(scrolled.mock.contexts).toEqual([f.cpu]);
    scrolled.mockRestore();
  });

  it('shows problems naming no known field at the top, and scrolls there', () => {
    const { f, state } = build();
    const scrolled = jest.spyOn(Element.prototype, 'scrollIntoView');
    state.showError(
      new GpuhubAPIError('Your quota is used up.', 403, null, [
        { field: null, message: 'Your quota is used up.' },
        { field: 'colour', message: 'No such field.' },
        { field: 'gpus', message: 'Too many GPUs.' }
      ])
    );
    expect(f.general.hidden).toBe(false);
    expect(f.general.textContent).toBe('Your quota is used up. No such field.');
    expect(errorOf(f, 'gpus').textContent).toBe('Too many GPUs.');
    // The top line comes first: scrolled to, but focus stays where it was.
    expect(scrolled.mock.contexts).toEqual([f.general]);
    expect(document.activeElement).toBe(document.body);
    scrolled.mockRestore();
  });

  it('shows a problem of a hidden field at the top', () => {
    const { f, state } = build(); // single node: the workers row is hidden
    state.showError(new GpuhubAPIError('At most 8 workers.', 400, 'workers'));
    expect(errorOf(f, 'workers').hidden).toBe(true);
    expect(f.general.textContent).toBe('At most 8 workers.');
    expect(document.activeElement).not.toBe(f.general);
  });

  it('shows a problem of the parameters under the parameters', () => {
    const { f, state } = build();
    state.showError(
      new GpuhubAPIError('No parameter "x" in the notebook.', 400, 'parameters')
    );
    expect(errorOf(f, 'parameters').hidden).toBe(false);
    expect(errorOf(f, 'parameters').textContent).toBe(
      'No parameter "x" in the notebook.'
    );
    expect(f.general.hidden).toBe(true);
  });

  it('shows any other failure at the top', () => {
    const { f, state } = build();
    state.showError(new Error('Saving failed: disk full.'));
    expect(f.general.textContent).toBe('Saving failed: disk full.');
    state.clearErrors();
    state.showError('boom');
    expect(f.general.textContent).toBe('The job could not be submitted: boom');
  });

  it('clears the error of a field once it is edited', () => {
    const { f, state } = build();
    state.showError(
      new GpuhubAPIError('Too many GPUs.', 400, 'gpus', [
        { field: 'gpus', message: 'Too many GPUs.' },
        { field: 'memory', message: 'Too much memory.' }
      ])
    );
    type(f.gpus, '1');
    expect(errorOf(f, 'gpus').hidden).toBe(true);
    expect(errorOf(f, 'gpus').textContent).toBe('');
    expect(f.gpus.hasAttribute('aria-invalid')).toBe(false);
    expect(f.gpus.getAttribute('aria-describedby')).toBe(`${f.gpus.id}-help`);
    expect(errorOf(f, 'memory').hidden).toBe(false);
  });

  it('clears every error before a new submit', () => {
    const { f, state } = build();
    state.showError(
      new GpuhubAPIError('No.', 400, 'cpu', [
        { field: 'cpu', message: 'No.' },
        { field: null, message: 'Also no.' }
      ])
    );
    state.clearErrors();
    expect(errorOf(f, 'cpu').hidden).toBe(true);
    expect(f.cpu.hasAttribute('aria-invalid')).toBe(false);
    expect(f.general.hidden).toBe(true);
    expect(f.general.textContent).toBe('');
  });

  it('keeps the reason jobs are unavailable', () => {
    const { f, state } = build(
      jobOptions({ available: false, reason: 'No cluster.' })
    );
    state.clearErrors();
    expect(f.general.hidden).toBe(false);
    expect(f.general.textContent).toBe('No cluster.');
  });
});

describe('FormState.loadQuota', () => {
  async function quotaLine(
    holdings: unknown,
    kubernetes = true
  ): Promise<HTMLElement> {
    request.mockResolvedValue(holdings as any);
    // Off a cluster: a workstation's server, with GPUs its jobs run on.
    const local = kubernetes ? null : { gpus: 2, gpu_type: 'a100' };
    const { f, state } = build(jobOptions({ kubernetes, local }));
    state.loadQuota();
    await until(() => request.mock.calls.length > 0);
    await settle();
    expect(request).toHaveBeenCalledWith('holdings');
    return f.quota;
  }

  const ledger = {
    available: true,
    reason: null,
    quota: 4,
    held: 1,
    holdings: []
  };

  it('says what the user holds and that the job counts too', async () => {
    const line = await quotaLine(ledger);
    expect(line.hidden).toBe(false);
    expect(line.textContent).toBe(
      "You hold 1 of your 4 GPUs. This job's GPUs count toward your quota, with your servers'."
    );
  });

  it("says a local job uses this server's GPUs", async () => {
    const line = await quotaLine(ledger, false);
    expect(line.textContent).toBe(
      "You hold 1 of your 4 GPUs. A job here runs on this server's GPUs, which count already."
    );
  });

  it('says nothing without a quota or a ledger', async () => {
    expect((await quotaLine({ ...ledger, quota: null })).hidden).toBe(true);
    document.body.replaceChildren();
    request.mockReset();
    expect((await quotaLine({ ...ledger, available: false })).hidden).toBe(
      true
    );
  });

  it('says nothing when the hub does not answer', async () => {
    request.mockRejectedValue(new Error('offline'));
    const { f, state } = build();
    state.loadQuota();
    await settle(10);
    expect(f.quota.hidden).toBe(true);
  });
});

describe('gpuAmount and memoryBytes', () => {
  it('reads memory quantities as the server writes them', () => {
    expect(memoryBytes('8G')).toBe(8e9);
    expect(memoryBytes('512Mi')).toBe(512 * 2 ** 20);
    expect(memoryBytes('16Gi')).toBe(16 * 2 ** 30);
    expect(memoryBytes('1000')).toBe(1000);
    expect(memoryBytes('lots')).toBeNaN();
  });

  it('counts whole GPUs, shares by their fraction, and every worker', () => {
    expect(gpuAmount(2, 1, undefined)).toBe(2);
    expect(gpuAmount(2, 3, undefined)).toBe(6);
    expect(gpuAmount(0, 3, undefined)).toBe(0);
    expect(gpuAmount(NaN, 1, undefined)).toBeNull();
    const byMemory = {
      key: 't4-shared',
      display_name: 'T4, shared',
      max_gpus: 1,
      mig: false,
      sharing: {
        kind: 'memory' as const,
        memory: '16G',
        min: '1G',
        max: '16G',
        default: '4G'
      }
    };
    expect(gpuAmount(1, 1, byMemory)).toBe(0.25);
    expect(gpuAmount(1, 2, byMemory)).toBe(0.5);
    const byTime = {
      ...byMemory,
      sharing: { kind: 'time' as const, replicas: 4 }
    };
    expect(gpuAmount(2, 1, byTime)).toBe(0.5);
  });
});

describe('the cost of the job in GPU-hour budgets', () => {
  const week = {
    scope: 'user',
    name: 'alice',
    shared: false,
    hours: 20,
    extra_hours: 0,
    used_hours: 14.2,
    left_hours: 5.8,
    period: 'week',
    resets_at: '2026-11-30T00:00:00+01:00',
    resets: 'Monday 00:00 Europe/Berlin',
    state: 'ok',
    at_limit: 'refuse',
    grants: [],
    text: '14.2 of 20 GPU-hours used this week; resets Monday 00:00 Europe/Berlin'
  };

  async function dialog(
    options: IJobOptions,
    budgets: unknown[] = [week]
  ): Promise<IForm> {
    request.mockResolvedValue({
      available: true,
      reason: null,
      quota: 4,
      held: 1,
      holdings: [],
      budgets
    } as any);
    const form = build(options);
    form.state.loadQuota();
    await until(() => !form.f.budget.hidden);
    return form;
  }

  it('says what the request would cost per hour, and follows the fields', async () => {
    const form = await dialog(jobOptions());
    const { f } = form;
    type(f.gpus, '2');
    expect(f.budget.textContent).toBe(
      'Uses 2 GPU-hours per hour; 5.8 GPU-hours left this week (about 2.9 hours at that rate).'
    );
    // A PyTorchJob: the GPUs of each of its workers.
    choose(f.mode, 'pytorchjob');
    type(f.workers, '3');
    expect(f.budget.textContent).toMatch(/^Uses 6 GPU-hours per hour; /);
    type(f.gpus, '0');
    expect(f.budget.textContent).toBe(
      'A CPU-only job uses no GPU-hours; 5.8 GPU-hours left this week.'
    );
    type(f.gpus, 'two');
    expect(f.budget.hidden).toBe(true); // the GPU field says what is wrong
  });

  it('counts a share of a GPU by its fraction', async () => {
    const options = jobOptions({
      gpu_types: [
        {
          key: 't4-shared',
          display_name: 'T4, shared',
          max_gpus: 1,
          mig: false,
          sharing: {
            kind: 'memory',
            memory: '16G',
            min: '1G',
            max: '16G',
            default: '8G'
          }
        }
      ]
    });
    const { f } = await dialog(options);
    type(f.gpus, '1');
    expect(f.budget.textContent).toBe(
      'Uses 0.5 GPU-hours per hour; 5.8 GPU-hours left this week (about 12 hours at that rate).'
    );
  });

  it('stands out when a budget is used up', async () => {
    const { f } = await dialog(jobOptions(), [
      { ...week, state: 'over', used_hours: 20, left_hours: 0 }
    ]);
    type(f.gpus, '1');
    expect(f.budget.textContent).toBe(
      'Uses 1 GPU-hour per hour; none left this week: new GPU servers and jobs are refused ' +
        `until it resets (${formatTime(week.resets_at)}).`
    );
    expect(f.budget.classList.contains('gpuhub-mod-over')).toBe(true);
  });

  it("says a job on this server's GPUs costs nothing more", async () => {
    const { f } = await dialog(
      jobOptions({
        kubernetes: false,
        local: { gpus: 2, gpu_type: 'a100' }
      })
    );
    type(f.gpus, '1');
    expect(f.budget.textContent).toBe(
      "A job here runs on this server's GPUs, which count already: 5.8 GPU-hours left this week."
    );
  });

  it('says nothing where no budget applies', async () => {
    request.mockResolvedValue({
      available: true,
      reason: null,
      quota: 4,
      held: 1,
      holdings: [],
      budgets: []
    } as any);
    const { f, state } = build(jobOptions());
    state.loadQuota();
    await until(() => !f.quota.hidden);
    expect(f.budget.hidden).toBe(true);
  });
});

describe('the kinds the server describes', () => {
  afterEach(() => document.body.replaceChildren());

  /** gpuhub's kinds and two it may add: none is named in the lab's code. */
  function withNewKinds(): IJobOptions {
    const o = jobOptions();
    o.kinds = [
      ...o.kinds,
      kind({ kind: 'jaxjob', label: 'JAXJob', distributed: true }),
      kind({
        kind: 'raytask',
        label: 'Ray task',
        runs_in: 'Ray',
        description: 'The notebook as one task of a Ray cluster.',
        run_page: 'Ray dashboard'
      })
    ];
    return o;
  }

  it('offers a new distributed kind under "Run as", with its workers', () => {
    const { f, state } = build(withNewKinds());
    const last = f.mode.options[f.mode.options.length - 1];
    expect([last.value, last.textContent]).toEqual([
      'jaxjob',
      'Distributed: JAXJob'
    ]);
    choose(f.mode, 'jaxjob');
    expect(f.workersRow.hidden).toBe(false);
    expect(f.runtimeRow.hidden).toBe(true);
    type(f.workers, '3');
    expect(state.body()).toMatchObject({ kind: 'jaxjob', workers: 3 });
    expect(state.body()).not.toHaveProperty('runtime');
  });

  it('gives a kind whose runs live elsewhere a choice of its own', () => {
    const { f, state, form } = build(withNewKinds());
    const ray = f.elsewhere.get('raytask')!;
    const label = form.querySelector(`label[for="${ray.id}"]`)!;
    expect(label.textContent).toBe(' Ray task');
    const help = document.getElementById(
      ray.getAttribute('aria-describedby')!
    )!;
    expect(help.textContent).toBe('The notebook as one task of a Ray cluster.');
    expect(Array.from(f.mode.options).map(o => o.value)).not.toContain(
      'raytask'
    );
    choose(ray);
    expect(state.kind()).toBe('raytask');
    expect(f.mode.disabled).toBe(true);
    expect(f.workersRow.hidden).toBe(true);
    expect(state.body()).toMatchObject({ kind: 'raytask' });
    expect(state.body()).not.toHaveProperty('workers');
    choose(f.training);
    expect(state.kind()).toBe('job');
  });

  it('lists only the kinds the server offers', () => {
    const o = jobOptions();
    o.kinds = o.kinds.filter(k => k.kind !== 'pipeline' && k.kind !== 'tfjob');
    const { f } = build(o);
    expect(f.elsewhere.size).toBe(0);
    expect(Array.from(f.mode.options).map(o => o.value)).toEqual([
      'job',
      'pytorchjob',
      'trainjob'
    ]);
  });

  it('says why a kind cannot have GPUs claimed through DRA', () => {
    const o = jobOptions();
    o.gpu_types = [
      ...o.gpu_types!,
      {
        key: 'h100',
        display_name: 'NVIDIA H100',
        max_gpus: 8,
        mig: false,
        dra: true
      }
    ];
    const { f } = build(o);
    const help = () => f.gpuTypeHelp.textContent;
    choose(f.gpuType!, 'h100');
    expect(help()).toBe('');
    choose(f.mode, 'trainjob');
    expect(help()).toBe(
      "A TrainJob cannot have NVIDIA H100 GPUs: Kubeflow Trainer has no field for a node's DRA resource claims."
    );
    choose(f.gpuType!, 'a100');
    expect(help()).toBe('');
  });

  it('caps the GPUs by this server only for a kind that runs here', () => {
    const o = jobOptions({
      kubernetes: false,
      local: { gpus: 2, gpu_type: 'a100' }
    });
    expect(maxGpus(o, 'job', 'a100')).toBe(2);
    o.kinds = o.kinds.map(k => ({ ...k, here: false }));
    expect(maxGpus(o, 'job', 'a100')).toBe(4);
  });
});
