import { GpuhubAPIError } from '../../api';
import { JobsAPI } from '../../jobs/client';
import { LogPane, tidyLog } from '../../jobs/log';
import { JobStatus } from '../../jobs/types';
import { until } from '../utils';

jest.mock('../../jobs/client', () => ({
  JobsAPI: { logs: jest.fn() }
}));

const logs = JobsAPI.logs as jest.MockedFunction<typeof JobsAPI.logs>;

describe('tidyLog', () => {
  it("drops papermill's rulers after text", () => {
    expect(
      tidyLog(
        'Executing Cell 1----------------------------------------\nhello\n'
      )
    ).toBe('Executing Cell 1\nhello\n');
  });

  it('keeps short dash runs and lines of dashes alone', () => {
    expect(tidyLog('a - b\nx-------\n----------\n')).toBe(
      'a - b\nx-------\n----------\n'
    );
  });

  it('drops blank lines, also those with only spaces', () => {
    expect(tidyLog('one\n\n\ntwo\n  \t\nthree\n')).toBe('one\ntwo\nthree\n');
  });

  it('leaves a tidy log as it is', () => {
    const text = 'epoch 1 loss 0.5\nepoch 2 loss 0.4';
    expect(tidyLog(text)).toBe(text);
  });
});

describe('LogPane', () => {
  let pane: LogPane;
  let status: JobStatus;
  let openInTab: jest.Mock | undefined;

  function create(jobId = 'j1'): LogPane {
    pane = new LogPane({
      jobId,
      jobName: 'train-resnet',
      interval: 1,
      lines: 200,
      hidden: () => false,
      status: () => status,
      openInTab
    });
    document.body.append(pane.node);
    return pane;
  }

  /** The pane after its log was fetched once. */
  async function shown(jobId = 'j1'): Promise<LogPane> {
    const before = logs.mock.calls.length;
    create(jobId);
    await until(() => logs.mock.calls.length > before);
    return pane;
  }

  const statusLine = () =>
    pane.node.querySelector('.gpuhub-Job-logStatus') as HTMLElement;
  const pre = () => pane.node.querySelector('pre') as HTMLElement;

  beforeEach(() => {
    status = 'running';
    openInTab = undefined;
    logs.mockReset();
  });

  afterEach(() => {
    pane.dispose();
    pane.node.remove();
  });

  it('says it is loading and has an id safe for aria-controls', () => {
    logs.mockReturnValue(new Promise(() => undefined));
    create('a/b c');
    expect(statusLine().textContent).toBe('Loading the log…');
    expect(pane.id).toMatch(/^gpuhub-job-log-a_b_c-\d+$/);
    expect(pre().id).toBe(pane.id);
    expect(pre().getAttribute('aria-label')).toBe('Log of train-resnet');
  });

  it('shows the tidied lines it follows', async () => {
    logs.mockResolvedValue({
      status: 'running',
      logs: 'Executing Cell 1----------\n\nloss 0.5\n'
    });
    await shown();
    expect(logs).toHaveBeenCalledWith('j1', 200);
    expect(pre().hidden).toBe(false);
    expect(pre().textContent).toBe('Executing Cell 1\nloss 0.5\n');
    expect(statusLine().textContent).toBe('Following the last 200 lines.');
  });

  it('has no status line once a finished job showed its log', async () => {
    status = 'succeeded';
    logs.mockResolvedValue({ status: 'succeeded', logs: 'done\n' });
    await shown();
    expect(statusLine().hidden).toBe(true);
    expect(pre().textContent).toBe('done\n');
  });

  it.each([
    ['queued', 'Queued: the log starts when the job runs.'],
    ['pending', 'Waiting for the first lines…'],
    ['running', 'Waiting for the first lines…'],
    ['failed', 'The job wrote no log.'],
    ['cancelled', 'The job wrote no log.']
  ] as [JobStatus, string][])(
    'says why a %s job shows no lines',
    async (jobStatus, text) => {
      status = jobStatus;
      logs.mockResolvedValue({ status: jobStatus, logs: '' });
      await shown();
      expect(pre().hidden).toBe(true);
      expect(statusLine().hidden).toBe(false);
      expect(statusLine().textContent).toBe(text);
    }
  );

  it('says why the log could not be loaded', async () => {
    logs.mockRejectedValue(new GpuhubAPIError('The pod is gone.', 410));
    await shown();
    expect(statusLine().textContent).toBe(
      'Could not load the log: The pod is gone.'
    );
  });

  it('offers to open the log in a tab only when it can', async () => {
    logs.mockResolvedValue({ status: 'running', logs: '' });
    await shown();
    const tabButton = () =>
      Array.from(pane.node.querySelectorAll('button')).find(
        b => b.textContent === 'Open in a tab'
      );
    expect(tabButton()).toBeUndefined();
    pane.dispose();
    pane.node.remove();
    openInTab = jest.fn();
    await shown();
    const button = tabButton()!;
    expect(button.getAttribute('aria-label')).toBe(
      'Open the log of train-resnet in a tab'
    );
    button.click();
    expect(openInTab).toHaveBeenCalledTimes(1);
  });
});
