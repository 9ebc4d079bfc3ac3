import {
  BookingCard,
  IBooking,
  IBookings,
  countdown,
  span,
  what,
  when
} from '../../gpu/booking';
import { formatTime } from '../../time';

const NOW = Date.UTC(2026, 10, 29, 12, 0);
const HOUR = 3600 * 1000;

function iso(ms: number): string {
  return new Date(ms).toISOString();
}

function booking(over: Partial<IBooking> = {}): IBooking {
  return {
    id: 'b1',
    gpu_type: 'a100',
    gpu_type_name: 'NVIDIA A100',
    gpus: 2,
    start: iso(NOW + 2 * HOUR),
    end: iso(NOW + 4 * HOUR),
    for: { user: 'ann' },
    booked_by: 'ann',
    reason: 'paper deadline',
    ...over
  };
}

function answer(over: Partial<IBookings> = {}): IBookings {
  return {
    available: true,
    reason: null,
    book_url: '/hub/home',
    bookings: [],
    ...over
  };
}

describe('the words of a booking', () => {
  it('says spans as people do', () => {
    expect(span(20 * 1000)).toBe('less than a minute');
    expect(span(40 * 60 * 1000)).toBe('40 min');
    expect(span(2 * HOUR)).toBe('2 h');
    expect(span(2 * HOUR + 10 * 60 * 1000)).toBe('2 h 10 min');
  });

  it('counts down only when near, and says when one is running', () => {
    expect(countdown(booking(), NOW)).toBe('Starts in 2 h.');
    expect(countdown(booking({ start: iso(NOW + 30 * HOUR) }), NOW)).toBe('');
    expect(countdown(booking({ start: iso(NOW - HOUR) }), NOW)).toBe(
      'Started; ends in 4 h.'
    );
    expect(countdown(booking({ start: 'soon' }), NOW)).toBe('');
  });

  it('says what and for whom', () => {
    expect(what(booking())).toBe('2 x NVIDIA A100, for you');
    expect(what(booking({ for: { group: 'staff' }, gpu_type_name: '' }))).toBe(
      '2 x a100, for group staff'
    );
  });

  it("says when in the reader's time, the end's day only when it differs", () => {
    const start = formatTime(NOW + 2 * HOUR);
    const endClock = formatTime(NOW + 4 * HOUR).split(', ')[1];
    expect(when(booking())).toBe(`${start} to ${endClock}`);
    const far = booking({ end: iso(NOW + 50 * HOUR) });
    expect(when(far)).toBe(`${start} to ${formatTime(NOW + 50 * HOUR)}`);
  });
});

describe('BookingCard', () => {
  const text = (card: BookingCard, selector: string) =>
    Array.from(card.node.querySelectorAll(selector)).map(n => n.textContent);

  it('shows the next booking: what, when, for whom, how soon, why', () => {
    const card = new BookingCard();
    card.update(
      answer({
        bookings: [booking(), booking({ id: 'b2', for: { group: 'staff' } })]
      }),
      NOW
    );
    expect(card.node.classList.contains('gpuhub-mod-empty')).toBe(false);
    expect(text(card, '.gpuhub-Booking-what')).toEqual([
      '2 x NVIDIA A100, for you'
    ]);
    expect(card.node.querySelector('time')!.getAttribute('datetime')).toBe(
      iso(NOW + 2 * HOUR)
    );
    expect(text(card, '.gpuhub-Booking-countdown')).toEqual(['Starts in 2 h.']);
    expect(text(card, '.gpuhub-Booking-reason')).toEqual(['paper deadline']);
    expect(text(card, '.gpuhub-Booking-more')).toEqual([
      'And 1 more: see the calendar'
    ]);
    const link = card.node.querySelector('a')!;
    expect(link.getAttribute('href')).toBe('/hub/home');
    expect(link.getAttribute('rel')).toBe('noopener noreferrer');
  });

  it('explains an empty state and where to book', () => {
    const card = new BookingCard();
    card.update(answer(), NOW);
    expect(card.node.classList.contains('gpuhub-mod-empty')).toBe(true);
    expect(card.node.textContent).toContain(
      'Nothing is booked for you or your groups.'
    );
    expect(card.node.textContent).toContain(
      "book them in the calendar on the hub's home page."
    );
    expect(card.node.querySelector('a')!.getAttribute('href')).toBe(
      '/hub/home'
    );
  });

  it("says the server's reason when it cannot ask, and links nothing unsafe", () => {
    const card = new BookingCard();
    card.update(
      answer({
        available: false,
        reason: 'This hub takes no GPU bookings.',
        book_url: null
      }),
      NOW
    );
    expect(card.node.textContent).toBe(
      'Your next bookingThis hub takes no GPU bookings.'
    );
    card.update(
      answer({ bookings: [booking()], book_url: 'javascript:alert(1)' }),
      NOW
    );
    expect(card.node.querySelector('a')).toBeNull();
  });

  it('escapes every name and reason', () => {
    const card = new BookingCard();
    card.update(
      answer({
        bookings: [
          booking({
            for: { group: '<img src=x onerror=alert(1)>' },
            reason: '<b>deadline</b>'
          })
        ]
      }),
      NOW
    );
    expect(card.node.querySelector('img, b')).toBeNull();
    expect(text(card, '.gpuhub-Booking-reason')).toEqual(['<b>deadline</b>']);
  });
});
