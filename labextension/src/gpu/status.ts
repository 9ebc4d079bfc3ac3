/**
 * The status bar item: one compact GPU figure ("GPU 37% · 12.3/80 GiB"),
 * a click opens the GPU panel.
 *
 * Whether it shows counts for the shared model: when neither it nor the
 * panel shows, the model closes its stream (see `GpuMetricsModel`).
 */
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { setText } from '../dom';
import { ServerGone } from '../hub/stopped';
import { assignedText, gib } from './format';
import { GpuMetricsModel } from './model';

export class GpuStatus extends Widget {
  constructor(
    private _model: GpuMetricsModel,
    private _open: () => void
  ) {
    super({ node: document.createElement('button') });
    this.addClass('gpuhub-GpuStatus');
    this.addClass('jp-StatusBar-TextItem');
    this.node.setAttribute('type', 'button');
    this.node.addEventListener('click', () => this._open());
    _model.changed.connect(this._update, this);
    ServerGone.instance.changed.connect(this._update, this);
    this._update();
  }

  /** Whether it shows figures to anyone now. */
  get showing(): boolean {
    return !this.isDisposed && this.isVisible;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._model.changed.disconnect(this._update, this);
    ServerGone.instance.changed.disconnect(this._update, this);
    super.dispose();
    this._wake();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._update();
    this._wake();
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this._wake();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this._update();
    this._wake();
  }

  protected onAfterDetach(msg: Message): void {
    super.onAfterDetach(msg);
    this._wake();
  }

  private _wake(): void {
    if (!this._model.isDisposed) {
      this._model.wake();
    }
  }

  private _update(): void {
    if (!this.isVisible && this.isAttached) {
      return; // hidden: drawn again when shown
    }
    const metrics = this._model.metrics;
    const node = this.node;
    if (ServerGone.instance.gone) {
      // Its last figures are no longer true: the server, and its GPUs, are gone.
      setText(node, 'Server stopped · no GPU');
      node.title =
        ServerGone.instance.notice?.text ?? 'This server is not running.';
      return;
    }
    if (metrics === null) {
      setText(node, 'GPU …');
      node.title = this._model.error ?? 'Loading GPU metrics';
      return;
    }
    const assigned = metrics.assigned ?? null;
    if (!metrics.available && assigned) {
      // The hub gave us GPUs we cannot read (no driver here): say both, advise nothing.
      const n = assigned.devices.length;
      const what = assigned.share_text
        ? 'GPU share'
        : `${n} ${n === 1 ? 'GPU' : 'GPUs'}`;
      setText(node, `${what} assigned · no live figures`);
      node.title = `${assignedText(assigned)}. No live figures: ${
        metrics.reason ?? 'the GPUs cannot be read here.'
      }`;
      return;
    }
    if (!metrics.available) {
      setText(node, 'No GPU');
      node.title = metrics.reason ?? 'No GPU on this server';
      return;
    }
    const gpus = metrics.gpus.filter(g => !g.error);
    const used = gpus.reduce((s, g) => s + (g.memory_used ?? 0), 0);
    const total = gpus.reduce((s, g) => s + (g.memory_total ?? 0), 0);
    const utils = gpus
      .map(g => g.utilization)
      .filter((u): u is number => u !== null);
    const util = utils.length
      ? `${Math.round(utils.reduce((a, b) => a + b, 0) / utils.length)}% · `
      : '';
    const count = metrics.gpus.length > 1 ? ` ×${metrics.gpus.length}` : '';
    const kind = metrics.source === 'simulated' ? 'Simulated GPU' : 'GPU';
    setText(
      node,
      `${kind}${count} ${util}${gib(used, 1).replace(' GiB', '')}/${gib(total, 0)}`
    );
    const heading = assigned ? [`${assignedText(assigned)}.`] : [];
    const lines = metrics.gpus.map(
      g =>
        `GPU ${g.index} ${g.name}: ${
          g.error
            ? g.error
            : `${g.utilization ?? 'n/a'}% busy, ${gib(g.memory_used)} of ${gib(g.memory_total)}`
        }`
    );
    node.title = heading.concat(lines).join('\n');
  }
}
