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
    const model = new GpuMetricsModel({
      interval: settings.refreshInterval,
      windowSeconds: settings.windowMinutes * 60,
      idle: () =>
        !(panel?.isVisible ?? false) &&
        !(statusBar !== null && settings.showStatusBar),
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

    if (statusBar) {
      const item = new GpuStatus(model, () => {
        void app.commands.execute(CommandIDs.showPanel);
      });
      statusBar.registerStatusItem('gpuhub:gpu-status', {
        item,
        align: 'left',
        rank: 100,
        isActive: () => settings.showStatusBar
      });
    }

    if (settingRegistry) {
      const apply = (loaded: ISettingRegistry.ISettings) => {
        settings = { ...DEFAULTS, ...(loaded.composite as Partial<ISettings>) };
        model.configure(settings.refreshInterval, settings.windowMinutes * 60);
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
