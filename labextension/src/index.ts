/**
 * gpuhub's JupyterLab extension: every frontend plugin, in one array.
 *
 * To add a plugin (for example the jobs panel under `src/jobs/`), import it
 * here and append it to `plugins`.
 */
import { JupyterFrontEndPlugin } from '@jupyterlab/application';

const plugins: JupyterFrontEndPlugin<any>[] = [];

export default plugins;
