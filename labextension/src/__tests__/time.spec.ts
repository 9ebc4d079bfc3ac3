import { formatTime, localText } from '../time';

describe('formatTime', () => {
  it('is empty for nothing, or for something that is not a moment', () => {
    expect(formatTime(null)).toBe('');
    expect(formatTime(undefined)).toBe('');
    expect(formatTime('')).toBe('');
    expect(formatTime('soon')).toBe('');
  });

  it('writes day, month, year and a 24-hour clock, in the local zone', () => {
    expect(formatTime(new Date(2026, 10, 27, 1, 26))).toBe(
      '27 Nov 2026, 01:26'
    );
    expect(formatTime(new Date(2026, 10, 27, 13, 5))).toBe(
      '27 Nov 2026, 13:05'
    );
    // An instant from the server (UTC) is the same instant here, in this zone.
    const instant = '2026-11-27T00:58:00Z';
    const local = new Date(Date.parse(instant));
    expect(formatTime(instant)).toBe(formatTime(local));
    expect(formatTime(local.getTime())).toBe(formatTime(local));
  });
});

describe('localText', () => {
  const at = '27 Nov 2026, 00:58 UTC';
  const when = '2026-11-27T00:58:00+00:00';

  it("puts the reader's time where the hub wrote UTC", () => {
    expect(
      localText({ text: `Your server was stopped on ${at} by root.`, at, when })
    ).toBe(`Your server was stopped on ${formatTime(when)} by root.`);
  });

  it('leaves a sentence without that moment as the hub wrote it', () => {
    expect(localText({ text: 'Stopped by root.', at, when })).toBe(
      'Stopped by root.'
    );
    expect(localText({ text: `On ${at}.`, when })).toBe(`On ${at}.`);
    expect(localText({ text: `On ${at}.`, at, when: 'never' })).toBe(
      `On ${at}.`
    );
  });
});
