"""The calendar's bars and lines from items alone (no hub): what each bar counts, how a
line reads for a fleet admin, the item's owner and anyone else, escaped."""

from __future__ import annotations

from gpuhub.hub.web.calendar_draw import bars, line, line_html
from gpuhub.hub.web.calendar_facts import PERIODS, Item, TypeFacts

DAY, WEEK = PERIODS
HOUR = 3600.0
NOW = 1_795_932_000.0 + 600  # 10 minutes into an hour (and into a 6-hour bar)


def test_each_bar_counts_what_overlaps_it_in_use_then_booked_then_free() -> None:
    items = (
        Item("held", "A100", 1, NOW - HOUR, NOW + 1.5 * HOUR, True, "ann"),  # bars 0, 1
        Item("held", "A100", 2, NOW - HOUR, NOW - 60, True, "old"),  # ended: nowhere
        Item("waiting", "A100", 1, NOW + 2.5 * HOUR, NOW + 3.2 * HOUR, False, "bo"),  # 2, 3
        Item("booked", "A100", 3, NOW + 3 * HOUR - 600, NOW + 5 * HOUR, True, "cy"),  # 3 to 5
    )
    day = bars(TypeFacts("A100", 4, items), DAY, NOW)
    assert len(day) == 24 and day[0].start == NOW - 600
    figures = [(b.used, b.booked, b.free) for b in day[:7]]
    assert figures == [(1, 0, 3), (1, 0, 3), (1, 0, 3), (1, 3, 0), (0, 3, 1), (0, 3, 1), (0, 0, 4)]
    assert day[3].text.endswith(": 1 in use, 3 booked, 0 likely free of 4")
    assert day[0].label == "06:00" and day[1].label == "" and day[3].label == "09:00"
    # Over-booked in a bar (a booker's own work on its GPUs): never more than exist.
    crowded = bars(TypeFacts("A100", 2, (*items, items[0])), DAY, NOW)
    assert (crowded[3].used, crowded[3].booked, crowded[3].free) == (1, 1, 0)
    week = bars(TypeFacts("A100", 4, items), WEEK, NOW)
    # Six hours hold the held, the waiting and the booked: booked shows what is left of 4.
    assert len(week) == 28 and (week[0].used, week[0].booked, week[0].free) == (2, 2, 0)
    assert week[0].when == "Sun 29 Nov 06:00 to Sun 12:00 UTC" and week[0].label == "Sun 06:00"


def test_lines_name_whose_only_for_admins_and_the_owner_escaped() -> None:
    hostile = "<img src=x onerror=alert(1)>"
    held = Item("held", "A100", 2, NOW - HOUR, NOW + HOUR, False, hostile, what="server 'x'")
    booked = Item(
        "booked", "A100", 1, NOW, NOW + HOUR, True, "", "class<b>", hostile, booked_by="root"
    )
    admin = line_html(line(held, "", True)) + line_html(line(booked, "", True))
    assert hostile not in admin and "&lt;img src=x onerror=alert(1)&gt;" in admin
    assert "likely until about" in admin and "for group class&lt;b&gt;, by root" in admin
    other = line_html(line(held, "bob", False)) + line_html(line(booked, "bob", False))
    assert "onerror" not in other and "class&lt;b&gt;" not in other and "root" not in other
    assert "<strong>In use</strong>: 2 A100 GPUs" in other and "<strong>Booked</strong>:" in other
    member = line(booked, "dee", False, groups=["class<b>"])
    assert member.own and member.who == "for group class<b>, by root"
