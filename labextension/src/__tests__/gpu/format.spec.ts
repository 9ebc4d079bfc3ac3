import { assignedText, basename, gib, percent, unit } from '../../gpu/format';

const GIB = 1024 ** 3;

describe('gib', () => {
  it('writes bytes as GiB with one decimal by default', () => {
    expect(gib(12.34 * GIB)).toBe('12.3 GiB');
    expect(gib(0)).toBe('0.0 GiB');
    expect(gib(512 * 1024 ** 2)).toBe('0.5 GiB');
  });

  it('takes the number of decimals', () => {
    expect(gib(80 * GIB, 0)).toBe('80 GiB');
    expect(gib(1.5 * GIB, 2)).toBe('1.50 GiB');
  });

  it('writes a dash for an unknown amount', () => {
    expect(gib(null)).toBe('–');
    expect(gib(undefined)).toBe('–');
  });
});

describe('percent', () => {
  it('rounds to a whole percent', () => {
    expect(percent(37.4)).toBe('37 %');
    expect(percent(37.5)).toBe('38 %');
    expect(percent(0)).toBe('0 %');
    expect(percent(100)).toBe('100 %');
  });

  it('says n/a when the device has no counter', () => {
    expect(percent(null)).toBe('n/a');
    expect(percent(undefined)).toBe('n/a');
  });
});

describe('unit', () => {
  it('rounds and appends the unit', () => {
    expect(unit(64.6, '°C')).toBe('65 °C');
    expect(unit(0, 'W')).toBe('0 W');
  });

  it('is empty for an unknown value, so the caller can drop it', () => {
    expect(unit(null, 'W')).toBe('');
    expect(unit(undefined, '°C')).toBe('');
  });
});

describe('basename', () => {
  it('keeps the last path segment', () => {
    expect(basename('work/exp/train.ipynb')).toBe('train.ipynb');
    expect(basename('train.ipynb')).toBe('train.ipynb');
  });

  it('keeps the whole path when the last segment is empty', () => {
    expect(basename('work/exp/')).toBe('work/exp/');
  });
});

describe('assignedText', () => {
  it('names one GPU in the singular', () => {
    expect(
      assignedText({ devices: [3], gpu_type: 'Tesla T4', simulated: false })
    ).toBe('GPU 3 (Tesla T4) assigned');
  });

  it('lists several GPUs', () => {
    expect(
      assignedText({
        devices: [0, 1],
        gpu_type: 'NVIDIA RTX A6000',
        simulated: false
      })
    ).toBe('GPUs 0, 1 (NVIDIA RTX A6000) assigned');
  });

  it("uses the hub's words for a share of a GPU", () => {
    expect(
      assignedText({
        devices: [3],
        gpu_type: 'T4',
        simulated: false,
        share: 0.5,
        share_text: '8 GB of GPU 3 (T4)'
      })
    ).toBe('Your share: 8 GB of GPU 3 (T4)');
  });
});
