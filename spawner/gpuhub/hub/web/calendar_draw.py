"""What the calendar draws (:mod:`gpuhub.hub.web.calendar`): a GPU type's strip of bars and
each item's line as a viewer reads it, every value escaped."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from markupsafe import escape

from gpuhub.core import words
from gpuhub.hub.web.calendar_facts import STOP_WORDS, Item, Period, TypeFacts


@dataclass(frozen=True)
class Bar:
    """One bar of a type's strip: GPUs in use, booked and likely free from ``start``."""

    start: float
    end: float
    used: float
    booked: float
    free: float
    total: float
    label: str  # the axis label under it ("" for most)
    when: str  # "Sun 14:00 to 15:00 UTC"
    text: str  # the bar in words, for screen readers and the tooltip

    def figure(self, part: float) -> str:
        """ "2", "0.5": GPUs as the fleet page writes them."""
        return _gpus(part)

    def percent(self, part: float) -> float:
        return round(100.0 * part / self.total, 2) if self.total > 0 else 0.0

    @property
    def start_iso(self) -> str:
        return words.iso(self.start)

    @property
    def end_iso(self) -> str:
        return words.iso(self.end)


def bars(facts: TypeFacts, period: Period, now: float) -> list[Bar]:
    """The strip of one type: each bar counts what overlaps it (a holding that ends within
    the bar still uses its GPUs in it), in use first, then booked, the rest likely free."""
    first = math.floor(now / period.seconds) * period.seconds
    # Each item adds its GPUs to the bars it overlaps: a difference array, one pass over the
    # items and one over the bars (thousands of holdings cost milliseconds).
    used_at = [0.0] * (period.slots + 1)
    booked_at = [0.0] * (period.slots + 1)
    for item in facts.items:
        begin = max(item.start, now)
        if item.end <= begin:
            continue
        low = max(int((begin - first) // period.seconds), 0)
        high = min(math.ceil((item.end - first) / period.seconds), period.slots)
        if low >= high:
            continue
        diff = booked_at if item.kind == "booked" else used_at
        diff[low] += item.gpus
        diff[high] -= item.gpus
    out = []
    used = booked = 0.0
    for n in range(period.slots):
        start, end = first + n * period.seconds, first + (n + 1) * period.seconds
        used = round(used + used_at[n], 6)
        booked = round(booked + booked_at[n], 6)
        total = facts.total
        shown_used = min(max(used, 0.0), total)
        shown_booked = min(max(booked, 0.0), total - shown_used)
        free = max(total - shown_used - shown_booked, 0.0)
        label = _axis(start, period) if n % period.label_every == 0 else ""
        when = _span(start, end, period)
        text = (
            f"{facts.name}, {when}: {_gpus(shown_used)} in use, {_gpus(shown_booked)} booked, "
            f"{_gpus(free)} likely free of {_gpus(total)}"
        )
        out.append(Bar(start, end, shown_used, shown_booked, free, total, label, when, text))
    return out


def _gpus(value: float) -> str:
    """ "2", "0.5": GPUs as the fleet page writes them."""
    return words.amount(value)


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def _axis(start: float, period: Period) -> str:
    when = _utc(start)
    return f"{when:%H:%M}" if period.key == "day" else f"{when:%a %H:%M}"


def _span(start: float, end: float, period: Period) -> str:
    a, b = _utc(start), _utc(end)
    if period.key == "day":
        return f"{a:%a} {a:%H:%M} to {b:%H:%M} UTC"
    return f"{a:%a %d %b} {a:%H:%M} to {b:%a} {b:%H:%M} UTC"


@dataclass(frozen=True)
class Line:
    """One item as a viewer reads it: who (empty when not theirs to know) and what."""

    kind: str
    who: str
    what: str
    gpus: str
    start_iso: str
    start_text: str
    end_iso: str
    end_text: str
    end_words: str  # "until", "likely until about", "to"
    why: str
    own: bool


def line(item: Item, viewer: str, names: bool, groups: Iterable[str] = ()) -> Line:
    """``item`` for ``viewer``: with names for fleet admins and for what is the viewer's own
    (theirs, booked by them, or for a group of theirs), "in use"/"booked" otherwise."""
    own = viewer != "" and (
        item.user == viewer or item.booked_by == viewer or (item.group in set(groups))
    )
    shown = names or own
    if item.kind == "booked":
        whose = f"group {item.group}" if item.group else item.user
        who = (
            (f"for {whose}" + (f", by {item.booked_by}" if item.booked_by else "")) if shown else ""
        )
        what = item.what if shown else ""
        end_words = "to"
    else:
        who = item.user if shown else ""
        what = item.what if shown else ""
        end_words = "until" if item.end_known else "likely until about"
    return Line(
        item.kind,
        who,
        what,
        words.gpus(int(item.gpus), item.gpu_type)
        if float(item.gpus).is_integer()
        else f"{words.amount(item.gpus)} of a {item.gpu_type}",
        words.iso(item.start),
        words.moment_utc(item.start),
        words.iso(item.end),
        words.moment_utc(item.end),
        end_words,
        STOP_WORDS.get(item.why, "") if shown else "",
        own,
    )


def _time(iso: str, text: str) -> str:
    return f'<time class="gpuhub-time" datetime="{escape(iso)}">{escape(text)}</time>'


def line_html(line: Line) -> str:
    """One line as the calendar's list shows it, every value escaped (``escape``). Written
    here, not in a template: a fleet admin's list may have thousands, a string each."""
    start, end = _time(line.start_iso, line.start_text), _time(line.end_iso, line.end_text)
    what = escape(line.what)
    if line.kind == "booked":
        who = f" {escape(line.who)}" if line.who else ""
        body = f"<strong>Booked</strong>{who}: {escape(line.gpus)} from {start} to {end}" + (
            f" ({what})" if what else ""
        )
    else:
        head = f"<strong>{escape(line.who or ('Waiting' if line.kind == 'waiting' else 'In use'))}</strong>"
        head += f", {what}" if what else ""
        if line.kind == "waiting":
            body = (
                f"{head}: {escape(line.gpus)}, waiting; likely from {start} "
                f"{escape(line.end_words)} {end}"
            )
        else:
            body = (
                f"{head}: {escape(line.gpus)}, held since {start}, {escape(line.end_words)} {end}"
            )
            body += f" ({escape(line.why)})" if line.why else ""
    own = " gpuhub-cal-own" if line.own else ""
    kind = escape(line.kind)
    return f'<li class="gpuhub-cal-line gpuhub-cal-{kind}-line{own}" tabindex="0">{body}</li>\n'
