/**
 * JupyterLab's "connection lost" under gpuhub's hub: when this server was
 * stopped, say so, by whom and why, and offer to start it again (instead of
 * "Server unavailable or unreachable"); when it still runs, JupyterLab's own
 * dialog, but only once the hub has had its time to mark a server that just
 * died stopped (`ServerGone.check`); should the hub say later that it was
 * stopped, that dialog gives way to gpuhub's. Replaces
 * `@jupyterlab/hub-extension:connectionlost`, which package.json disables,
 * and JupyterLab's default. Before a stop the hub has scheduled, it counts down
 * and saves open documents (`./stops.ts`).
 */
import {
  ConnectionLost,
  IConnectionLost,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Dialog } from '@jupyterlab/apputils';

import { ServerGone, hubServer } from './stopped';
import { StopWatcher, unsavedPaths } from './stops';

function openDialogs(): Set<Dialog<unknown>> {
  const open = new Set<Dialog<unknown>>();
  Dialog.tracker.forEach(dialog => open.add(dialog));
  return open;
}

export const connectionLostPlugin: JupyterFrontEndPlugin<IConnectionLost> = {
  id: 'gpuhub:connection-lost',
  description:
    'Says why this server stopped (an admin, idle reclaim) and offers to start it again.',
  autoStart: true,
  provides: IConnectionLost,
  activate: (app: JupyterFrontEnd): IConnectionLost => {
    if (!hubServer()) {
      return ConnectionLost;
    }
    // A stop the hub has scheduled: counted down, open documents saved before it; the
    // stopped dialog says what was saved and what was not.
    const documents = () => app.shell.widgets('main');
    const stops = new StopWatcher(documents);
    ServerGone.instance.documents(
      () => unsavedPaths(documents()),
      () => stops.saved
    );
    void app.restored.then(() => stops.start());
    let showing = false;
    // JupyterLab's "Server Connection Error" dialogs shown by this plugin: once the hub
    // says the server was stopped, they are wrong, and gpuhub's waits behind them.
    const jupyterDialogs = new Set<Dialog<unknown>>();
    ServerGone.instance.changed.connect(() => {
      for (const dialog of jupyterDialogs) {
        if (!dialog.isDisposed) {
          dialog.reject();
        }
      }
      jupyterDialogs.clear();
    });
    return async (manager, err, translator) => {
      if (showing) {
        return;
      }
      showing = true;
      try {
        if (!(await ServerGone.instance.check())) {
          const before = openDialogs();
          await ConnectionLost(manager, err, translator); // creates its dialog at once
          for (const dialog of jupyterDialogs) {
            if (dialog.isDisposed) {
              jupyterDialogs.delete(dialog); // closed by the person
            }
          }
          for (const dialog of openDialogs()) {
            if (!before.has(dialog)) {
              jupyterDialogs.add(dialog);
            }
          }
        }
      } finally {
        showing = false;
      }
    };
  }
};
