"""How long holds of GPUs last, learned per user, group and GPU type (issue 38): the
distributions :mod:`gpuhub.hub.monitor.eta` samples hold ends from, *conditioned on how long
a hold has lasted* (a hold 3 hours old is not a fresh one). Pure: the monitor's feed
(:mod:`gpuhub.hub.monitor.eta_feed`) teaches them what ended and keeps them in a state file.
docs/architecture.md, "When, not only where"."""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# Hold durations are counted in log-spaced bins: [0, 60 s), then each bin 25 % longer than
# the last, up to about a month; the last bin is open (read as up to 4x its start).
FIRST = 60.0
RATIO = 1.25
BINS = 48
EDGES: tuple[float, ...] = (
    0.0,
    *(FIRST * RATIO**k for k in range(BINS + 1)),
    FIRST * RATIO**BINS * 4,
)
NBINS = len(EDGES) - 1

# What is assumed before anything is learned: log-normal, median 2 hours (an interactive
# session's afternoon), wide (sigma 1.2: a quarter of holds under 50 min, a tenth over 9 h).
PRIOR_MEDIAN = 7200.0
PRIOR_SIGMA = 1.2
PSEUDO = 4.0  # how many holds a level's parent counts as, where the level has learned few
MAX_COUNT = 400.0  # a level's counts are scaled down past this: recent holds weigh more


def _prior() -> list[float]:
    """The prior's mass in each bin (log-normal CDF differences), summing to 1."""

    def cdf(x: float) -> float:
        if x <= 0:
            return 0.0
        if math.isinf(x):
            return 1.0
        return 0.5 * math.erfc(-(math.log(x / PRIOR_MEDIAN)) / (PRIOR_SIGMA * math.sqrt(2)))

    mass = [cdf(EDGES[i + 1]) - cdf(EDGES[i]) for i in range(NBINS)]
    mass[-1] += 1.0 - cdf(EDGES[-1])
    total = sum(mass)
    return [m / total for m in mass]


PRIOR = _prior()


def bin_of(seconds: float) -> int:
    """The bin a duration falls in."""
    return min(max(bisect.bisect_right(EDGES, seconds) - 1, 0), NBINS - 1)


@dataclass(frozen=True)
class Curve:
    """One distribution of hold durations (cumulative mass at each bin edge), and how many
    holds taught it (``learned``; 0: the prior alone)."""

    cdf: tuple[float, ...]
    learned: float = 0.0

    @classmethod
    def of(cls, mass: Sequence[float], learned: float = 0.0) -> Curve:
        total = sum(mass) or 1.0
        acc, out = 0.0, [0.0]
        for m in mass:
            acc += m / total
            out.append(min(acc, 1.0))
        out[-1] = 1.0
        return cls(tuple(out), learned)

    def at(self, seconds: float) -> float:
        """P(a hold lasts at most ``seconds``), log-linear within a bin."""
        if seconds >= EDGES[-1]:
            return 1.0
        k = bin_of(seconds)
        lo, hi = EDGES[k], EDGES[k + 1]
        frac = seconds / hi if k == 0 else math.log(max(seconds, lo) / lo) / math.log(hi / lo)
        return self.cdf[k] + (self.cdf[k + 1] - self.cdf[k]) * frac

    def quantile(self, p: float) -> float:
        """The duration below which a fraction ``p`` of holds end."""
        p = min(max(p, 0.0), 1.0)
        k = min(max(bisect.bisect_right(self.cdf, p) - 1, 0), NBINS - 1)
        while k < NBINS - 1 and self.cdf[k + 1] <= self.cdf[k]:
            k += 1
        low, high = self.cdf[k], self.cdf[k + 1]
        frac = 0.0 if high <= low else min(max((p - low) / (high - low), 0.0), 1.0)
        lo, hi = EDGES[k], EDGES[k + 1]
        return hi * frac if k == 0 else lo * (hi / lo) ** frac

    def left(self, age: float, u: float) -> float:
        """Seconds still to go of a hold ``age`` seconds old, at quantile ``u`` of what is
        left given that it lasted so far (survival: P(D <= age + t | D > age))."""
        base = self.at(age)
        if base >= 1.0 - 1e-12:  # older than anything seen: as long again, give or take
            return age * (0.25 + 1.5 * u)
        return max(self.quantile(base + u * (1.0 - base)) - age, 0.0)

    def median_left(self, age: float) -> float:
        return self.left(age, 0.5)

    def above(self, age: float) -> list[float]:
        """Each bin's share of the holds that last longer than ``age`` (sums to 1)."""
        base = self.at(age)
        out = [0.0] * NBINS
        if base >= 1.0 - 1e-12:
            out[-1] = 1.0
            return out
        k = bin_of(age)
        out[k] = (self.cdf[k + 1] - base) / (1.0 - base)
        for j in range(k + 1, NBINS):
            out[j] = (self.cdf[j + 1] - self.cdf[j]) / (1.0 - base)
        return out

    @functools.cached_property
    def table(self) -> tuple[float, ...]:
        """:data:`TABLE` quantiles, for drawing many durations fast (:meth:`sampler`)."""
        out, k, cdf = [], 0, self.cdf
        for j in range(TABLE):  # one walk up the bins: the quantiles come in order
            p = (j + 0.5) / TABLE
            while k < NBINS - 1 and cdf[k + 1] <= p:
                k += 1
            low, high = cdf[k], cdf[k + 1]
            frac = 0.0 if high <= low else min(max((p - low) / (high - low), 0.0), 1.0)
            lo, hi = EDGES[k], EDGES[k + 1]
            out.append(hi * frac if k == 0 else lo * (hi / lo) ** frac)
        return tuple(out)

    def sampler(self, age: float) -> tuple[tuple[float, ...], float, float]:
        """What the replay needs to draw what is left of a hold ``age`` seconds old: the
        table, where the hold's survival starts in it, and the age."""
        return self.table, min(self.at(age), 1.0), age


TABLE = 128


@dataclass
class Durations:
    """How long holds lasted, learned per GPU type, per group and type and per user and type.

    A user's curve blends their own holds with their group's (as if the group's were
    ``PSEUDO`` holds of theirs), the group's with the type's, the type's with the prior: one
    hold of a new user barely moves their estimate, forty make it theirs."""

    counts: dict[str, list[float]] = field(default_factory=dict)
    stale: bool = False  # learned since the curves were made (:meth:`renew`)
    # Holds still running, as at the last renew: each one's mass spread over what is longer
    # than its age (they are not short holds, only unfinished ones), per level.
    running: dict[str, list[float]] = field(default_factory=dict)
    _cache: dict[tuple[str, tuple[str, ...], str], Curve] = field(default_factory=dict, repr=False)

    @staticmethod
    def keys(user: str, groups: Iterable[str], gpu_type: str) -> list[str]:
        return [
            f"type\x1f{gpu_type}",
            *(f"group\x1f{g}\x1f{gpu_type}" for g in sorted(groups)),
            f"user\x1f{user}\x1f{gpu_type}",
        ]

    def learn(
        self,
        user: str,
        groups: Iterable[str],
        gpu_type: str,
        seconds: float,
        *,
        cut_short: bool = False,
    ) -> None:
        """A hold of ``gpu_type`` by ``user`` ended after ``seconds``. ``cut_short``: gpuhub
        ended it (idle reclaim), not its owner, so it is learned as a hold that would have
        lasted longer, shaped as the curve says (as a hold still running is): the estimate
        reckons with reclaim by its own clocks, and a curve that had learned reclaimed holds
        as ended would count reclaim twice for a holder that is busy."""
        if not math.isfinite(seconds) or seconds < 0:
            return
        groups = list(groups)
        if cut_short:
            mass = self.curve(user, groups, gpu_type).above(seconds)
        else:
            mass = [0.0] * NBINS
            mass[bin_of(seconds)] = 1.0
        for key in self.keys(user, groups, gpu_type):
            counts = self.counts.setdefault(key, [0.0] * NBINS)
            for j, m in enumerate(mass):
                if m:
                    counts[j] += m
            total = sum(counts)
            if total > MAX_COUNT:
                self.counts[key] = [c * MAX_COUNT / total for c in counts]
        self.stale = True

    def renew(self, running: Iterable[tuple[str, Sequence[str], str, float]] | None = None) -> None:
        """Curves made from now on include every hold learned so far and, given
        ``running`` (user, groups, GPU type, age of each hold still running), the holds that
        have not ended yet: learning only from ended holds would learn the long ones last,
        and every estimate early (right-censoring; each running hold counts as one hold
        longer than its age, shaped as the ended ones say). Not done by each :meth:`learn`:
        curves (and their tables) are made again at most as often as the caller renews (the
        feed: once a minute), so a busy hub does not remake thousands of curves a tick."""
        if running is None:
            if self.stale:
                self._cache.clear()
                self.stale = False
            return
        self._cache.clear()
        self.running = {}
        spread: dict[str, list[float]] = {}
        shapes: dict[tuple[int, int], list[float]] = {}
        for user, groups, gpu_type, age in running:
            curve = self.curve(user, groups, gpu_type)  # from ended holds alone
            shape_key = (id(curve), bin_of(age))
            shape = shapes.get(shape_key)
            if shape is None:
                shape = shapes[shape_key] = curve.above(age)
            for key in self.keys(user, groups, gpu_type):
                acc = spread.setdefault(key, [0.0] * NBINS)
                for j in range(NBINS):
                    acc[j] += shape[j]
        self._cache.clear()
        self.running = spread
        self.stale = False

    def _level(self, key: str) -> list[float] | None:
        """A level's ended holds plus its running ones (None: it has neither)."""
        ended, running = self.counts.get(key), self.running.get(key)
        if running is None:
            return ended
        if ended is None:
            return running
        return [e + r for e, r in zip(ended, running, strict=True)]

    def curve(self, user: str, groups: Sequence[str], gpu_type: str) -> Curve:
        """The blended curve for ``user`` (in ``groups``) holding ``gpu_type``."""
        cache_key = (user, tuple(sorted(groups)), gpu_type)
        found = self._cache.get(cache_key)
        if found is not None:
            return found
        type_key, *group_keys, user_key = self.keys(user, groups, gpu_type)
        mass = _blend(list(PRIOR), self._level(type_key))
        if group_keys:
            blended = [0.0] * NBINS
            for key in group_keys:  # a user in two groups: their mean
                part = _blend(mass, self._level(key))
                blended = [b + p / len(group_keys) for b, p in zip(blended, part, strict=True)]
            mass = blended
        own_counts = self.counts.get(user_key)
        mass = _blend(mass, self._level(user_key))
        learned = sum(self.counts.get(type_key) or ()) if own_counts is None else sum(own_counts)
        curve = Curve.of(mass, learned)
        self._cache[cache_key] = curve
        return curve

    def as_json(self) -> dict[str, Any]:
        return {"version": 1, "bins": list(EDGES[1:-1]), "counts": self.counts}

    @classmethod
    def from_json(cls, data: Any) -> tuple[Durations, list[str]]:
        """What a state file held, and what in it was not what it should be."""
        found = cls()
        if not isinstance(data, Mapping) or not isinstance(data.get("counts"), Mapping):
            return found, ['it is not {"version", "bins", "counts"}']
        if list(data.get("bins") or ()) != list(EDGES[1:-1]):
            return found, ["its bins are not this version's"]
        problems = []
        for key, counts in data["counts"].items():
            if (
                isinstance(key, str)
                and isinstance(counts, list)
                and len(counts) == NBINS
                and all(isinstance(c, int | float) and c >= 0 for c in counts)
            ):
                found.counts[key] = [float(c) for c in counts]
            else:
                problems.append(f"the counts of {key!r} are not {NBINS} numbers of 0 or more")
        return found, problems


def _blend(parent: list[float], counts: list[float] | None) -> list[float]:
    """``counts`` (a level's holds) with ``parent`` (a distribution) as ``PSEUDO`` holds."""
    if not counts:
        return parent
    n = sum(counts)
    return [(c + PSEUDO * p) / (n + PSEUDO) for c, p in zip(counts, parent, strict=True)]
