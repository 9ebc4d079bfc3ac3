import { Sparkline } from '../../gpu/sparkline';

/** The chart's line and area paths after one update. */
function draw(
  times: number[],
  values: (number | null)[],
  { max = 100, end = 100, window = 100, gap = 60 } = {}
): { line: string; area: string; node: SVGSVGElement } {
  const chart = new Sparkline('gpuhub-Sparkline-util', 'Utilization');
  chart.update(times, values, max, end, window, gap, 'Utilization, now 5 %');
  return {
    line: chart.node
      .querySelector('.gpuhub-Sparkline-line')!
      .getAttribute('d')!,
    area: chart.node
      .querySelector('.gpuhub-Sparkline-area')!
      .getAttribute('d')!,
    node: chart.node
  };
}

describe('Sparkline', () => {
  it('is an image with a label and two paths', () => {
    const chart = new Sparkline('gpuhub-Sparkline-memory', 'Memory');
    expect(chart.node.getAttribute('class')).toBe(
      'gpuhub-Sparkline gpuhub-Sparkline-memory'
    );
    expect(chart.node.getAttribute('role')).toBe('img');
    expect(chart.node.getAttribute('aria-label')).toBe('Memory');
    expect(chart.node.getAttribute('viewBox')).toBe('0 0 200 36');
  });

  it('draws values against time, scaled to max (36 px high, 1 px margins)', () => {
    const { line, area, node } = draw([0, 50, 100], [0, 50, 100]);
    expect(line).toBe('M0.0,35.0L100.0,18.0L200.0,1.0');
    expect(area).toBe('M0.0,36L0.0,35.0L100.0,18.0L200.0,1.0L200.0,36Z');
    expect(node.getAttribute('aria-label')).toBe('Utilization, now 5 %');
  });

  it('places samples by their time, not their index', () => {
    const { line } = draw([75, 100], [100, 100]);
    expect(line).toBe('M150.0,1.0L200.0,1.0');
  });

  it('clamps values to the chart and draws at the bottom when max is 0', () => {
    expect(draw([0, 100], [250, -10], { gap: 100 }).line).toBe(
      'M0.0,1.0L200.0,35.0'
    );
    expect(draw([0, 100], [5, 5], { max: 0, gap: 100 }).line).toBe(
      'M0.0,35.0L200.0,35.0'
    );
  });

  it('breaks the line where the sampler slept longer than the gap', () => {
    const { line, area } = draw([0, 10, 90, 100], [0, 0, 100, 100], {
      gap: 20
    });
    expect(line).toBe('M0.0,35.0L20.0,35.0M180.0,1.0L200.0,1.0');
    expect(area).toBe(
      'M0.0,36L0.0,35.0L20.0,35.0L20.0,36Z' +
        'M180.0,36L180.0,1.0L200.0,1.0L200.0,36Z'
    );
  });

  it('breaks the line at a missing value', () => {
    const { line } = draw([0, 50, 100], [0, null, 100]);
    expect(line).toBe('M0.0,35.0M200.0,1.0');
  });

  it('leaves out samples older than the window', () => {
    const { line } = draw([-50, 0, 100], [100, 0, 0], { gap: 100 });
    expect(line).toBe('M0.0,35.0L200.0,35.0');
  });

  it('draws nothing without samples', () => {
    const { line, area } = draw([], []);
    expect(line).toBe('');
    expect(area).toBe('');
  });
});

describe('Sparkline at 10 samples a second', () => {
  it('keeps one point per half unit of width, the highest, whatever the rate', () => {
    // 3,000 samples over 300 s, all 10 but one peak of 90.
    const times = Array.from({ length: 3000 }, (_, i) => 1000 + i / 10);
    const values = times.map((_, i) => (i === 1500 ? 90 : 10));
    const chart = new Sparkline('gpuhub-Sparkline-util', 'Utilization');
    chart.update(times, values, 100, 1299.9, 300, 1, 'Utilization');
    const line = chart.node
      .querySelector('.gpuhub-Sparkline-line')!
      .getAttribute('d')!;
    const points = line.split(/[ML]/).filter(Boolean);
    expect(points.length).toBeLessThanOrEqual(401);
    expect(points.length).toBeGreaterThan(390);
    expect(line.startsWith('M')).toBe(true);
    expect(line.slice(1)).not.toContain('M'); // one unbroken run
    // The peak survives the thinning, where its time is (150 s of 300: x 100 of 200).
    const peaks = points.filter(p => p.endsWith(',4.4'));
    expect(peaks).toHaveLength(1);
    expect(Math.abs(Number(peaks[0].split(',')[0]) - 100)).toBeLessThan(0.5);
  });
});
