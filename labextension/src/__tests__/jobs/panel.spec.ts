import { showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { Signal } from '@lumino/signaling';

import { JobsAPI } from '../../jobs/client';
import { JobsModel } from '../../jobs/model';
import { JobsPanel } from '../../jobs/panel';
import { IJob } from '../../jobs/types';
import { until } from '../utils';
import { job, jobOptions } from './fixtures';

jest.mock('@jupyterlab/apputils', () => ({
  ...jest.requireActual('@jupyterlab/apputils'),
  showDialog: jest.fn(),
  showErrorMessage: jest.fn()
}));
jest.mock('../../jobs/client', () => ({
  JobsAPI: { logs: jest.fn(() => new Promise(() => undefined)) }
}));

const dialog = showDialog as jest.MockedFunction<typeof showDialog>;

/** What the panel reads of a `JobsModel`, settable. */
class FakeJobsModel {
  jobs: IJob[] | null = null;
  error: string | null = null;
  readonly changed = new Signal<this, void>(this);
  readonly refresh = jest.fn(async () => undefined);
  readonly cancel = jest.fn(async (id: string) => job({ id }));

  set(jobs: IJob[] | null, error: string | null = null): void {
    this.jobs = jobs;
    this.error = error;
    this.changed.emit();
  }
}

describe('JobsPanel', () => {
  let model: FakeJobsModel;
  let panel: JobsPanel;
  let notebook: string | null;
  let opts: {
    runCurrent: jest.Mock;
    open: jest.Mock;
    openResult: jest.Mock;
    openLog: jest.Mock;
  };

  beforeEach(() => {
    notebook = 'work/train.ipynb';
    model = new FakeJobsModel();
    opts = {
      runCurrent: jest.fn(),
      open: jest.fn(),
      openResult: jest.fn(),
      openLog: jest.fn()
    };
    dialog.mockReset();
    panel = new JobsPanel({
      model: model as unknown as JobsModel,
      currentNotebook: () => notebook,
      logInterval: 2,
      logLines: 500,
      ...opts
    });
    document.body.append(panel.node);
  });

  afterEach(() => {
    panel.dispose();
    document.body.replaceChildren();
  });

  const $ = (selector: string, root: ParentNode = panel.node) =>
    root.querySelector(selector) as HTMLElement;
  const items = () =>
    Array.from(panel.node.querySelectorAll('.gpuhub-Job')) as HTMLElement[];
  const item = (id: string) => $(`[data-job-id="${id}"]`);
  const details = (id: string) => {
    const dl = $('.gpuhub-Job-detailsList', item(id));
    const terms = Array.from(dl.querySelectorAll('dt')).map(t => t.textContent);
    const values = Array.from(dl.querySelectorAll('dd')).map(
      d => d.textContent
    );
    return Object.fromEntries(terms.map((t, i) => [t, values[i]]));
  };
  const action = (id: string, label: string) =>
    Array.from(item(id).querySelectorAll('button')).find(
      b => b.textContent === label
    ) as HTMLButtonElement;

  it('says it is loading, then that there are no jobs yet', () => {
    expect($('.gpuhub-JobsPanel-error').hidden).toBe(true);
    expect(panel.node.textContent).toContain('Loading jobs…');
    expect($('.gpuhub-JobsPanel-empty').hidden).toBe(true);
    model.set([]);
    expect($('.gpuhub-JobsPanel-empty').hidden).toBe(false);
    expect(items()).toHaveLength(0);
  });

  it('says why the jobs could not be refreshed', () => {
    model.set(null, 'The server did not answer.');
    const error = $('.gpuhub-JobsPanel-error');
    expect(error.hidden).toBe(false);
    expect(error.textContent).toBe(
      'Could not refresh the jobs: The server did not answer. Retrying.'
    );
    model.set([]);
    expect(error.hidden).toBe(true);
  });

  it('runs the current notebook, and says when there is none', () => {
    const run = $('.gpuhub-JobsPanel-run') as HTMLButtonElement;
    model.set([]);
    expect(run.disabled).toBe(false);
    expect($('.gpuhub-JobsPanel-header').textContent).toContain(
      'Current notebook: work/train.ipynb'
    );
    run.click();
    expect(opts.runCurrent).toHaveBeenCalledTimes(1);
    notebook = null;
    panel.updateRunButton();
    expect(run.disabled).toBe(true);
    expect($('.gpuhub-JobsPanel-header').textContent).toContain(
      'Open a notebook to run it as a job.'
    );
  });

  it('names the run command after where jobs run', () => {
    panel.setRunLabel('Run on cluster', true);
    expect($('.gpuhub-JobsPanel-run').textContent).toBe('Run on cluster…');
    expect($('.gpuhub-JobsPanel-empty em').textContent).toBe('Run on cluster');
    expect(panel.title.caption).toBe('Jobs: notebooks running on the cluster');
    panel.setRunLabel('Run as job', false);
    expect(panel.title.caption).toMatch(/on this server$/);
  });

  it('keeps one item per job, in the order of the list', () => {
    model.set([job({ id: 'b' }), job({ id: 'a' })]);
    const [b, a] = items();
    expect(b.dataset.jobId).toBe('b');
    model.set([job({ id: 'c' }), job({ id: 'a' }), job({ id: 'b' })]);
    const now = items();
    expect(now.map(i => i.dataset.jobId)).toEqual(['c', 'a', 'b']);
    expect(now[1]).toBe(a);
    expect(now[2]).toBe(b);
    model.set([job({ id: 'b' })]);
    expect(items()).toEqual([b]);
  });

  it('keeps focus in an item that stays in place', () => {
    model.set([job({ id: 'a' }), job({ id: 'b' })]);
    const button = action('b', 'Show log');
    button.focus();
    model.set([job({ id: 'a' }), job({ id: 'b', status: 'running' })]);
    expect(document.activeElement).toBe(button);
  });

  it('shows the status, with the place in line of a queued job', () => {
    model.set([job({ status: 'queued', queue_position: 2 })]);
    const badge = $('.gpuhub-Job-badge', item('j1'));
    expect(badge.textContent).toBe('Queued, 2nd in line');
    expect(badge.className).toBe('gpuhub-Job-badge gpuhub-mod-queued');
    expect(badge.getAttribute('aria-label')).toBe(
      'Status: Queued, 2nd in line'
    );
    expect(item('j1').dataset.status).toBe('queued');
    expect($('.gpuhub-Job-summary', item('j1')).textContent).toMatch(
      /^queued since /
    );
    model.set([job({ status: 'running', parameters: { epochs: 3 } })]);
    expect(badge.textContent).toBe('Running');
    expect($('.gpuhub-Job-summary', item('j1')).textContent).toMatch(
      /^started .* · epochs = 3$/
    );
  });

  it('says when a job waiting for GPUs likely starts, and why', () => {
    const said = 'Likely to start around 14:30 UTC, 4 times in 5 by 15:10 UTC.';
    const estimate = {
      likely: '2026-11-29T14:30:00Z',
      by: '2026-11-29T15:10:00Z',
      latest: null,
      because: [
        'You are 2nd in line.',
        '<img src=x onerror=alert(1)> stops soon.'
      ]
    };
    model.set([
      job({ status: 'queued', estimate, estimate_text: said }),
      job({ id: 'j2', status: 'running', estimate_text: said })
    ]);
    const shown = $('.gpuhub-Job-estimate', item('j1')) as HTMLDetailsElement;
    expect(shown.hidden).toBe(false);
    expect($('summary', shown).textContent).toBe(said);
    expect(
      Array.from(shown.querySelectorAll('li')).map(li => li.textContent)
    ).toEqual(estimate.because);
    expect(shown.querySelector('img')).toBeNull();
    expect(($('.gpuhub-Job-estimate', item('j2')) as HTMLElement).hidden).toBe(
      true
    );
    // Open, it stays open as the job is polled again; once running, it is gone.
    shown.open = true;
    model.set([job({ status: 'queued', estimate, estimate_text: said })]);
    expect($('.gpuhub-Job-estimate', item('j1'))).toBe(shown);
    expect(shown.open).toBe(true);
    model.set([job({ status: 'running', estimate: null })]);
    expect(shown.hidden).toBe(true);
  });

  it('shows kind, GPUs and run time, the kind once the options are known', () => {
    const now = Date.parse('2025-03-01T10:10:00Z');
    const clock = jest.spyOn(Date, 'now').mockReturnValue(now);
    try {
      model.set([job({ elapsed: 30 })]);
      const meta = $('.gpuhub-Job-meta', item('j1'));
      expect(meta.textContent).toBe('1 x NVIDIA A100 · 30 s');
      // The run time is the server's: this browser's clock does not move it on.
      clock.mockReturnValue(now + 95_000);
      panel.setKinds(jobOptions().kinds);
      expect(meta.textContent).toBe('Training job · 1 x NVIDIA A100 · 30 s');
      model.set([job({ elapsed: 125 })]); // the next poll
      expect(meta.textContent).toBe(
        'Training job · 1 x NVIDIA A100 · 2 min 05 s'
      );
      model.set([
        job({
          status: 'succeeded',
          elapsed: null,
          started: '2025-03-01T10:00:00Z',
          finished: '2025-03-01T11:02:00Z'
        })
      ]);
      expect(meta.textContent).toBe(
        'Training job · 1 x NVIDIA A100 · 1 h 02 min'
      );
      model.set([job({ status: 'queued', elapsed: null, started: null })]);
      expect(meta.textContent).toMatch(
        /^Training job · 1 x NVIDIA A100 · submitted \S/
      );
    } finally {
      clock.mockRestore();
    }
  });

  it('never shows a run time going back as a job ends between two polls', () => {
    const clock = jest.spyOn(Date, 'now');
    try {
      const started = '2025-03-01T10:00:00Z';
      clock.mockReturnValue(Date.parse('2025-03-01T10:00:14.600Z'));
      model.set([job({ status: 'running', started, elapsed: 14.6 })]);
      const meta = $('.gpuhub-Job-meta', item('j1'));
      const shown = (): number => {
        const [, seconds] = /(\d+) s$/.exec(meta.textContent ?? '') ?? [];
        return Number(seconds);
      };
      const before = shown();
      // A second later in this browser, the job ended at 14.8 s on the server's clock.
      clock.mockReturnValue(Date.parse('2025-03-01T10:00:15.900Z'));
      panel.setKinds(jobOptions().kinds); // any re-render: the server's figure stands
      expect(shown()).toBe(before);
      model.set([
        job({
          status: 'succeeded',
          started,
          finished: '2025-03-01T10:00:14.800Z',
          elapsed: 14.8
        })
      ]);
      expect(shown()).toBeGreaterThanOrEqual(before);
    } finally {
      clock.mockRestore();
    }
  });

  it('shows the progress of a running notebook', () => {
    model.set([job({ progress: { done: 3, total: 10 } })]);
    const progress = $('progress', item('j1')) as HTMLProgressElement;
    expect(progress.hidden).toBe(false);
    expect(progress.max).toBe(10);
    expect(progress.value).toBe(3);
    expect(progress.getAttribute('aria-label')).toBe('3 of 10 cells run');
    model.set([
      job({ status: 'succeeded', progress: { done: 10, total: 10 } })
    ]);
    expect(progress.hidden).toBe(true);
    model.set([job({ progress: { done: 0, total: 0 } })]);
    expect(progress.hidden).toBe(true);
  });

  it('shows why a job failed and which cell', () => {
    model.set([
      job({
        status: 'failed',
        message: 'Running',
        error: 'ZeroDivisionError in cell 4.',
        failed_cell: {
          index: 3,
          execution_count: 5,
          source: 'x = 1 / 0',
          ename: 'ZeroDivisionError',
          evalue: 'division by zero'
        }
      })
    ]);
    const it_ = item('j1');
    const message = $('.gpuhub-Job-message', it_);
    expect(message.textContent).toBe('ZeroDivisionError in cell 4.');
    expect(message.classList.contains('gpuhub-mod-error')).toBe(true);
    const failure = $('.gpuhub-Job-failure', it_);
    expect(failure.hidden).toBe(false);
    const heads = Array.from(
      failure.querySelectorAll('.gpuhub-Job-failureHead')
    ).map(n => n.textContent);
    expect(heads).toEqual(['Failing cell (In [5]):', 'Error:']);
    const blocks = Array.from(failure.querySelectorAll('pre')).map(
      n => n.textContent
    );
    expect(blocks).toEqual([
      'x = 1 / 0',
      'ZeroDivisionError: division by zero'
    ]);
    expect(action('j1', 'Cancel').hidden).toBe(true);
  });

  it("names a cell that never ran by its place, and shows the kernel's lines", () => {
    model.set([
      job({
        status: 'failed',
        failed_cell: {
          index: 0,
          execution_count: null,
          source: 'import torch',
          ename: 'ModuleNotFoundError',
          evalue: "No module named 'torch'",
          error_lines: 'Traceback...\nModuleNotFoundError'
        }
      })
    ]);
    const failure = $('.gpuhub-Job-failure', item('j1'));
    expect(failure.textContent).toContain('Failing cell (cell 1):');
    expect($('.gpuhub-Job-errorLines', failure).textContent).toBe(
      'Traceback...\nModuleNotFoundError'
    );
    model.set([job({ status: 'running', message: 'Pulling the image.' })]);
    expect(failure.hidden).toBe(true);
    const message = $('.gpuhub-Job-message', item('j1'));
    expect(message.textContent).toBe('Pulling the image.');
    expect(message.classList.contains('gpuhub-mod-error')).toBe(false);
  });

  it('details what was asked for', () => {
    model.set([
      job({
        cpu: '2',
        memory: '8G',
        workers: 3,
        image: 'ghcr.io/x/train:1',
        parameters: { lr: 0.1, name: 'run a', layers: [1, 2] },
        output: 'gpuhub-runs/j1/j1.ipynb',
        status: 'succeeded',
        finished: '2025-03-01T11:00:00Z'
      })
    ]);
    const d = details('j1');
    expect(d['Notebook']).toBe('work/train.ipynb');
    expect(d['Result']).toBe('gpuhub-runs/j1/j1.ipynb');
    expect(d['Image']).toBe('ghcr.io/x/train:1');
    expect(d['CPU, memory']).toBe('2 cores, 8G per worker');
    expect(d['GPUs']).toBe('1 x NVIDIA A100');
    expect(d['Parameters']).toBe('lr = 0.1, name = run a, layers = [1,2]');
    expect(d['Finished']).not.toBe('');
    expect(d['Job id']).toBe('j1');
    $('.gpuhub-Job-detailsList button', item('j1')).click();
    expect(opts.open).toHaveBeenCalledWith('work/train.ipynb');
  });

  it.each([
    ['1', '1 core, 8G'],
    ['0.5', '0.5 cores, 8G'],
    ['500m', '500m CPU, 8G'],
    [null, '? cores, 8G']
  ])('writes CPU %p as "%s"', (cpu, text) => {
    model.set([job({ cpu, image: null, parameters: {} })]);
    const d = details('j1');
    expect(d['CPU, memory']).toBe(text);
    expect(d['Image']).toBe("This server's image");
    expect(d['Parameters']).toBe('none');
    expect(d).not.toHaveProperty('Result');
    expect(d).not.toHaveProperty('Finished');
  });

  it('opens the result of a finished job', () => {
    model.set([job({ status: 'succeeded', output: null })]);
    expect(action('j1', 'Open result').hidden).toBe(true);
    const done = job({
      status: 'succeeded',
      output: 'gpuhub-runs/j1/j1.ipynb'
    });
    model.set([done]);
    const open = action('j1', 'Open result');
    expect(open.hidden).toBe(false);
    expect(open.title).toBe('Open gpuhub-runs/j1/j1.ipynb');
    open.click();
    expect(opts.openResult).toHaveBeenCalledWith(done);
  });

  it('links only to http(s) run pages', () => {
    const link = () => $('a.gpuhub-Job-link', item('j1')) as HTMLAnchorElement;
    model.set([job({ url: 'javascript:alert(1)' })]);
    expect(link().hidden).toBe(true);
    model.set([job({ url: 'data:text/html,hi' })]);
    expect(link().hidden).toBe(true);
    model.set([job({ url: 'https://kfp.example.org/runs/1' })]);
    expect(link().hidden).toBe(false);
    expect(link().href).toBe('https://kfp.example.org/runs/1');
    expect(link().textContent).toBe('Run page');
    expect(link().rel).toBe('noopener noreferrer');
    // The server names the page of a pipeline step's run (its kind's `run_page`).
    panel.setKinds(jobOptions().kinds);
    model.set([
      job({ kind: 'pipeline', url: 'https://kfp.example.org/runs/1' })
    ]);
    expect(link().textContent).toBe('KFP run page');
    expect(link().getAttribute('aria-label')).toBe(
      'KFP run page of train-resnet (opens in a new tab)'
    );
  });

  it('cancels a job once confirmed', async () => {
    model.set([job({ backend: 'local' })]);
    dialog.mockResolvedValueOnce({ button: { accept: false } } as any);
    action('j1', 'Cancel').click();
    await until(() => dialog.mock.calls.length === 1);
    expect(dialog.mock.calls[0][0]!.title).toBe('Cancel train-resnet?');
    expect(dialog.mock.calls[0][0]!.body).toMatch(/keeps the cells/);
    expect(model.cancel).not.toHaveBeenCalled();

    dialog.mockResolvedValueOnce({ button: { accept: true } } as any);
    action('j1', 'Cancel').click();
    await until(() => model.cancel.mock.calls.length === 1);
    expect(model.cancel).toHaveBeenCalledWith('j1');
  });

  it('says why a job could not be cancelled', async () => {
    model.set([job()]);
    model.cancel.mockRejectedValueOnce(new Error('Already finished.'));
    dialog.mockResolvedValueOnce({ button: { accept: true } } as any);
    action('j1', 'Cancel').click();
    await until(() => (showErrorMessage as jest.Mock).mock.calls.length > 0);
    expect(showErrorMessage).toHaveBeenCalledWith(
      'Could not cancel the job',
      'Already finished.'
    );
  });

  it('opens and closes the log of a job', async () => {
    model.set([job()]);
    const toggle = action('j1', 'Show log');
    expect(toggle.getAttribute('aria-expanded')).toBe('false');
    toggle.click();
    expect(toggle.textContent).toBe('Hide log');
    expect(toggle.getAttribute('aria-expanded')).toBe('true');
    const pane = $('.gpuhub-Job-logPane', item('j1'));
    expect(pane.hidden).toBe(false);
    expect(toggle.getAttribute('aria-controls')).toBe($('pre', pane).id);
    await until(() => (JobsAPI.logs as jest.Mock).mock.calls.length > 0);
    expect(JobsAPI.logs).toHaveBeenCalledWith('j1', 500);
    toggle.click();
    expect(toggle.textContent).toBe('Show log');
    expect(pane.hidden).toBe(true);
    // The log can go to a tab.
    toggle.click();
    Array.from(pane.querySelectorAll('button'))
      .find(b => b.textContent === 'Open in a tab')!
      .click();
    expect(opts.openLog).toHaveBeenCalledWith(
      expect.objectContaining({ id: 'j1' })
    );
  });

  it('opens the log of a job just submitted once it arrives', () => {
    model.set([job({ id: 'old' })]);
    panel.follow('new');
    expect(items()).toHaveLength(1);
    model.set([job({ id: 'new', status: 'queued' }), job({ id: 'old' })]);
    expect(action('new', 'Hide log')).toBeDefined();
    expect($('.gpuhub-Job-logPane', item('new')).hidden).toBe(false);
    expect($('.gpuhub-Job-logPane', item('old'))).toBeNull();
  });
});
