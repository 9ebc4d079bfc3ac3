/**
 * The one way the lab frontend talks to gpuhub's server extension.
 *
 * URLs come from `ServerConnection.makeSettings()`, so the base URL, the
 * token and the XSRF header are handled by JupyterLab the same way as for
 * its own REST calls (works behind JupyterHub's `/user/<name>/` prefix).
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** Root of gpuhub's REST API, relative to the server's base URL. */
export const API_ROOT = 'gpuhub/api';

/** An error answer from the server, with the one-sentence message it sent. */
export class GpuhubAPIError extends Error {
  constructor(
    message: string,
    readonly status: number
  ) {
    super(message);
    this.name = 'GpuhubAPIError';
  }
}

let settings: ServerConnection.ISettings | null = null;

function serverSettings(): ServerConnection.ISettings {
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
 * @throws GpuhubAPIError with the server's `message` (or `reason`) on non-2xx.
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
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }
  const text = await response.text();
  let data: any = null;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      data = { message: text };
    }
  }
  if (!response.ok) {
    const message =
      (data && (data.message || data.reason)) ||
      `${response.status} ${response.statusText}`;
    throw new GpuhubAPIError(String(message), response.status);
  }
  return data as T;
}
