import { GpuhubAPIError, requestAPI } from '../../../api';
import { JobsAPI } from '../../../jobs/client';
import { SubmitForm, showSubmitDialog } from '../../../jobs/submit/dialog';
import { FormState } from '../../../jobs/submit/state';
import { ISubmitBody, ISubmitReply } from '../../../jobs/types';
import { until } from '../../utils';
import { job, jobOptions } from '../fixtures';

jest.mock('../../../api', () => ({
  ...jest.requireActual('../../../api'),
  requestAPI: jest.fn(() => new Promise(() => undefined))
}));
jest.mock('../../../jobs/client', () => ({
  JobsAPI: { submit: jest.fn() }
}));

const submit = JobsAPI.submit as jest.MockedFunction<typeof JobsAPI.submit>;

function reply(over: Partial<ISubmitReply> = {}): ISubmitReply {
  const j = job({ id: 'new', status: 'queued' });
  return { id: j.id, status: j.status, url: null, job: j, ...over };
}

function formOptions(
  beforeSubmit: () => Promise<void> = jest.fn(async () => undefined)
) {
  return {
    notebook: 'work/train.ipynb',
    options: jobOptions(),
    suggested: [] as Array<[string, string]>,
    beforeSubmit
  };
}

function input(form: SubmitForm, id: string): HTMLInputElement {
  return form.node.querySelector<HTMLInputElement>(`input[id^="${id}-"]`)!;
}

beforeEach(() => {
  submit.mockReset();
  // No last submit in this page session: each test starts from the defaults.
  FormState.remember(null as unknown as ISubmitBody);
});

afterEach(() => document.body.replaceChildren());

describe('SubmitForm', () => {
  it('is a form that never submits itself', () => {
    const form = new SubmitForm(formOptions());
    expect(form.node.tagName).toBe('FORM');
    const event = new Event('submit', { cancelable: true });
    form.node.dispatchEvent(event);
    expect(event.defaultPrevented).toBe(true);
    expect(requestAPI).toHaveBeenCalledWith('holdings'); // the quota line
  });

  it('saves the notebook, then posts, and keeps the answer', async () => {
    const order: string[] = [];
    const beforeSubmit = jest.fn(async () => {
      order.push('save');
    });
    const answer = reply();
    submit.mockImplementation(async () => {
      order.push('submit');
      return answer;
    });
    const form = new SubmitForm(formOptions(beforeSubmit));
    expect(await form.submit()).toBe(true);
    expect(order).toEqual(['save', 'submit']);
    expect(submit).toHaveBeenCalledWith(form.body());
    expect(form.result).toBe(answer);
    expect(form.busy).toBe(false);
    expect(form.node.hasAttribute('aria-busy')).toBe(false);
  });

  it('says what it is doing while it submits, and refuses a second submit', async () => {
    let accept!: (r: ISubmitReply) => void;
    submit.mockReturnValue(new Promise(r => (accept = r)));
    const form = new SubmitForm(formOptions());
    const status = form.node.querySelector('.gpuhub-JobForm-status')!;
    const first = form.submit();
    expect(form.busy).toBe(true);
    expect(form.node.getAttribute('aria-busy')).toBe('true');
    expect(status.textContent).toBe('Saving the notebook…');
    await until(() => submit.mock.calls.length > 0);
    expect(status.textContent).toBe('Submitting…');
    expect(await form.submit()).toBe(false);
    accept(reply());
    expect(await first).toBe(true);
    expect(status.textContent).toBe('');
    expect(submit).toHaveBeenCalledTimes(1);
  });

  it("shows the server's refusal in place and stays open", async () => {
    submit.mockRejectedValue(
      new GpuhubAPIError('At most 4 GPUs.', 400, 'gpus')
    );
    const form = new SubmitForm(formOptions());
    document.body.append(form.node);
    expect(await form.submit()).toBe(false);
    expect(form.result).toBeNull();
    const gpus = input(form, 'gpuhub-gpus');
    const error = document.getElementById(`${gpus.id}-error`)!;
    expect(error.hidden).toBe(false);
    expect(error.textContent).toBe('At most 4 GPUs.');
    expect(document.activeElement).toBe(gpus);
    // The next try starts clean.
    submit.mockResolvedValue(reply());
    expect(await form.submit()).toBe(true);
    expect(error.hidden).toBe(true);
  });

  it('does not post when the notebook could not be saved', async () => {
    const form = new SubmitForm(
      formOptions(jest.fn(async () => Promise.reject(new Error('Disk full.'))))
    );
    expect(await form.submit()).toBe(false);
    expect(submit).not.toHaveBeenCalled();
    expect(
      form.node.querySelector('.gpuhub-JobForm-general')!.textContent
    ).toBe('Disk full.');
  });

  it('starts the next dialog from the last accepted choices', async () => {
    submit.mockResolvedValue(reply());
    const first = new SubmitForm(formOptions());
    const gpus = input(first, 'gpuhub-gpus');
    gpus.value = '3';
    gpus.dispatchEvent(new Event('input'));
    input(first, 'gpuhub-cpu').value = '2';
    await first.submit();
    const second = new SubmitForm(formOptions());
    expect(second.body()).toMatchObject({ gpus: 3, cpu: 2 });
  });

  it('starts the next dialog within what the quota leaves now', async () => {
    submit.mockResolvedValue(reply());
    const first = new SubmitForm(formOptions());
    await first.submit(); // 1 GPU, accepted
    const spent = formOptions();
    spent.options = jobOptions({
      defaults: { gpus: 0 },
      quota: { left: 0, note: 'Your server holds your 1 GPU.' }
    });
    expect(new SubmitForm(spent).body().gpus).toBe(0);
  });

  it('does not remember a refused submit', async () => {
    submit.mockRejectedValue(new GpuhubAPIError('No.', 400, 'cpu'));
    const first = new SubmitForm(formOptions());
    input(first, 'gpuhub-cpu').value = '12';
    await first.submit();
    expect(FormState.last).toBeNull();
    expect(new SubmitForm(formOptions()).body().cpu).toBe(4);
  });
});

describe('showSubmitDialog', () => {
  const dialogNode = () => document.querySelector('.gpuhub-JobDialog');
  const button = (label: string) =>
    Array.from(document.querySelectorAll('.jp-Dialog-footer button')).find(
      b => b.textContent === label
    ) as HTMLButtonElement;

  it('is titled after the notebook and where it runs', async () => {
    const cluster = showSubmitDialog(formOptions());
    await until(() => dialogNode() !== null);
    expect(document.querySelector('.jp-Dialog-header')!.textContent).toContain(
      'Run train.ipynb on the cluster'
    );
    button('Cancel').click();
    expect(await cluster).toBeNull();
    expect(submit).not.toHaveBeenCalled();

    const local = showSubmitDialog({
      ...formOptions(),
      options: jobOptions({ kubernetes: false })
    });
    await until(() => dialogNode() !== null);
    expect(document.querySelector('.jp-Dialog-header')!.textContent).toContain(
      'Run train.ipynb as a job'
    );
    button('Cancel').click();
    expect(await local).toBeNull();
  });

  it('stays open on a refusal and closes with the answer once accepted', async () => {
    submit.mockRejectedValueOnce(new GpuhubAPIError('No GPUs left.', 409));
    const answer = reply();
    submit.mockResolvedValueOnce(answer);
    const shown = showSubmitDialog(formOptions());
    await until(() => dialogNode() !== null);
    button('Submit').click();
    await until(
      () =>
        !(document.querySelector('.gpuhub-JobForm-general') as HTMLElement)
          .hidden
    );
    expect(dialogNode()).not.toBeNull();
    expect(document.querySelector('.gpuhub-JobForm-general')!.textContent).toBe(
      'No GPUs left.'
    );
    expect(button('Submit').disabled).toBe(false);
    button('Submit').click();
    expect(await shown).toBe(answer);
    expect(submit).toHaveBeenCalledTimes(2);
  });
});
