import { API_ROOT, GpuhubAPIError, requestAPI } from '../api';
import { ServerGone } from '../hub/stopped';

/** One canned answer of the Jupyter server. */
function answer(status: number, body: string, statusText = ''): Response {
  return new Response(body, { status, statusText });
}

const fetchMock = jest.fn<Promise<Response>, [Request]>();

beforeAll(() => {
  // ServerConnection.makeSettings() reads the global fetch once, at the first request.
  (globalThis as any).fetch = fetchMock;
});

beforeEach(() => {
  fetchMock.mockReset();
});

async function failure(promise: Promise<unknown>): Promise<GpuhubAPIError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(GpuhubAPIError);
    return error as GpuhubAPIError;
  }
  throw new Error('the request did not fail');
}

describe('requestAPI', () => {
  it('calls the gpuhub API below the base URL and parses the JSON body', async () => {
    fetchMock.mockResolvedValue(answer(200, '{"gpus": [1, 2]}'));
    const data = await requestAPI<{ gpus: number[] }>('metrics?since=5', {
      method: 'GET'
    });
    expect(data).toEqual({ gpus: [1, 2] });
    expect(fetchMock).toHaveBeenCalledTimes(1);
    const request = fetchMock.mock.calls[0][0];
    const url = new URL(request.url);
    expect(url.pathname).toBe(`/${API_ROOT}/metrics`);
    expect(url.searchParams.get('since')).toBe('5');
    expect(request.method).toBe('GET');
  });

  it('passes the method and body on', async () => {
    fetchMock.mockResolvedValue(answer(201, '{"id": "j1"}'));
    await requestAPI('jobs', { method: 'POST', body: '{"kind":"job"}' });
    const request = fetchMock.mock.calls[0][0];
    expect(request.method).toBe('POST');
    expect(await request.text()).toBe('{"kind":"job"}');
  });

  it('answers null for an empty or non-JSON 2xx body', async () => {
    fetchMock.mockResolvedValueOnce(answer(200, ''));
    expect(await requestAPI('reclaim/keep')).toBeNull();
    fetchMock.mockResolvedValueOnce(answer(200, 'not json'));
    expect(await requestAPI('reclaim/keep')).toBeNull();
  });

  it("throws the server's message, field and every problem", async () => {
    fetchMock.mockResolvedValue(
      answer(
        400,
        JSON.stringify({
          message: 'Too many GPUs.',
          field: 'gpus',
          errors: [
            { field: 'gpus', message: 'Too many GPUs.' },
            { message: 'And no name.' },
            { field: 3, message: 'A field that is no string.' },
            { field: 'cpu' }, // no message: dropped
            null
          ]
        })
      )
    );
    const error = await failure(requestAPI('jobs'));
    expect(error.message).toBe('Too many GPUs.');
    expect(error.status).toBe(400);
    expect(error.field).toBe('gpus');
    expect(error.name).toBe('GpuhubAPIError');
    expect(error.errors).toEqual([
      { field: 'gpus', message: 'Too many GPUs.' },
      { field: null, message: 'And no name.' },
      { field: null, message: 'A field that is no string.' }
    ]);
  });

  it('makes the one message the only problem when the server lists none', async () => {
    fetchMock.mockResolvedValue(
      answer(403, JSON.stringify({ reason: 'Forbidden here.', field: 7 }))
    );
    const error = await failure(requestAPI('jobs'));
    expect(error.message).toBe('Forbidden here.');
    expect(error.field).toBeNull();
    expect(error.errors).toEqual([{ field: null, message: 'Forbidden here.' }]);
  });

  it('says the API is missing on a 404 without a message', async () => {
    fetchMock.mockResolvedValue(answer(404, '<html>Not found</html>'));
    const error = await failure(requestAPI('metrics'));
    expect(error.status).toBe(404);
    expect(error.message).toMatch(/no gpuhub API here/);
  });

  it('names the status of any other answer without a message', async () => {
    fetchMock.mockResolvedValue(answer(502, '', 'Bad Gateway'));
    const error = await failure(requestAPI('metrics'));
    expect(error.message).toBe('The server answered 502 Bad Gateway.');
  });

  it('reports status 0 when the server did not answer', async () => {
    fetchMock.mockRejectedValue(new TypeError('Failed to fetch'));
    const error = await failure(requestAPI('metrics'));
    expect(error.status).toBe(0);
    expect(error.message).toMatch(/did not answer/);
  });

  it('tells ServerGone the status of every refusal', async () => {
    const report = jest.spyOn(ServerGone.instance, 'report');
    try {
      fetchMock.mockResolvedValue(answer(424, '{"message": "Not running."}'));
      await failure(requestAPI('metrics'));
      expect(report).toHaveBeenCalledWith(424);
      report.mockClear();
      fetchMock.mockResolvedValue(answer(200, '{}'));
      await requestAPI('metrics');
      expect(report).not.toHaveBeenCalled();
    } finally {
      report.mockRestore();
    }
  });
});
