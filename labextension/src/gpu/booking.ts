/**
 * "Your next booking": the card in the GPU sidebar for this user's own next
 * GPU booking (for them or one of their groups), from the lab server's
 * `GET /gpuhub/api/bookings` (gpuhub_lab/bookings.py), with where to book
 * when nothing is booked: the hub's home page and its calendar.
 *
 * Times are the reader's own (`formatTime`); all text goes through
 * `textContent`.
 */
import { h } from '../dom';
import { formatTime } from '../time';

export interface IBooking {
  id: string;
  gpu_type: string;
  gpu_type_name?: string;
  gpus: number;
  /** ISO-8601 instants. */
  start: string;
  end: string;
  for?: { user?: string; group?: string };
  booked_by?: string;
  reason?: string;
}

export interface IBookings {
  available: boolean;
  reason: string | null;
  /** Where to book: the hub's home page; null outside a hub. */
  book_url: string | null;
  /** This user's own and their groups', not yet ended, soonest first. */
  bookings: IBooking[];
}

const MINUTE = 60 * 1000;
const HOUR = 60 * MINUTE;
/** Closer than this, the card counts down ("starts in 2 h"). */
const NEAR = 24 * HOUR;

/** "2 h 10 min", "40 min", "less than a minute": a span as the card says it. */
export function span(ms: number): string {
  const minutes = Math.floor(ms / MINUTE);
  if (minutes < 1) {
    return 'less than a minute';
  }
  const hours = Math.floor(minutes / 60);
  const rest = minutes % 60;
  if (hours === 0) {
    return `${minutes} min`;
  }
  return rest ? `${hours} h ${rest} min` : `${hours} h`;
}

/** "Starts in 2 h", "Started; ends in 40 min", or '' when the start is far. */
export function countdown(booking: IBooking, now: number): string {
  const start = Date.parse(booking.start);
  const end = Date.parse(booking.end);
  if (isNaN(start) || isNaN(end)) {
    return '';
  }
  if (now >= start) {
    return now < end ? `Started; ends in ${span(end - now)}.` : 'Ended.';
  }
  return start - now <= NEAR ? `Starts in ${span(start - now)}.` : '';
}

/** "29 Nov 2026, 14:00 to 16:00" (the end's day too when it differs), local time. */
export function when(booking: IBooking): string {
  const start = formatTime(booking.start);
  const end = formatTime(booking.end);
  if (!start || !end) {
    return '';
  }
  const [startDay] = start.split(', ');
  const [endDay, endClock] = end.split(', ');
  return `${start} to ${endDay === startDay ? endClock : end}`;
}

/** "1 x NVIDIA A100, for you" / "2 x T4, for group staff". */
export function what(booking: IBooking): string {
  const type = booking.gpu_type_name || booking.gpu_type;
  const group = booking.for?.group;
  return `${booking.gpus} x ${type}, ${group ? `for group ${group}` : 'for you'}`;
}

/** Only the hub's own pages (a path on this origin) or http(s) are linked. */
function safeHref(url: string | null): string | null {
  if (!url) {
    return null;
  }
  if (url.startsWith('/') && !url.startsWith('//')) {
    return url;
  }
  try {
    const parsed = new URL(url);
    return parsed.protocol === 'https:' || parsed.protocol === 'http:'
      ? parsed.href
      : null;
  } catch {
    return null;
  }
}

/** The nodes that are there: a card's optional lines left out. */
function present(...nodes: (Node | null)[]): Node[] {
  return nodes.filter((node): node is Node => node !== null);
}

export class BookingCard {
  readonly node: HTMLElement;

  constructor() {
    this.node = h('section', {
      className: 'gpuhub-Booking',
      'aria-label': 'Your next booking'
    });
  }

  /** Draw `data` as of `now` (epoch milliseconds). */
  update(data: IBookings, now: number = Date.now()): void {
    const title = h(
      'h3',
      { className: 'gpuhub-Booking-title' },
      'Your next booking'
    );
    const bookings = Array.isArray(data.bookings) ? data.bookings : [];
    const href = safeHref(data.book_url);
    const link = (text: string) =>
      href
        ? h(
            'a',
            {
              className: 'gpuhub-Booking-link',
              href,
              target: '_blank',
              rel: 'noopener noreferrer'
            },
            text
          )
        : null;
    const next = bookings[0];
    if (!data.available || !next) {
      const said = !data.available
        ? (data.reason ?? 'The hub cannot say what you booked right now.')
        : 'Nothing is booked for you or your groups.';
      this.node.replaceChildren(
        ...present(
          title,
          h('p', { className: 'gpuhub-Booking-empty' }, said),
          data.available && href
            ? h(
                'p',
                { className: 'gpuhub-Booking-empty' },
                'To set GPUs aside for a time, book them in the calendar on ',
                link("the hub's home page"),
                '.'
              )
            : null
        )
      );
      this.node.classList.add('gpuhub-mod-empty');
      return;
    }
    const soon = countdown(next, now);
    const more = bookings.length - 1;
    this.node.replaceChildren(
      ...present(
        title,
        h('p', { className: 'gpuhub-Booking-what' }, what(next)),
        h(
          'p',
          { className: 'gpuhub-Booking-when' },
          h('time', { datetime: next.start }, when(next))
        ),
        soon ? h('p', { className: 'gpuhub-Booking-countdown' }, soon) : null,
        next.reason
          ? h('p', { className: 'gpuhub-Booking-reason' }, next.reason)
          : null,
        href || more > 0
          ? h(
              'p',
              { className: 'gpuhub-Booking-more' },
              more > 0 ? `And ${more} more${href ? ': ' : '.'}` : '',
              link(more > 0 ? 'see the calendar' : 'See the calendar')
            )
          : null
      )
    );
    this.node.classList.remove('gpuhub-mod-empty');
  }
}
