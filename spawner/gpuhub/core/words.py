"""How gpuhub says counts of things, so every message reads the same and none doubles a word.

A GPU type's display name is one name per type ("NVIDIA A100 80GB"); names that already end
in "GPU" ("NVIDIA GPU", "Simulated GPU") are not followed by a second "GPU".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from fractions import Fraction

_ENDS_IN_GPU = re.compile(r"(?:^|\s)GPUs?$", re.IGNORECASE)


def plural(count: int | float, word: str, words: str | None = None) -> str:
    """ "1 core", "2 cores", "0.5 cores" (``words`` for irregular plurals)."""
    shown = f"{count:g}" if isinstance(count, float) else f"{count:,}"
    return f"{shown} {word if count == 1 else (words or word + 's')}"


def gpu_noun(name: str, count: int) -> str:
    """ "NVIDIA A100 80GB GPUs", "NVIDIA GPU", "GPUs": the type's name as a noun for ``count``."""
    name = name.strip()
    suffix = "GPU" if count == 1 else "GPUs"
    if not name:
        return suffix
    if _ENDS_IN_GPU.search(name):
        return re.sub(r"GPUs?$", suffix, name, flags=re.IGNORECASE)
    return f"{name} {suffix}"


def gpus(count: int, name: str = "") -> str:
    """ "2 NVIDIA A100 80GB GPUs", "1 Simulated GPU", "3 GPUs"."""
    shown = f"{count:,}" if isinstance(count, int) else str(count)
    return f"{shown} {gpu_noun(name, count)}"


def device_list(devices: Sequence[int | str], name: str = "") -> str:
    """ "GPUs 0, 1 (RTX A6000)": which GPUs, by index, and of what type."""
    noun = "GPU" if len(devices) == 1 else "GPUs"
    kind = f" ({name})" if name else ""
    return f"{noun} {', '.join(str(d) for d in devices)}{kind}"


def ordinal(n: int) -> str:
    """ "1st", "2nd", "3rd", "11th", "22nd": a place in a line."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def duration(seconds: float) -> str:
    """ "2 hours", "30 minutes", "45 seconds": a setting's length, in its roundest unit."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return plural(int(seconds // 3600), "hour")
    if seconds >= 60 and seconds % 60 == 0:
        return plural(int(seconds // 60), "minute")
    return plural(int(seconds) if float(seconds).is_integer() else seconds, "second")


def amount(value: Fraction | int | float) -> str:
    """A number of GPUs as people read it: "2", "0.5", "0.33" (a share is a fraction)."""
    value = Fraction(value)
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.2f}".rstrip("0").rstrip(".")


def gpu_amount(value: Fraction | int | float, name: str = "") -> str:
    """ "0.5 GPU", "2 NVIDIA A100 GPUs", "1.5 GPUs": an amount of GPUs, shares included."""
    value = Fraction(value)
    return f"{amount(value)} {gpu_noun(name, 1 if value <= 1 else 2)}"


def as_number(value: Fraction | int | float) -> int | float:
    """An amount of GPUs for JSON and metrics: a whole number, or a fraction as a float."""
    value = Fraction(value)
    return value.numerator if value.denominator == 1 else round(float(value), 6)


# One way to write a moment, everywhere gpuhub writes one: "27 Nov 2026, 01:26" (day, the
# month's English abbreviation, year, 24-hour clock), in the reader's time zone where the
# reader's clock is known (hub pages format ``<time datetime>`` in the browser, the lab and
# the magics in their own zone); else in UTC, saying so. Month names are fixed, never the
# machine's locale, so that every surface writes the same words.
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def moment(when: datetime) -> str:
    """ "27 Nov 2026, 01:26": ``when`` in its own time zone, in gpuhub's one pattern."""
    return f"{when.day} {MONTHS[when.month - 1]} {when.year}, {when:%H:%M}"


def moment_utc(epoch: float) -> str:
    """ "27 Nov 2026, 01:26 UTC": an instant for a reader whose clock is not known (the
    fallback text of a hub page's ``<time>``, a log, an API sentence)."""
    return f"{moment(datetime.fromtimestamp(epoch, UTC))} UTC"


def iso(epoch: float) -> str:
    """ "2026-11-27T01:26:05Z": an instant for machines (``<time datetime>``, JSON)."""
    stamp = datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")
    return stamp.replace("+00:00", "Z")


def start_estimate(estimate: object, now: float) -> str | None:
    """ "Likely to start around 14:30 UTC, 4 times in 5 by 15:10 UTC, and no later than
    15:40 UTC.": a waiting holding's ``estimate`` JSON (docs/architecture.md, "When, not only
    where") in the words the spawn page uses, for readers that get only the JSON (the lab,
    ``%jobs``); None when ``estimate`` is not one."""
    if not isinstance(estimate, dict):
        return None
    try:
        likely, by = _epoch(estimate["likely"]), _epoch(estimate["by"])
        latest = None if estimate.get("latest") is None else _epoch(estimate["latest"])
    except (KeyError, TypeError, ValueError):
        return None
    return start_sentence(likely, by, latest, now)


def start_sentence(likely: float, by: float, latest: float | None, now: float) -> str:
    """ "Likely to start around 14:30 UTC, 4 times in 5 by 15:10 UTC, and no later than
    15:40 UTC.": an estimated start in words, wherever it is said (the spawn page, the form,
    the lab, ``%jobs``)."""
    if by <= now + 1:
        return "Likely to start within moments."
    at_latest = f", and no later than {clock(latest, now)}" if latest is not None else ""
    return (
        f"Likely to start around {clock(likely, now)}, 4 times in 5 by {clock(by, now)}{at_latest}."
    )


def _epoch(stamp: object) -> float:
    """Seconds since the epoch of an ISO-8601 instant with its zone ("...Z")."""
    if not isinstance(stamp, str):
        raise TypeError(f"an ISO-8601 instant was expected, {stamp!r} was given")
    when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    if when.tzinfo is None:
        raise ValueError(f"an instant with its time zone was expected, {stamp!r} was given")
    return when.timestamp()


def clock(epoch: float, now: float) -> str:
    """ "14:30 UTC" today, "30 Nov 2026, 09:15 UTC" on another day: the hub's one way to
    write a moment (:func:`moment_utc`), short where the day is today's."""
    when = datetime.fromtimestamp(epoch, UTC)
    if when.date() == datetime.fromtimestamp(now, UTC).date():
        return f"{when:%H:%M} UTC"
    return moment_utc(epoch)
