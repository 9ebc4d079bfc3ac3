/**
 * The jobs REST API, as typed calls. Every request goes through
 * `ServerConnection.makeRequest` (see `../api.ts`), so the base URL, token
 * and XSRF header are JupyterLab's own.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { API_ROOT } from '../api';
import { IJob, IJobOptions, ISubmitBody, ISubmitReply } from './types';

/**
 * A refusal from the server: its one-sentence `message` and the `field` it
 * names ("gpus", "parameters", ...), so the dialog can show it in place.
 */
export class JobAPIError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly field: string | null
  ) {
    super(message);
    this.name = 'JobAPIError';
  }
}

let settings: ServerConnection.ISettings | null = null;

async function call<T>(path: string, init: RequestInit = {}): Promise<T> {
  settings = settings ?? ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, API_ROOT, 'jobs', path);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new JobAPIError(
      'The Jupyter server did not answer; check your connection.',
      0,
      null
    );
  }
  const text = await response.text();
  let data: any = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const message =
      (data && (data.message || data.reason)) ||
      (response.status === 404
        ? 'This server has no gpuhub jobs API (is the gpuhub_lab server extension enabled?).'
        : `The server answered ${response.status} ${response.statusText}.`);
    throw new JobAPIError(
      String(message),
      response.status,
      data && typeof data.field === 'string' ? data.field : null
    );
  }
  return data as T;
}

const enc = encodeURIComponent;

export const JobsAPI = {
  options: (): Promise<IJobOptions> => call<IJobOptions>('options'),

  list: async (): Promise<IJob[]> => (await call<{ jobs: IJob[] }>('')).jobs,

  get: (id: string): Promise<IJob> => call<IJob>(enc(id)),

  logs: (id: string, tail: number): Promise<{ status: string; logs: string }> =>
    call(`${enc(id)}/logs?tail=${Math.max(1, Math.round(tail))}`),

  submit: (body: ISubmitBody): Promise<ISubmitReply> =>
    call<ISubmitReply>('', { method: 'POST', body: JSON.stringify(body) }),

  cancel: (id: string): Promise<IJob> =>
    call<IJob>(enc(id), { method: 'DELETE' })
};
