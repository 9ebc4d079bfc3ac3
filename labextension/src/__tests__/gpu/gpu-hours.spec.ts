import { hours, lasts } from '../../gpu/budgets';
import words from './gpu-hours.json';

// The one table the hub's Python (hours_words, lasts_words), the spawn form's script and the
// fleet page's macro are checked against too (tests/hub/web/test_gpu_hours_words.py).
const table = words as unknown as {
  hours: [number, string][];
  lasts: [number, string][];
};

describe('GPU-hours, one precision on every screen', () => {
  it.each(table.hours)('writes %p GPU-hours as %p', (value, text) => {
    expect(hours(value)).toBe(text);
  });

  it.each(table.lasts)('says %p GPU-hours last %p', (value, text) => {
    expect(lasts(value)).toBe(text);
  });
});
