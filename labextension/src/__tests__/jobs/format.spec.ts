import {
  STATUS_LABELS,
  elapsedSeconds,
  formatDuration,
  formatTime,
  kindLabel,
  ordinal,
  parameterSummary,
  plural,
  statusText
} from '../../jobs/format';
import { IKindOption, JobStatus } from '../../jobs/types';
import { kind } from './fixtures';

const KINDS: IKindOption[] = [
  kind({ kind: 'job', label: 'training job' }),
  kind({ kind: 'pytorchjob', label: 'PyTorchJob', distributed: true }),
  kind({ kind: 'tfjob', label: '', available: false, reason: 'No operator.' })
];

describe('kindLabel', () => {
  it("capitalises the server's label", () => {
    expect(kindLabel('job', KINDS)).toBe('Training job');
    expect(kindLabel('pytorchjob', KINDS)).toBe('PyTorchJob');
  });

  it('falls back on the kind itself', () => {
    expect(kindLabel('tfjob', KINDS)).toBe('Tfjob'); // empty label
    expect(kindLabel('pipeline', KINDS)).toBe('Pipeline'); // not listed
    expect(kindLabel('trainjob', null)).toBe('Trainjob');
    expect(kindLabel('job', undefined)).toBe('Job');
  });
});

describe('ordinal', () => {
  it.each([
    [1, '1st'],
    [2, '2nd'],
    [3, '3rd'],
    [4, '4th'],
    [10, '10th'],
    [11, '11th'],
    [12, '12th'],
    [13, '13th'],
    [21, '21st'],
    [22, '22nd'],
    [23, '23rd'],
    [101, '101st'],
    [111, '111th'],
    [112, '112th'],
    [113, '113th'],
    [1002, '1002nd']
  ])('%i is %s', (n, text) => {
    expect(ordinal(n)).toBe(text);
  });
});

describe('statusText', () => {
  it('names every status', () => {
    const statuses: JobStatus[] = [
      'queued',
      'pending',
      'running',
      'succeeded',
      'failed',
      'cancelled'
    ];
    for (const status of statuses) {
      expect(statusText({ status })).toBe(STATUS_LABELS[status]);
    }
    expect(statusText({ status: 'running' })).toBe('Running');
  });

  it('gives a queued job its place in line', () => {
    expect(statusText({ status: 'queued', queue_position: 1 })).toBe(
      'Queued, 1st in line'
    );
    expect(statusText({ status: 'queued', queue_position: 12 })).toBe(
      'Queued, 12th in line'
    );
  });

  it('says only "Queued" when the place is unknown or nonsense', () => {
    for (const queue_position of [null, undefined, 0, -2, 1.5, NaN]) {
      expect(statusText({ status: 'queued', queue_position })).toBe('Queued');
    }
    expect(statusText({ status: 'queued', queue_position: '3' as any })).toBe(
      'Queued'
    );
  });

  it('ignores a place in line once the job left the queue', () => {
    expect(statusText({ status: 'running', queue_position: 2 })).toBe(
      'Running'
    );
  });

  it('shows a status it does not know as the server sent it', () => {
    expect(statusText({ status: 'evicted' as JobStatus })).toBe('evicted');
  });
});

describe('formatDuration', () => {
  it.each([
    [0, '0 s'],
    [42.9, '42 s'],
    [59, '59 s'],
    [60, '1 min 00 s'],
    [187, '3 min 07 s'],
    [3599, '59 min 59 s'],
    [3600, '1 h 00 min'],
    [7500, '2 h 05 min'],
    [100 * 3600, '100 h 00 min'],
    [-5, '0 s']
  ])('%d s is "%s"', (seconds, text) => {
    expect(formatDuration(seconds)).toBe(text);
  });

  it('is empty for an unknown or infinite duration', () => {
    expect(formatDuration(null)).toBe('');
    expect(formatDuration(Infinity)).toBe('');
    expect(formatDuration(NaN)).toBe('');
  });
});

describe('elapsedSeconds', () => {
  const start = '2025-03-01T10:00:00Z';

  it('is null before the job started', () => {
    expect(elapsedSeconds(null, null)).toBeNull();
  });

  it('measures a finished run from start to end', () => {
    expect(elapsedSeconds(start, '2025-03-01T10:02:30Z')).toBe(150);
  });

  it('measures a running job up to now', () => {
    const now = Date.parse(start) + 42_500;
    expect(elapsedSeconds(start, null, now)).toBe(42.5);
  });

  it('never goes negative (clock skew) and rejects bad dates', () => {
    expect(elapsedSeconds(start, '2025-03-01T09:59:00Z')).toBe(0);
    expect(elapsedSeconds('yesterday', null)).toBeNull();
    expect(elapsedSeconds(start, 'soon')).toBeNull();
  });
});

describe('parameterSummary', () => {
  it('lists parameters as name = value', () => {
    expect(parameterSummary({ epochs: 3, lr: 0.1 })).toBe(
      'epochs = 3, lr = 0.1'
    );
  });

  it('shows strings bare and anything else as JSON', () => {
    expect(
      parameterSummary(
        { name: 'resnet', flag: true, none: null, xs: [1, 2] },
        4
      )
    ).toBe('name = resnet, flag = true, none = null, xs = [1,2]');
  });

  it('counts what it leaves out', () => {
    expect(parameterSummary({ a: 1, b: 2, c: 3, d: 4, e: 5 })).toBe(
      'a = 1, b = 2, c = 3, +2 more'
    );
    expect(parameterSummary({ a: 1, b: 2 }, 1)).toBe('a = 1, +1 more');
  });

  it('cuts long values to the width', () => {
    expect(parameterSummary({ path: 'data/imagenet/train' })).toBe(
      'path = data/imagenet…'
    );
    expect(parameterSummary({ path: 'abcdefghijklmn' })).toBe(
      'path = abcdefghijklmn'
    ); // exactly 14: kept
    expect(parameterSummary({ s: 'abcdef' }, 3, 4)).toBe('s = abc…');
  });

  it('is empty without parameters', () => {
    expect(parameterSummary({})).toBe('');
    expect(parameterSummary(null)).toBe('');
    expect(parameterSummary(undefined)).toBe('');
  });
});

describe('plural', () => {
  it('adds an s to anything but one', () => {
    expect(plural(1, 'core')).toBe('1 core');
    expect(plural(2, 'core')).toBe('2 cores');
    expect(plural(0, 'core')).toBe('0 cores');
    expect(plural(0.5, 'core')).toBe('0.5 cores');
  });
});

describe('formatTime', () => {
  it('is empty for no time or a bad one', () => {
    expect(formatTime(null)).toBe('');
    expect(formatTime('')).toBe('');
    expect(formatTime('not a date')).toBe('');
  });

  it('writes the one pattern, in the local time zone', () => {
    // A local time, so the text does not depend on the machine's time zone.
    expect(formatTime('2024-11-21T14:03:00')).toBe('21 Nov 2024, 14:03');
    expect(formatTime(new Date(2026, 0, 5, 9, 7))).toBe('5 Jan 2026, 09:07');
    expect(formatTime(new Date(2026, 10, 27, 1, 26).getTime())).toBe(
      '27 Nov 2026, 01:26'
    );
  });
});
