/**
 * The jobs REST API, as typed calls over `requestAPI` (`../api.ts`, the one
 * request helper): a refusal throws its `GpuhubAPIError`, with the server's
 * sentence and the field it names.
 */
import { requestAPI } from '../api';
import { IJob, IJobOptions, ISubmitBody, ISubmitReply } from './types';

const enc = encodeURIComponent;

function call<T>(path: string, init: RequestInit = {}): Promise<T> {
  return requestAPI<T>(path ? `jobs/${path}` : 'jobs', init);
}

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
