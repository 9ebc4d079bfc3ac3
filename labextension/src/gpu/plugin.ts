/**
 * The GPU plugin: sidebar panel, status bar item, command and settings.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { gpuIcon } from './icon';
import { GpuMetricsModel } from './model';
import { GpuPanel } from './panel';
import { ReclaimWatcher, clockText } from './reclaim';
import { GpuStatus } from './status';

export const GPU_PLUGIN_ID = 'gpuhub:gpu';

export namespace CommandIDs {
  export const showPanel = 'gpuhub:show-gpu-panel';
}

interface ISettings {
  refreshInterval: number;
  windowMinutes: number;
  showStatusBar: boolean;
}

const DEFAULTS: ISettings = {
  refreshInterval: 1,
  windowMinutes: 5,
  showStatusBar: true
};

/** Neither the panel nor the status bar item shows GPU figures now: the model rests. */
export function nobodyShows(
  panel: Widget | null,
  status: GpuStatus | null
): boolean {
  return !(panel?.isVisible ?? false) && !(status?.showing ?? false);
}

export const gpuPlugin: JupyterFrontEndPlugin<void> = {
  id: GPU_PLUGIN_ID,
  description:
    'Live GPU usage per device and per notebook, in the sidebar and status bar.',
  autoStart: true,
  optional: [ILayoutRestorer, IStatusBar, ISettingRegistry, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    statusBar: IStatusBar | null,
    settingRegistry: ISettingRegistry | null,
    palette: ICommandPalette | null
  ) => {
    let settings: ISettings = { ...DEFAULTS };
    let panel: GpuPanel | null = null;
    let status: GpuStatus | null = null;
    // One model per tab, so one socket: the panel and the status bar item share it, and
    // it streams only while one of them shows.
    const model = new GpuMetricsModel({
      interval: settings.refreshInterval,
      windowSeconds: settings.windowMinutes * 60,
      idle: () => nobodyShows(panel, status),
      background: () => !(panel?.isVisible ?? false)
    });
    panel = new GpuPanel({
      model,
      commands: app.commands,
      kernels: app.serviceManager.kernels
    });
    app.shell.add(panel, 'left', { rank: 900, type: 'GPU' });
    const reclaim = new ReclaimWatcher();
    reclaim.changed.connect((_, state) => {
      panel?.showIdleClock(clockText(state), state?.server?.warned ?? false);
    });
    void app.restored.then(() => reclaim.start());
    if (restorer) {
      restorer.add(panel, panel.id);
    }

    app.commands.addCommand(CommandIDs.showPanel, {
      label: 'Show GPU Usage',
      caption: 'Open the GPU panel in the left sidebar',
      icon: gpuIcon,
      execute: () => {
        app.shell.activateById(panel!.id);
      }
    });
    if (palette) {
      palette.addItem({ command: CommandIDs.showPanel, category: 'GPU' });
    }

    // Emitted when the showStatusBar setting changes: the status bar shows or hides the item.
    const activeStateChanged = new Signal<GpuMetricsModel, void>(model);
    if (statusBar) {
      status = new GpuStatus(model, () => {
        void app.commands.execute(CommandIDs.showPanel);
      });
      statusBar.registerStatusItem('gpuhub:gpu-status', {
        item: status,
        align: 'left',
        rank: 100,
        isActive: () => settings.showStatusBar,
        activeStateChanged
      });
    }

    if (settingRegistry) {
      const apply = (loaded: ISettingRegistry.ISettings) => {
        const shown = settings.showStatusBar;
        settings = { ...DEFAULTS, ...(loaded.composite as Partial<ISettings>) };
        model.configure(settings.refreshInterval, settings.windowMinutes * 60);
        if (settings.showStatusBar !== shown) {
          activeStateChanged.emit(); // hides or shows the item, which wakes the model
        }
        model.wake();
      };
      settingRegistry
        .load(GPU_PLUGIN_ID)
        .then(loaded => {
          apply(loaded);
          loaded.changed.connect(apply);
        })
        .catch(reason => {
          console.warn('gpuhub: could not load the GPU panel settings', reason);
        });
    }
  }
};
