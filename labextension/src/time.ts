/**
 * One clock, one way: every moment the lab shows (the jobs panel, the GPU
 * sidebar, the stopped-server and notices dialogs) is written "27 Nov 2026, 01:26",
 * in the reader's own time zone. The hub's pages write the same
 * (gpuhub.core.words.moment and page.html), and so do the magics.
 *
 * Month names are fixed, never the browser's locale, so that every surface
 * reads the same words.
 */

const MONTHS = [
  'Jan',
  'Feb',
  'Mar',
  'Apr',
  'May',
  'Jun',
  'Jul',
  'Aug',
  'Sep',
  'Oct',
  'Nov',
  'Dec'
];

function pad(n: number): string {
  return String(n).padStart(2, '0');
}

/**
 * "27 Nov 2026, 01:26" in the reader's time zone, from an ISO string, a Date
 * or epoch milliseconds; '' for nothing or something that is not a moment.
 */
export function formatTime(
  when: string | number | Date | null | undefined
): string {
  if (when === null || when === undefined || when === '') {
    return '';
  }
  const date = when instanceof Date ? when : new Date(when);
  if (isNaN(date.getTime())) {
    return '';
  }
  return (
    `${date.getDate()} ${MONTHS[date.getMonth()]} ${date.getFullYear()}, ` +
    `${pad(date.getHours())}:${pad(date.getMinutes())}`
  );
}

/** A hub sentence that names a moment: its text, its moment for machines, and
 * that moment as the text writes it (UTC, for a reader whose zone it did not know). */
export interface ITimedText {
  text: string;
  when?: string | null;
  at?: string | null;
}

/**
 * The hub's sentence with its moment in the reader's time zone: the hub writes
 * it in UTC ("on 27 Nov 2026, 00:58 UTC", its `at`), with `when` for machines.
 */
export function localText(notice: ITimedText): string {
  const local = formatTime(notice.when);
  if (!notice.at || !local || !notice.text.includes(notice.at)) {
    return notice.text;
  }
  return notice.text.replace(notice.at, local);
}
