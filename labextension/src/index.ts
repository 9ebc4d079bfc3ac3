/**
 * gpuhub's JupyterLab extension: every frontend plugin, in one array.
 *
 * To add a plugin (for example the jobs panel under `src/jobs/`), import it
 * here and append it to `plugins`. Its settings schema goes in
 * `labextension/schema/<name>.json` and its plugin id is `gpuhub:<name>`.
 */
import { JupyterFrontEndPlugin } from '@jupyterlab/application';

import { gpuPlugin } from './gpu/plugin';
import { connectionLostPlugin } from './hub/plugin';
import { jobsPlugin } from './jobs/plugin';

export { requestAPI, GpuhubAPIError } from './api';

const plugins: JupyterFrontEndPlugin<any>[] = [
  gpuPlugin,
  jobsPlugin,
  connectionLostPlugin
];

export default plugins;
