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

/**
 * An error answer from the server: its one-sentence `message` and the
 * `field` it names ("gpus", "parameters", ...; docs/architecture.md, REST),
 * so a form can show it in place. `status` is 0 when the server did not
 * answer at all.
 */
export class GpuhubAPIError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly field: string | null = null
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
    const message =
      (data && (data.message || data.reason)) ||
      (response.status === 404
        ? 'This server has no gpuhub API here (is the gpuhub_lab server extension enabled?).'
        : `The server answered ${response.status} ${response.statusText}.`);
    throw new GpuhubAPIError(
      String(message),
      response.status,
      data && typeof data.field === 'string' ? data.field : null
    );
  }
  return data as T;
}
