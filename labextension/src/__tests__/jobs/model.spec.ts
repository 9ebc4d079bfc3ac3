import { GpuhubAPIError } from '../../api';
import { JobsAPI } from '../../jobs/client';
import { JobsModel, LogFollower } from '../../jobs/model';
import { FINAL_STATUSES, IJob } from '../../jobs/types';
import { nextEmission, settle, until } from '../utils';
import { job } from './fixtures';

jest.mock('../../jobs/client', () => ({
  JobsAPI: {
    list: jest.fn(),
    logs: jest.fn(),
    cancel: jest.fn()
  }
}));

const api = JobsAPI as jest.Mocked<typeof JobsAPI>;

/** Answers, in order, to the list requests (the last one repeats). */
function lists(...answers: (IJob[] | Error)[]): void {
  api.list.mockImplementation(async () => {
    const next = answers.length > 1 ? answers.shift()! : answers[0];
    if (next instanceof Error) {
      throw next;
    }
    return next;
  });
}

describe('FINAL_STATUSES', () => {
  it('are the statuses of an ended job', () => {
    expect(Array.from(FINAL_STATUSES).sort()).toEqual([
      'cancelled',
      'failed',
      'succeeded'
    ]);
  });
});

describe('JobsModel', () => {
  let model: JobsModel;
  let hidden: boolean;

  function create(activeInterval = 2, idleInterval = 30): JobsModel {
    model = new JobsModel({
      activeInterval,
      idleInterval,
      hidden: () => hidden
    });
    return model;
  }

  /** Poll now; resolves once the answer is in and the poll has settled. */
  async function poll(): Promise<void> {
    const changed = nextEmission(model.changed);
    await model.refresh();
    await changed;
    await settle();
  }

  const interval = () => (model as any)._poll.frequency.interval;

  beforeEach(() => {
    hidden = false;
    jest.clearAllMocks();
  });

  afterEach(() => model?.dispose());

  it('has no jobs until the first answer, then the list', async () => {
    const jobs = [job({ id: 'b' }), job({ id: 'a' })];
    lists(jobs);
    create();
    expect(model.jobs).toBeNull();
    expect(model.active).toBe(false);
    await nextEmission(model.changed);
    expect(model.jobs).toBe(jobs);
    expect(model.error).toBeNull();
  });

  it('is active while some job has not ended, whatever its status', async () => {
    lists(
      [job({ status: 'succeeded' }), job({ id: 'b', status: 'failed' })],
      [job({ status: 'succeeded' }), job({ id: 'b', status: 'queued' })],
      [
        job({ status: 'succeeded' }),
        job({ id: 'b', status: 'suspended' as any })
      ]
    );
    create();
    await nextEmission(model.changed);
    await settle();
    expect(model.active).toBe(false);
    await poll();
    expect(model.active).toBe(true);
    await poll();
    expect(model.active).toBe(true); // unknown: still awaited
  });

  it('announces each job seen to end, once', async () => {
    lists(
      [
        job({ id: 'run', status: 'running' }),
        job({ id: 'queued', status: 'queued' }),
        job({ id: 'old', status: 'failed' })
      ],
      [
        job({ id: 'run', status: 'succeeded' }),
        job({ id: 'queued', status: 'pending' }),
        job({ id: 'old', status: 'failed' }),
        job({ id: 'new', status: 'cancelled' })
      ],
      [
        job({ id: 'run', status: 'succeeded' }),
        job({ id: 'queued', status: 'failed' }),
        job({ id: 'old', status: 'failed' }),
        job({ id: 'new', status: 'cancelled' })
      ]
    );
    const ended: string[] = [];
    create();
    model.finished.connect((_, j) => ended.push(`${j.id}:${j.status}`));
    await nextEmission(model.changed);
    await settle();
    expect(ended).toEqual([]);
    await poll();
    // Not 'old' (ended before this page saw it) nor 'new' (first seen ended).
    expect(ended).toEqual(['run:succeeded']);
    await poll();
    expect(ended).toEqual(['run:succeeded', 'queued:failed']);
  });

  it('says why a poll failed, and recovers', async () => {
    lists(
      new GpuhubAPIError('Jobs are not available.', 503),
      new Error('boom'),
      [job()]
    );
    create();
    await nextEmission(model.changed);
    await settle();
    expect(model.error).toBe('Jobs are not available.');
    expect(model.jobs).toBeNull();
    await poll();
    expect(model.error).toBe('Error: boom');
    await poll();
    expect(model.error).toBeNull();
    expect(model.jobs).toHaveLength(1);
  });

  it('puts a job it is given in place, newest first', async () => {
    lists([
      job({ id: 'b', created: '2025-03-02T00:00:00Z' }),
      job({ id: 'a', created: '2025-03-01T00:00:00Z' })
    ]);
    create();
    await nextEmission(model.changed);
    let changes = 0;
    model.changed.connect(() => changes++);
    model.upsert(job({ id: 'c', created: '2025-03-01T12:00:00Z' }));
    expect(model.jobs!.map(j => j.id)).toEqual(['b', 'c', 'a']);
    model.upsert(job({ id: 'a', created: '2025-03-03T00:00:00Z', name: 'x' }));
    expect(model.jobs!.map(j => j.id)).toEqual(['a', 'b', 'c']);
    expect(model.jobs![0].name).toBe('x');
    expect(changes).toBe(2);
  });

  it('cancels through the API and announces the end', async () => {
    lists([job({ id: 'a', status: 'running' })]);
    create();
    await nextEmission(model.changed);
    const cancelled = job({ id: 'a', status: 'cancelled' });
    api.cancel.mockResolvedValue(cancelled);
    const ended: IJob[] = [];
    model.finished.connect((_, j) => ended.push(j));
    expect(await model.cancel('a')).toBe(cancelled);
    expect(api.cancel).toHaveBeenCalledWith('a');
    expect(model.jobs).toEqual([cancelled]);
    expect(ended).toEqual([cancelled]);
    expect(model.active).toBe(false);
  });

  it('polls at the active pace while shown, at the idle pace while hidden', async () => {
    lists([job({ status: 'running' })]);
    create(2, 30);
    expect(interval()).toBe(2000);
    await nextEmission(model.changed);
    hidden = true;
    model.configure(2, 30);
    expect(interval()).toBe(30_000);
    hidden = false;
    model.configure(0.1, 30);
    expect(interval()).toBe(500); // never faster than twice a second
  });

  it('does not poll while hidden with nothing running, but does for a running job', async () => {
    hidden = true;
    lists([]);
    create();
    await settle(30);
    expect(api.list).not.toHaveBeenCalled();
    model.upsert(job({ status: 'running' }));
    await poll();
    expect(api.list).toHaveBeenCalledTimes(1);
  });

  it('can be disposed twice', () => {
    lists([]);
    create();
    model.dispose();
    model.dispose();
    expect(model.isDisposed).toBe(true);
  });
});

describe('LogFollower', () => {
  let follower: LogFollower;

  function follow(): LogFollower {
    follower = new LogFollower('j1', {
      interval: 1,
      tail: 500,
      hidden: () => false
    });
    return follower;
  }

  async function poll(): Promise<void> {
    const changed = nextEmission(follower.changed);
    await follower.refresh();
    await changed;
    await settle();
  }

  beforeEach(() => jest.clearAllMocks());
  afterEach(() => follower?.dispose());

  it('fetches the last lines of the job', async () => {
    api.logs.mockResolvedValue({ status: 'running', logs: 'epoch 1\n' });
    follow();
    expect(follower.text).toBe('');
    await nextEmission(follower.changed);
    expect(api.logs).toHaveBeenCalledWith('j1', 500);
    expect(follower.text).toBe('epoch 1\n');
    expect(follower.error).toBeNull();
    api.logs.mockResolvedValue({
      status: 'running',
      logs: 'epoch 1\nepoch 2\n'
    });
    await settle();
    await poll();
    expect(follower.text).toBe('epoch 1\nepoch 2\n');
  });

  it('stops asking once the job has ended', async () => {
    api.logs.mockResolvedValue({ status: 'succeeded', logs: 'done\n' });
    follow();
    await nextEmission(follower.changed);
    await settle();
    expect(follower.text).toBe('done\n');
    await follower.refresh();
    await settle(20);
    expect(api.logs).toHaveBeenCalledTimes(1);
  });

  it('says why the log cannot be read, and gives up on a job that is gone', async () => {
    api.logs.mockRejectedValue(new GpuhubAPIError('Pod not ready.', 409));
    follow();
    await nextEmission(follower.changed);
    await settle();
    expect(follower.error).toBe('Pod not ready.');
    api.logs.mockRejectedValue(new GpuhubAPIError('No such job.', 404));
    await poll();
    expect(follower.error).toBe('No such job.');
    expect(api.logs).toHaveBeenCalledTimes(2);
    await follower.refresh();
    await settle(20);
    expect(api.logs).toHaveBeenCalledTimes(2);
  });

  it('says nothing more once disposed', async () => {
    let answer!: (v: { status: string; logs: string }) => void;
    api.logs.mockReturnValue(new Promise(r => (answer = r)));
    follow();
    let changes = 0;
    follower.changed.connect(() => changes++);
    await until(() => api.logs.mock.calls.length > 0);
    follower.dispose();
    expect(follower.isDisposed).toBe(true);
    answer({ status: 'running', logs: 'late' });
    await settle();
    expect(changes).toBe(0);
  });
});
