/**
 * The one way the lab frontend talks to gpuhub's server extension.
 *
 * URLs come from `ServerConnection.makeSettings()`, so the base URL, the
 * token and the XSRF header are handled by JupyterLab the same way as for
 * its own REST calls (works behind JupyterHub's `/user/<name>/` prefix).
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { ServerGone } from './hub/stopped';

/** Root of gpuhub's REST API, relative to the server's base URL. */
export const API_ROOT = 'gpuhub/api';

/** One thing wrong with a request: the field it names and its sentence. */
export interface IProblem {
  field: string | null;
  message: string;
}

/**
 * An error answer from the server: its one-sentence `message` and the
 * `field` it names ("gpus", "parameters", ...; docs/architecture.md, REST),
 * so a form can show it in place, and `errors`, everything wrong with the
 * request (the first is `message`). `status` is 0 when the server did not
 * answer at all.
 */
export class GpuhubAPIError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly field: string | null = null,
    errors: IProblem[] = []
  ) {
    super(message);
    this.name = 'GpuhubAPIError';
    this.errors = errors.length ? errors : [{ field, message }];
  }

  readonly errors: IProblem[];
}

function problems(data: any): IProblem[] {
  if (!data || !Array.isArray(data.errors)) {
    return [];
  }
  return data.errors
    .filter((e: any) => e && typeof e.message === 'string')
    .map((e: any) => ({
      field: typeof e.field === 'string' ? e.field : null,
      message: e.message
    }));
}

let settings: ServerConnection.ISettings | null = null;

/** This page's server settings (base URL, WebSocket URL, token), made once. */
export function serverSettings(): ServerConnection.ISettings {
  if (settings === null) {
    settings = ServerConnection.makeSettings();
  }
  return settings;
}

/**
 * Call `/gpuhub/api/<path>` and return the parsed JSON body.
 *
 * @param path - endpoint below the API root, e.g. `metrics` or `jobs/abc`.
 * @param init - fetch options (method, body as a JSON string, ...).
 * @throws GpuhubAPIError with the server's `message` (or `reason`) and
 *   `field` on a non-2xx answer, or a sentence of its own when the server
 *   did not answer or has no gpuhub API.
 */
export async function requestAPI<T>(
  path: string,
  init: RequestInit = {}
): Promise<T> {
  const s = serverSettings();
  const url = URLExt.join(s.baseUrl, API_ROOT, path);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, s);
  } catch {
    throw new GpuhubAPIError(
      'The Jupyter server did not answer; check your connection.',
      0
    );
  }
  const text = await response.text();
  let data: any = null;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!response.ok) {
    ServerGone.instance.report(response.status); // the hub: this server is not running
    const message =
      (data && (data.message || data.reason)) ||
      (response.status === 404
        ? 'This server has no gpuhub API here (is the gpuhub_lab server extension enabled?).'
        : `The server answered ${response.status} ${response.statusText}.`);
    throw new GpuhubAPIError(
      String(message),
      response.status,
      data && typeof data.field === 'string' ? data.field : null,
      problems(data)
    );
  }
  return data as T;
}

/**
 * The WebSocket URL of `/gpuhub/api/<path>`, authenticated the way
 * @jupyterlab/services opens a kernel's socket: under `settings.wsUrl`, with
 * the token appended only where `settings.appendToken` says (elsewhere the
 * browser's cookie authenticates the handshake).
 */
export function websocketURL(
  path: string,
  s: ServerConnection.ISettings = serverSettings()
): string {
  const url = URLExt.join(s.wsUrl, API_ROOT, path);
  return s.appendToken && s.token !== ''
    ? `${url}?token=${encodeURIComponent(s.token)}`
    : url;
}
