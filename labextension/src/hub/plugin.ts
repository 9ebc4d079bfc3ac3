/**
 * JupyterLab's "connection lost" under gpuhub's hub: when this server was
 * stopped, say so, by whom and why, and offer to start it again (instead of
 * "Server unavailable or unreachable"); when it still runs, JupyterLab's own
 * dialog, but only once the hub has had its time to mark a server that just
 * died stopped (`ServerGone.check`). Replaces
 * `@jupyterlab/hub-extension:connectionlost`, which package.json disables,
 * and JupyterLab's default.
 */
import {
  ConnectionLost,
  IConnectionLost,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';

import { ServerGone, hubServer } from './stopped';

export const connectionLostPlugin: JupyterFrontEndPlugin<IConnectionLost> = {
  id: 'gpuhub:connection-lost',
  description:
    'Says why this server stopped (an admin, idle reclaim) and offers to start it again.',
  autoStart: true,
  provides: IConnectionLost,
  activate: (_app: JupyterFrontEnd): IConnectionLost => {
    if (!hubServer()) {
      return ConnectionLost;
    }
    let showing = false;
    return async (manager, err, translator) => {
      if (showing) {
        return;
      }
      showing = true;
      try {
        if (!(await ServerGone.instance.check())) {
          await ConnectionLost(manager, err, translator);
        }
      } finally {
        showing = false;
      }
    };
  }
};
