/**
 * The jobs plugin: "Run on cluster" (command palette, notebook toolbar,
 * Jobs panel) and the Jobs sidebar panel, with settings.
 */
import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  ICommandPalette,
  IToolbarWidgetRegistry,
  Notification,
  showErrorMessage
} from '@jupyterlab/apputils';
import type {
  DocumentRegistry,
  IDocumentWidget
} from '@jupyterlab/docregistry';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { CommandToolbarButton } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { JobsAPI } from './client';
import { formatTime, statusText } from './format';
import { jobsIcon, runOnClusterIcon } from './icon';
import { JobLogWidget } from './log';
import { JobsModel } from './model';
import { JobsPanel } from './panel';
import { parametersFromSource } from './params';
import { showSubmitDialog } from './submit/dialog';

export const JOBS_PLUGIN_ID = 'gpuhub:jobs';

export namespace JobsCommandIDs {
  /** Submit the current notebook (the toolbar button and palette entry). */
  export const runOnCluster = 'gpuhub:run-on-cluster';
  export const showJobs = 'gpuhub:show-jobs';
}

interface ISettings {
  activeInterval: number;
  idleInterval: number;
  logLines: number;
}

const DEFAULTS: ISettings = {
  activeInterval: 2,
  idleInterval: 30,
  logLines: 2000
};

type NotebookWidget = IDocumentWidget<Widget, DocumentRegistry.IModel>;

/** The widget if it is an open notebook document. */
/** A job's executed copy (under gpuhub-runs/) is a result to read, not a notebook to run. */
function runnable(widget: NotebookWidget | null): NotebookWidget | null {
  const path = widget?.context.path ?? '';
  return /(^|\/)gpuhub-runs\//.test(path) ? null : widget;
}

function asNotebook(widget: Widget | null): NotebookWidget | null {
  const context = (widget as Partial<NotebookWidget> | null)?.context;
  if (
    context &&
    typeof context.path === 'string' &&
    context.path.endsWith('.ipynb')
  ) {
    return widget as NotebookWidget;
  }
  return null;
}

/** `name = value` lines of the notebook's cell tagged "parameters", if any. */
function suggestedParameters(widget: NotebookWidget): Array<[string, string]> {
  try {
    const content = widget.context.model.toJSON() as {
      cells?: {
        cell_type: string;
        metadata?: { tags?: string[] };
        source: string | string[];
      }[];
    };
    const cell = (content.cells ?? []).find(
      c =>
        c.cell_type === 'code' &&
        (c.metadata?.tags ?? []).includes('parameters')
    );
    if (!cell) {
      return [];
    }
    const source = Array.isArray(cell.source)
      ? cell.source.join('')
      : cell.source;
    return parametersFromSource(source);
  } catch {
    return [];
  }
}

export const jobsPlugin: JupyterFrontEndPlugin<void> = {
  id: JOBS_PLUGIN_ID,
  description:
    'Run the open notebook as a training job or pipeline step, and follow its jobs.',
  autoStart: true,
  optional: [
    ILabShell,
    ILayoutRestorer,
    ICommandPalette,
    ISettingRegistry,
    IToolbarWidgetRegistry
  ],
  activate: (
    app: JupyterFrontEnd,
    labShell: ILabShell | null,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    settingRegistry: ISettingRegistry | null,
    toolbarRegistry: IToolbarWidgetRegistry | null
  ) => {
    let settings: ISettings = { ...DEFAULTS };
    // The last notebook the user worked in: the sidebar button still knows it
    // while focus is in the sidebar, a terminal or the file browser.
    let lastNotebook: NotebookWidget | null = null;
    const currentNotebook = (): NotebookWidget | null => {
      const current = runnable(asNotebook(app.shell.currentWidget));
      if (current) {
        lastNotebook = current;
      }
      if (lastNotebook?.isDisposed) {
        lastNotebook = null;
      }
      return current ?? lastNotebook;
    };

    // Where jobs run decides what the command is called: "Run on cluster" only when
    // they do run on a cluster (Kubernetes mode), "Run as job" on the workstation.
    let onCluster = false;
    const runLabel = (toolbar: boolean): string =>
      toolbar
        ? onCluster
          ? 'Run on cluster'
          : 'Run as job'
        : onCluster
          ? 'Run Notebook on Cluster…'
          : 'Run Notebook as Job…';

    let panel: JobsPanel | null = null;
    const logTabs = new Map<string, JobLogWidget>();
    const model = new JobsModel({
      activeInterval: settings.activeInterval,
      idleInterval: settings.idleInterval,
      hidden: () => !(panel?.isVisible ?? false)
    });

    const runOnCluster = async (): Promise<void> => {
      const widget = currentNotebook();
      if (!widget) {
        await showErrorMessage(
          'No notebook to run',
          `Open the notebook you want to run, then choose ${runLabel(true)} again.`
        );
        return;
      }
      const context = widget.context;
      let options;
      try {
        options = await JobsAPI.options();
      } catch (error) {
        await showErrorMessage(
          'Jobs are unavailable',
          (error as Error).message
        );
        return;
      }
      panel!.setKinds(options.kinds);
      const reply = await showSubmitDialog({
        notebook: context.localPath ?? context.path,
        options,
        suggested: suggestedParameters(widget),
        beforeSubmit: async () => {
          if (context.model.dirty && !context.model.readOnly) {
            await context.save();
          }
        }
      });
      if (!reply) {
        return;
      }
      model.upsert(reply.job);
      panel!.follow(reply.id);
      app.shell.activateById(panel!.id);
      // Held by the cluster's queue: say so and where in line, so a wait is expected.
      const queued =
        reply.job.status === 'queued'
          ? `; ${statusText(reply.job).toLowerCase()}`
          : '';
      Notification.success(
        `Submitted ${reply.job.name}: ${reply.job.gpu}${queued}.`,
        { autoClose: 4000 }
      );
      if (reply.warning) {
        // As %submit says it: parameters the notebook has no cell for were not applied.
        Notification.warning(reply.warning, { autoClose: false });
      }
      void model.refresh();
    };

    panel = new JobsPanel({
      model,
      runCurrent: () => void app.commands.execute(JobsCommandIDs.runOnCluster),
      currentNotebook: () => currentNotebook()?.context.path ?? null,
      open: path => void app.commands.execute('docmanager:open', { path }),
      openResult: job => {
        // The executed copy is named after the job (gpuhub-runs/<id>/<id>.ipynb), so its
        // tab says which run it is; the caption adds what it is a result of.
        void app.commands
          .execute('docmanager:open', { path: job.output })
          .then((widget: Widget | undefined) => {
            if (widget?.title) {
              widget.title.caption = `Result of job ${job.name} (${formatTime(job.started ?? job.created)}): ${job.output}`;
            }
          });
      },
      openLog: job => {
        let tab = logTabs.get(job.id);
        if (!tab || tab.isDisposed) {
          tab = new JobLogWidget({
            jobId: job.id,
            jobName: job.name,
            interval: settings.activeInterval,
            lines: settings.logLines,
            status: () =>
              model.jobs?.find(j => j.id === job.id)?.status ?? job.status
          });
          logTabs.set(job.id, tab);
          app.shell.add(tab, 'main', { mode: 'split-right' });
        }
        app.shell.activateById(tab.id);
      },
      logInterval: settings.activeInterval,
      logLines: settings.logLines
    });
    app.shell.add(panel, 'left', { rank: 910, type: 'Jobs' });
    restorer?.add(panel, panel.id);

    app.commands.addCommand(JobsCommandIDs.runOnCluster, {
      label: args => runLabel(!!args.toolbar),
      caption: () =>
        onCluster
          ? 'Run this notebook on the cluster as a training job or pipeline step, with the GPUs you choose'
          : "Run a copy of this notebook in the background on this server's GPUs",
      icon: args => (args.toolbar ? runOnClusterIcon : undefined),
      isEnabled: () => currentNotebook() !== null,
      execute: () => runOnCluster()
    });
    app.commands.addCommand(JobsCommandIDs.showJobs, {
      label: 'Show Jobs',
      caption: 'Open the Jobs panel in the left sidebar',
      icon: jobsIcon,
      execute: () => app.shell.activateById(panel!.id)
    });
    // The notebook toolbar button (declared in the settings schema) shows its words,
    // which depend on where jobs run, so it is built here rather than from a fixed label.
    toolbarRegistry?.addFactory('Notebook', 'gpuhub-run-on-cluster', () => {
      return new CommandToolbarButton({
        commands: app.commands,
        id: JobsCommandIDs.runOnCluster,
        args: { toolbar: true },
        label: () => runLabel(true)
      });
    });
    if (palette) {
      palette.addItem({
        command: JobsCommandIDs.runOnCluster,
        category: 'GPU'
      });
      palette.addItem({ command: JobsCommandIDs.showJobs, category: 'GPU' });
    }

    // A run that ends while the user works elsewhere is announced, with the
    // next step one click away.
    model.finished.connect((_, job) => {
      logTabs.get(job.id)?.refresh();
      const actions = job.output
        ? [
            {
              label: 'Open result',
              callback: () =>
                void app.commands.execute('docmanager:open', {
                  path: job.output
                })
            }
          ]
        : [];
      const options = {
        autoClose: job.status === 'succeeded' ? 8000 : (false as const),
        actions
      };
      if (job.status === 'succeeded') {
        Notification.success(`Job ${job.name} succeeded.`, options);
      } else if (job.status === 'failed') {
        Notification.error(
          `Job ${job.name} failed: ${job.error ?? 'see its log'}`,
          options
        );
      } else {
        Notification.info(`Job ${job.name} was cancelled.`, {
          autoClose: 5000
        });
      }
    });

    JobsAPI.options()
      .then(options => {
        onCluster = options.kubernetes;
        panel!.setRunLabel(runLabel(true), onCluster);
        panel!.setKinds(options.kinds);
        app.commands.notifyCommandChanged(JobsCommandIDs.runOnCluster);
      })
      .catch(() => undefined); // the dialog says why jobs are unavailable when opened

    labShell?.currentChanged.connect(() => {
      currentNotebook();
      panel!.updateRunButton();
      app.commands.notifyCommandChanged(JobsCommandIDs.runOnCluster);
    });

    if (settingRegistry) {
      const apply = (loaded: ISettingRegistry.ISettings): void => {
        settings = { ...DEFAULTS, ...(loaded.composite as Partial<ISettings>) };
        model.configure(settings.activeInterval, settings.idleInterval);
        panel!.configure(settings.activeInterval, settings.logLines);
      };
      settingRegistry
        .load(JOBS_PLUGIN_ID)
        .then(loaded => {
          apply(loaded);
          loaded.changed.connect(apply);
        })
        .catch(reason =>
          console.warn('gpuhub: jobs settings not loaded', reason)
        );
    }
  }
};
