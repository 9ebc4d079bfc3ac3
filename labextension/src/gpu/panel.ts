/**
 * The "GPU" sidebar panel: one card per GPU with live charts, and which of
 * this server's notebooks hold how much GPU memory.
 *
 * Plain DOM, updated in place (cards are keyed by GPU UUID and a process list
 * is only rebuilt when it changed), so keyboard focus survives the updates.
 * All text goes through `textContent`: nothing from the server is parsed as
 * HTML.
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { PageConfig } from '@jupyterlab/coreutils';
import { Kernel } from '@jupyterlab/services';
import { CommandRegistry } from '@lumino/commands';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { h, setText } from '../dom';
import { ServerGone, startAgainUrl } from '../hub/stopped';
import { formatTime } from '../time';
import { assignedText, basename, gib, percent, unit } from './format';
import { gpuIcon } from './icon';
import { IBudget, resetTime } from './budgets';
import { HoldingsSection, IHoldings } from './holdings';
import { GpuMetricsModel } from './model';
import { Sparkline } from './sparkline';
import { IAssigned, IGpu } from './types';

export namespace GpuPanel {
  export interface IOptions {
    model: GpuMetricsModel;
    commands: CommandRegistry;
    kernels: Kernel.IManager;
  }
}

/** One notebook (kernel) or "other processes" on one GPU. */
interface IHolder {
  kernelId: string | null;
  path: string | null;
  memory: number | null;
  pids: number[];
}

function holders(gpu: IGpu): IHolder[] {
  const byKernel = new Map<string, IHolder>();
  const others: IHolder = {
    kernelId: null,
    path: null,
    memory: null,
    pids: []
  };
  for (const p of gpu.processes) {
    let holder = others;
    if (p.kernel_id) {
      holder = byKernel.get(p.kernel_id) ?? {
        kernelId: p.kernel_id,
        path: p.path,
        memory: null,
        pids: []
      };
      byKernel.set(p.kernel_id, holder);
    }
    holder.pids.push(p.pid);
    if (p.memory_used !== null) {
      holder.memory = (holder.memory ?? 0) + p.memory_used;
    }
  }
  const list = Array.from(byKernel.values()).sort(
    (a, b) => (b.memory ?? 0) - (a.memory ?? 0)
  );
  if (others.pids.length) {
    list.push(others);
  }
  return list;
}

/** The time scale under a chart: "−5 min ... now". */
function axis(): HTMLElement {
  const node = h('div', { className: 'gpuhub-GpuCard-axis' });
  node.setAttribute('aria-hidden', 'true');
  node.append(h('span', {}, ''), h('span', {}, 'now'));
  return node;
}

function holderKey(holder: IHolder): string {
  return holder.kernelId ?? '';
}

/** One line of "GPU memory held by": a notebook (with Open and Shut down) or other processes. */
class HolderRow {
  constructor(private _panel: GpuPanel) {
    this.node = h('li', { className: 'gpuhub-GpuCard-holder' });
    this._label = h('span', { className: 'gpuhub-GpuCard-holderName' });
    this._memory = h('span', { className: 'gpuhub-GpuCard-holderMemory' });
    const row = h('div', { className: 'gpuhub-GpuCard-holderRow' });
    this._actions = h('span', { className: 'gpuhub-GpuCard-actions' });
    this._open = h(
      'button',
      { className: 'jp-Button jp-mod-minimal gpuhub-Button' },
      'Open'
    );
    this._open.onclick = () => {
      if (this._holder?.path) {
        void this._panel.openNotebook(this._holder.path);
      }
    };
    this._stop = h(
      'button',
      { className: 'jp-Button jp-mod-minimal gpuhub-Button' },
      'Shut down'
    );
    this._stop.title = 'Shut down this kernel and free its GPU memory';
    this._stop.onclick = () => {
      if (this._holder?.kernelId) {
        void this._panel.shutDownKernel(this._holder.kernelId, this._name);
      }
    };
    this._actions.append(this._open, this._stop);
    row.append(this._memory, this._actions);
    this.node.append(this._label, row);
  }

  readonly node: HTMLElement;

  update(holder: IHolder): void {
    this._holder = holder;
    const name = holder.kernelId
      ? holder.path
        ? basename(holder.path)
        : `Kernel ${holder.kernelId.slice(0, 8)}`
      : holder.pids.length === 1
        ? `Other process (pid ${holder.pids[0]})`
        : `${holder.pids.length} other processes`;
    this._name = name;
    setText(this._label, name);
    this._label.title = holder.path ?? `pid ${holder.pids.join(', ')}`;
    setText(this._memory, gib(holder.memory));
    // Buttons only for a kernel, Open only where its notebook is known; hidden ones
    // leave the DOM, so lists and tests see only what applies.
    if (!holder.kernelId) {
      this._actions.remove();
      return;
    }
    if (!this._actions.parentNode) {
      this.node.lastElementChild!.append(this._actions);
    }
    if (holder.path) {
      this._open.title = `Open ${holder.path}`;
      this._open.setAttribute('aria-label', `Open ${holder.path}`);
      if (!this._open.parentNode) {
        this._actions.prepend(this._open);
      }
    } else {
      this._open.remove();
    }
    this._stop.setAttribute('aria-label', `Shut down the kernel of ${name}`);
  }

  private _actions: HTMLElement;
  private _holder: IHolder | null = null;
  private _label: HTMLElement;
  private _memory: HTMLElement;
  private _name = '';
  private _open: HTMLButtonElement;
  private _stop: HTMLButtonElement;
}

class GpuCard {
  constructor(private _panel: GpuPanel) {
    this.node = h('section', { className: 'gpuhub-GpuCard' });
    this.node.tabIndex = 0;
    const header = h('header', { className: 'gpuhub-GpuCard-header' });
    this._title = h('h3', { className: 'gpuhub-GpuCard-title' });
    this._badge = h('span', { className: 'gpuhub-GpuCard-badge' }, 'MIG');
    this._badge.title = 'A MIG slice: a hardware partition of a larger GPU';
    header.append(this._title, this._badge);
    this._error = h('p', { className: 'gpuhub-GpuCard-error' });
    this._error.setAttribute('role', 'alert');

    this._utilValue = h('span', { className: 'gpuhub-GpuCard-value' });
    this._memValue = h('span', { className: 'gpuhub-GpuCard-value' });
    this._utilChart = new Sparkline('gpuhub-Sparkline-util', 'Utilization');
    this._memChart = new Sparkline('gpuhub-Sparkline-memory', 'Memory');
    const util = h('div', { className: 'gpuhub-GpuCard-metric' });
    util.append(
      h('span', { className: 'gpuhub-GpuCard-label' }, 'Utilization'),
      this._utilValue
    );
    const mem = h('div', { className: 'gpuhub-GpuCard-metric' });
    mem.append(
      h('span', { className: 'gpuhub-GpuCard-label' }, 'Memory'),
      this._memValue
    );
    this._vitals = h('div', { className: 'gpuhub-GpuCard-vitals' });
    this._figures = h('div', { className: 'gpuhub-GpuCard-figures' });
    this._utilAxis = axis();
    this._memAxis = axis();
    this._figures.append(
      util,
      this._utilChart.node,
      this._utilAxis,
      mem,
      this._memChart.node,
      this._memAxis,
      this._vitals
    );

    this._holdersTitle = h(
      'h4',
      { className: 'gpuhub-GpuCard-subtitle' },
      'GPU memory held by'
    );
    this._holders = h('ul', { className: 'gpuhub-GpuCard-holders' });
    this.node.append(
      header,
      this._error,
      this._figures,
      this._holdersTitle,
      this._holders
    );
  }

  readonly node: HTMLElement;

  update(gpu: IGpu, model: GpuMetricsModel): void {
    const kind = gpu.mig ? `GPU ${gpu.index} slice` : `GPU ${gpu.index}`;
    setText(this._title, `${kind} · ${gpu.name}`);
    this._title.title = gpu.uuid;
    this.node.setAttribute('aria-label', `${kind}, ${gpu.name}`);
    this._badge.hidden = !gpu.mig;
    this._error.hidden = !gpu.error;
    setText(this._error, gpu.error ?? '');
    this._figures.hidden = !!gpu.error;
    if (gpu.error) {
      this._holdersTitle.hidden = true;
      this._holders.hidden = true;
      return;
    }
    const util = percent(gpu.utilization);
    setText(this._utilValue, util);
    this._utilValue.title =
      gpu.utilization === null
        ? gpu.mig
          ? 'NVML reports no utilization for a MIG slice (a DCGM exporter does).'
          : 'This GPU does not report its utilization.'
        : '';
    const memText = `${gib(gpu.memory_used)} of ${gib(gpu.memory_total)}`;
    setText(this._memValue, memText);
    setText(
      this._vitals,
      [unit(gpu.temperature, '°C'), unit(gpu.power, 'W')]
        .filter(Boolean)
        .join(' · ')
    );

    const times = model.times;
    const series = model.series(gpu.uuid);
    const end = times.length ? times[times.length - 1] : 0;
    // Until there is a full window of history, show what there is (at least a minute),
    // rather than a chart that is empty but for its right edge.
    const kept = times.length ? end - times[0] : 0;
    const window = Math.min(model.windowSeconds, Math.max(60, kept));
    const gap = Math.max(3 * (model.metrics?.interval ?? 1), 5);
    const minutes = Math.max(1, Math.round(window / 60));
    const noUtil = gpu.utilization === null;
    this._utilChart.node.style.display = noUtil ? 'none' : '';
    this._utilAxis.hidden = noUtil;
    for (const node of [this._utilAxis, this._memAxis]) {
      setText(node.firstElementChild!, `−${minutes} min`);
    }
    this._utilChart.update(
      times,
      series.utilization,
      100,
      end,
      window,
      gap,
      `Utilization over the last ${minutes} minutes, now ${util}`
    );
    this._memChart.update(
      times,
      series.memory_used,
      gpu.memory_total ?? 0,
      end,
      window,
      gap,
      `Memory over the last ${minutes} minutes, now ${memText}`
    );
    this._updateHolders(gpu);
  }

  private _updateHolders(gpu: IGpu): void {
    const list = holders(gpu);
    const signature = JSON.stringify(list);
    if (signature === this._signature) {
      return;
    }
    this._signature = signature;
    this._holdersTitle.hidden = false;
    this._holders.hidden = false;
    this._noHolder.remove();
    if (!list.length) {
      for (const row of this._rows.values()) {
        row.node.remove();
      }
      this._rows.clear();
      this._holders.append(this._noHolder);
      return;
    }
    // Rows keyed by kernel, updated in place and moved only when out of order, so a
    // focused Open or Shut down button keeps its focus while memory figures change.
    const keys = new Set(list.map(holderKey));
    for (const [key, row] of this._rows) {
      if (!keys.has(key)) {
        row.node.remove();
        this._rows.delete(key);
      }
    }
    let at = this._holders.firstElementChild;
    for (const holder of list) {
      const key = holderKey(holder);
      let row = this._rows.get(key);
      if (!row) {
        row = new HolderRow(this._panel);
        this._rows.set(key, row);
      }
      if (row.node === at) {
        at = at.nextElementSibling;
      } else {
        this._holders.insertBefore(row.node, at);
      }
      row.update(holder);
    }
  }

  private _badge: HTMLElement;
  private _error: HTMLElement;
  private _figures: HTMLElement;
  private _holders: HTMLElement;
  private _holdersTitle: HTMLElement;
  private _memAxis: HTMLElement;
  private _memChart: Sparkline;
  private _memValue: HTMLElement;
  private _noHolder = h(
    'li',
    { className: 'gpuhub-GpuCard-holder gpuhub-mod-empty' },
    'No process uses this GPU.'
  );
  private _rows = new Map<string, HolderRow>();
  private _signature = '';
  private _title: HTMLElement;
  private _utilAxis: HTMLElement;
  private _utilChart: Sparkline;
  private _utilValue: HTMLElement;
  private _vitals: HTMLElement;
}

/** "No NVIDIA driver…" -> "no NVIDIA driver…", to follow a colon. */
function lowerFirst(text: string): string {
  return text.charAt(0).toLowerCase() + text.slice(1);
}

/**
 * What a person can do about having no GPU here, never what the hub would
 * refuse: with a GPU-hour budget used up (`budgets`, the holdings' answer)
 * the budget card says GPU servers and jobs are refused, and so does this.
 */
export function emptyHint(budgets: IBudget[] = []): string {
  if (!PageConfig.getOption('hubPrefix')) {
    return 'Run JupyterLab on a machine with an NVIDIA GPU and driver, or submit the notebook as a training job.';
  }
  const over = budgets.filter(b => b.state === 'over');
  const refused = over.find(b => b.at_limit !== 'idle_only');
  if (refused) {
    return `GPU servers and jobs are refused until your GPU-hour budget resets (${resetTime(refused)}); until then this server and CPU-only jobs still run.`;
  }
  const restart =
    'To get one, stop this server (File › Hub Control Panel) and start it again with a GPU type selected';
  if (over.length) {
    return `${restart}: with your GPU-hour budget used up, it starts only on a GPU that would otherwise stay idle.`;
  }
  return `${restart}, or submit the notebook as a training job.`;
}

export class GpuPanel extends Widget {
  constructor(options: GpuPanel.IOptions) {
    super();
    this._model = options.model;
    this._commands = options.commands;
    this._kernels = options.kernels;
    this.id = 'gpuhub-gpu-panel';
    this.addClass('gpuhub-SidePanel');
    this.addClass('gpuhub-GpuPanel');
    this.title.icon = gpuIcon;
    this.title.caption = 'GPU usage';
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', 'GPU usage');

    const header = h('header', { className: 'gpuhub-GpuPanel-header' });
    header.append(h('h2', { className: 'gpuhub-SidePanel-title' }, 'GPUs'));
    // Where the figures come from is announced when it changes; the time of the
    // latest sample, which changes with every one, is not.
    this._status = h('p', { className: 'gpuhub-GpuPanel-status' });
    this._statusText = h('span', { 'aria-live': 'polite' });
    this._statusTime = h('span', { className: 'gpuhub-GpuPanel-time' });
    this._status.append(this._statusText, this._statusTime);
    header.append(this._status);
    this._banner = h('p', { className: 'gpuhub-GpuPanel-banner' });
    this._banner.setAttribute('role', 'alert');
    this._idleClock = h('p', { className: 'gpuhub-GpuPanel-idleClock' });
    this._idleClock.setAttribute('aria-live', 'polite');
    this._idleClock.style.display = 'none';
    header.append(this._idleClock);
    this._empty = h('div', { className: 'gpuhub-GpuPanel-empty' });
    this._cardsNode = h('div', { className: 'gpuhub-GpuPanel-cards' });
    this.node.append(
      header,
      this._banner,
      this._empty,
      this._cardsNode,
      this._holdings.node
    );
    this._model.changed.connect(this._onChanged, this);
    ServerGone.instance.changed.connect(this._onChanged, this);
    this._render();
  }

  /** The hub's idle clock of this server ('' hides the line). */
  showIdleClock(text: string, warned: boolean): void {
    this._idleClock.textContent = text;
    this._idleClock.style.display = text ? '' : 'none';
    this._idleClock.classList.toggle('gpuhub-mod-warned', warned);
  }

  async openNotebook(path: string): Promise<void> {
    await this._commands.execute('docmanager:open', { path });
  }

  async shutDownKernel(kernelId: string, name: string): Promise<void> {
    const result = await showDialog({
      title: 'Shut down kernel?',
      body: `Shutting down the kernel of ${name} frees its GPU memory; its variables are lost.`,
      buttons: [
        Dialog.cancelButton(),
        Dialog.warnButton({ label: 'Shut down' })
      ]
    });
    if (!result.button.accept) {
      return;
    }
    try {
      await this._kernels.shutdown(kernelId);
    } catch (error) {
      await showDialog({
        title: 'Could not shut the kernel down',
        body: (error as Error).message,
        buttons: [Dialog.okButton()]
      });
    }
    await this._model.refresh();
  }

  dispose(): void {
    this._holdings.dispose();
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._holdings.setActive(true);
    this._model.wake();
    this._render();
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this._holdings.setActive(false);
    this._model.wake(); // slows down to the status bar's pace, or stops
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    // Restored open at start-up, the panel is shown before it is attached.
    this._holdings.setActive(this.isVisible);
    this._model.wake();
    if (this.isVisible) {
      this._render();
    }
  }

  protected onAfterDetach(msg: Message): void {
    super.onAfterDetach(msg);
    this._holdings.setActive(false);
    this._model.wake();
  }

  private _onChanged(): void {
    if (this.isVisible) {
      this._render();
    }
  }

  private _render(): void {
    const model = this._model;
    const metrics = model.metrics;
    if (ServerGone.instance.gone) {
      this._showStopped();
      return;
    }
    this._banner.hidden = model.error === null;
    if (model.error !== null) {
      this._banner.textContent = `Cannot reach gpuhub's metrics service: ${model.error}. Retrying…`;
    }
    if (metrics === null) {
      this._setStatus(model.error === null ? 'Loading…' : '', '');
      this._showEmpty(null, null);
      return;
    }
    const when = metrics.time ? formatTime(metrics.time * 1000) : '';
    const assigned = metrics.assigned ?? null;
    const simulated = metrics.source === 'simulated';
    const parts: string[] = [];
    if (assigned && metrics.available) {
      parts.push(`${assignedText(assigned)}.`);
    }
    if (metrics.available) {
      parts.push(
        simulated
          ? `Simulated: utilization is the CPU activity of the processes using them, memory their resident memory; sampled every ${metrics.interval} s`
          : `Sampled every ${metrics.interval} s from ${metrics.source.toUpperCase()}`
      );
    }
    this._setStatus(
      parts.join(' '),
      metrics.available && when ? ` · ${when}` : ''
    );
    if (!metrics.available) {
      this._showEmpty(metrics.reason, assigned);
      return;
    }
    this._empty.hidden = true;
    this._cardsNode.hidden = false;
    const seen = new Set(metrics.gpus.map(gpu => gpu.uuid));
    for (const [uuid, card] of this._cards) {
      if (!seen.has(uuid)) {
        card.node.remove();
        this._cards.delete(uuid);
      }
    }
    // The server's order, moving only the cards out of place: moving a node blurs it,
    // so a focused card or button keeps its focus across updates.
    let at = this._cardsNode.firstElementChild;
    for (const gpu of metrics.gpus) {
      let card = this._cards.get(gpu.uuid);
      if (!card) {
        card = new GpuCard(this);
        this._cards.set(gpu.uuid, card);
      }
      if (card.node === at) {
        at = at.nextElementSibling;
      } else {
        this._cardsNode.insertBefore(card.node, at);
      }
      card.update(gpu, model);
    }
  }

  private _setStatus(text: string, time: string): void {
    setText(this._statusText, text);
    setText(this._statusTime, time);
  }

  /**
   * This server was stopped under the user: say so, why (the hub's notice) and
   * offer to start it again; the GPUs and holdings shown before are no longer
   * true, so they go.
   */
  private _showStopped(): void {
    this._banner.hidden = true;
    this._cardsNode.hidden = true;
    this._idleClock.style.display = 'none';
    this._holdings.setActive(false);
    this._holdings.node.hidden = true;
    this._setStatus('', '');
    this._empty.hidden = false;
    if (this._emptyKey === 'stopped') {
      return;
    }
    this._emptyKey = 'stopped';
    const notice = ServerGone.instance.notice;
    const start = h(
      'button',
      {
        type: 'button',
        className: 'jp-mod-styled jp-mod-accept gpuhub-Button'
      },
      'Start it again'
    );
    start.addEventListener('click', () => {
      window.location.href = startAgainUrl();
    });
    const icon = h('div', { className: 'gpuhub-GpuPanel-emptyIcon' });
    gpuIcon.element({ container: icon, width: '48px', height: '48px' });
    this._empty.replaceChildren(
      icon,
      h(
        'h3',
        { className: 'gpuhub-GpuPanel-emptyTitle' },
        notice ? 'This server was stopped' : 'This server is not running'
      ),
      h(
        'p',
        { className: 'gpuhub-GpuPanel-emptyReason gpuhub-GpuPanel-stopped' },
        notice
          ? notice.text
          : 'It stopped, so it holds no GPU now. Your files are safe; start it again to go on working.'
      ),
      start
    );
  }

  /**
   * No figures to chart: either no GPU at all (say why and what to do), or GPUs the
   * hub assigned that cannot be read here (say which; there is nothing to do about it).
   */
  private _showEmpty(reason: string | null, assigned: IAssigned | null): void {
    this._cardsNode.hidden = true;
    this._empty.hidden = false;
    const key = JSON.stringify([reason, assigned]);
    if (key === this._emptyKey && this._empty.childElementCount) {
      return;
    }
    this._emptyKey = key;
    this._empty.replaceChildren();
    if (reason === null && assigned === null) {
      return;
    }
    const icon = h('div', { className: 'gpuhub-GpuPanel-emptyIcon' });
    gpuIcon.element({ container: icon, width: '48px', height: '48px' });
    if (assigned) {
      this._empty.append(
        icon,
        h(
          'h3',
          { className: 'gpuhub-GpuPanel-emptyTitle' },
          assignedText(assigned)
        ),
        h(
          'p',
          { className: 'gpuhub-GpuPanel-emptyReason' },
          `The hub gave this server ${assigned.devices.length === 1 ? 'this GPU' : 'these GPUs'}, but there are no live figures for ${assigned.devices.length === 1 ? 'it' : 'them'}: ${lowerFirst(reason ?? 'They cannot be read here.')}`
        )
      );
      return;
    }
    this._empty.append(
      icon,
      h(
        'h3',
        { className: 'gpuhub-GpuPanel-emptyTitle' },
        'No GPU on this server'
      ),
      h('p', { className: 'gpuhub-GpuPanel-emptyReason' }, reason ?? ''),
      h(
        'p',
        { className: 'gpuhub-GpuPanel-emptyHint' },
        emptyHint(this._budgets)
      )
    );
  }

  /** The holdings' answer came: the hint follows the budgets it carries. */
  private _onHoldings(data: IHoldings): void {
    this._budgets = Array.isArray(data.budgets) ? data.budgets : [];
    const hint = this._empty.querySelector('.gpuhub-GpuPanel-emptyHint');
    if (hint) {
      hint.textContent = emptyHint(this._budgets);
    }
  }

  private _banner: HTMLElement;
  private _idleClock: HTMLElement;
  private _cards = new Map<string, GpuCard>();
  private _cardsNode: HTMLElement;
  private _commands: CommandRegistry;
  private _empty: HTMLElement;
  private _emptyKey = '';
  private _budgets: IBudget[] = [];
  private _holdings = new HoldingsSection(data => this._onHoldings(data));
  private _kernels: Kernel.IManager;
  private _model: GpuMetricsModel;
  private _status: HTMLElement;
  private _statusText: HTMLElement;
  private _statusTime: HTMLElement;
}
