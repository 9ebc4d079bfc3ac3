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
    let line = '';
    let area = '';
    let runStart = -1;
    let prevT = -Infinity;
    let prevX = 0;
    const closeRun = () => {
      if (runStart >= 0) {
        area += `L${prevX.toFixed(1)},${HEIGHT}Z`;
      }
      runStart = -1;
    };
    for (let i = 0; i < times.length; i++) {
      const t = times[i];
      const v = values[i];
      if (t < start || v === null || v === undefined) {
        closeRun();
        continue;
      }
      const px = x(t);
      const py = y(v).toFixed(1);
      if (runStart < 0 || t - prevT > gap) {
        closeRun();
        runStart = i;
        line += `M${px.toFixed(1)},${py}`;
        area += `M${px.toFixed(1)},${HEIGHT}L${px.toFixed(1)},${py}`;
      } else {
        line += `L${px.toFixed(1)},${py}`;
        area += `L${px.toFixed(1)},${py}`;
      }
      prevT = t;
      prevX = px;
    }
    closeRun();
    this._line.setAttribute('d', line);
    this._area.setAttribute('d', area);
  }

  private _area: SVGPathElement;
  private _line: SVGPathElement;
}
