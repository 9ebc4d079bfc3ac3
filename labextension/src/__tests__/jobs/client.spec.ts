import { requestAPI } from '../../api';
import { JobsAPI } from '../../jobs/client';
import { ISubmitBody } from '../../jobs/types';

jest.mock('../../api', () => ({
  ...jest.requireActual('../../api'),
  requestAPI: jest.fn()
}));

const request = requestAPI as jest.MockedFunction<typeof requestAPI>;

describe('JobsAPI', () => {
  beforeEach(() => {
    request.mockReset();
    request.mockResolvedValue({} as any);
  });

  it('lists jobs from the list answer', async () => {
    request.mockResolvedValue({ jobs: [{ id: 'a' }, { id: 'b' }] } as any);
    expect(await JobsAPI.list()).toEqual([{ id: 'a' }, { id: 'b' }]);
    expect(request).toHaveBeenCalledWith('jobs', {});
  });

  it('asks for the options', async () => {
    await JobsAPI.options();
    expect(request).toHaveBeenCalledWith('jobs/options', {});
  });

  it('encodes job ids in the path', async () => {
    await JobsAPI.get('a/b c');
    expect(request).toHaveBeenCalledWith('jobs/a%2Fb%20c', {});
    await JobsAPI.cancel('x?y');
    expect(request).toHaveBeenLastCalledWith('jobs/x%3Fy', {
      method: 'DELETE'
    });
  });

  it('asks for a whole number of log lines, at least one', async () => {
    await JobsAPI.logs('j1', 2000);
    expect(request).toHaveBeenLastCalledWith('jobs/j1/logs?tail=2000', {});
    await JobsAPI.logs('j1', 99.6);
    expect(request).toHaveBeenLastCalledWith('jobs/j1/logs?tail=100', {});
    await JobsAPI.logs('j1', 0);
    expect(request).toHaveBeenLastCalledWith('jobs/j1/logs?tail=1', {});
  });

  it('posts a submit as JSON', async () => {
    const body: ISubmitBody = {
      notebook: 'train.ipynb',
      kind: 'job',
      gpus: 1,
      parameters: { lr: 0.1 }
    };
    await JobsAPI.submit(body);
    const [path, init] = request.mock.calls[0];
    expect(path).toBe('jobs');
    expect(init!.method).toBe('POST');
    expect(JSON.parse(init!.body as string)).toEqual(body);
  });
});
