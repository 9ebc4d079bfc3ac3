/**
 * A tiny SVG time-series chart: no chart library, a few hundred bytes.
 *
 * Values are drawn against time (so a sampler that slept leaves a gap,
 * instead of squeezing the line), scaled to `max`.
 */
const SVG_NS = 'http://www.w3.org/2000/svg';
const WIDTH = 200;
const HEIGHT = 36;

export class Sparkline {
  constructor(className: string, label: string) {
    this.node = document.createElementNS(SVG_NS, 'svg');
    this.node.setAttribute('class', `gpuhub-Sparkline ${className}`);
    this.node.setAttribute('viewBox', `0 0 ${WIDTH} ${HEIGHT}`);
    this.node.setAttribute('preserveAspectRatio', 'none');
    this.node.setAttribute('role', 'img');
    this.node.setAttribute('aria-label', label);
    this._area = document.createElementNS(SVG_NS, 'path');
    this._area.setAttribute('class', 'gpuhub-Sparkline-area');
    this._line = document.createElementNS(SVG_NS, 'path');
    this._line.setAttribute('class', 'gpuhub-Sparkline-line');
    this._line.setAttribute('vector-effect', 'non-scaling-stroke');
    this.node.append(this._area, this._line);
  }

  readonly node: SVGSVGElement;

  /**
   * Draw `values` at `times` (epoch s) over [end - window, end].
   *
   * @param gap - a time step larger than this (s) breaks the line.
   */
  update(
    times: number[],
    values: (number | null)[],
    max: number,
    end: number,
    window: number,
    gap: number,
    label: string
  ): void {
    this.node.setAttribute('aria-label', label);
    const start = end - window;
    const x = (t: number) => ((t - start) / window) * WIDTH;
    const y = (v: number) =>
      HEIGHT -
      Math.max(0, Math.min(1, max > 0 ? v / max : 0)) * (HEIGHT - 2) -
      1;
    // At 10 samples a second a 5-minute window holds 3,000 points for 200 units of
    // width: one point per half unit (the highest there, so no peak is lost) keeps the
    // path a few hundred points long, whatever the rate.
    const parts: string[] = [];
    const areaParts: string[] = [];
    let runStart = true; // the next point starts a run
    let prevT = -Infinity;
    let column = NaN;
    let colX = 0;
    let colV = 0;
    let runX = 0; // x of the last point flushed in this run
    let inRun = false;
    const flush = () => {
      if (Number.isNaN(column)) {
        return;
      }
      const px = colX.toFixed(1);
      const py = y(colV).toFixed(1);
      if (runStart) {
        parts.push(`M${px},${py}`);
        areaParts.push(`M${px},${HEIGHT}L${px},${py}`);
        runStart = false;
        inRun = true;
      } else {
        parts.push(`L${px},${py}`);
        areaParts.push(`L${px},${py}`);
      }
      runX = colX;
      column = NaN;
    };
    const closeRun = () => {
      flush();
      if (inRun) {
        areaParts.push(`L${runX.toFixed(1)},${HEIGHT}Z`);
      }
      inRun = false;
      runStart = true;
    };
    for (let i = 0; i < times.length; i++) {
      const t = times[i];
      const v = values[i];
      if (t < start || v === null || v === undefined) {
        closeRun();
        continue;
      }
      if (t - prevT > gap) {
        closeRun();
      }
      prevT = t;
      const px = x(t);
      const col = Math.round(px * 2);
      if (col === column) {
        colV = Math.max(colV, v);
        continue;
      }
      flush();
      column = col;
      colX = px;
      colV = v;
    }
    closeRun();
    const line = parts.join('');
    const area = areaParts.join('');
    this._line.setAttribute('d', line);
    this._area.setAttribute('d', area);
  }

  private _area: SVGPathElement;
  private _line: SVGPathElement;
}
