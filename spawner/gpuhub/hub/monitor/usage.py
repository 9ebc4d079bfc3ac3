"""GPU-seconds per user, and notices of reclaimed servers, kept across hub restarts.

A small JSON file beside the hub's database (``gpu_usage_file``), written atomically by the
hub process alone (:mod:`gpuhub.hub.ledger.statefile`), so there is nothing new to operate. A damaged
file is kept aside under a new name and what can be read of it is kept. It holds:

* the running total of GPU-seconds per ``(user, gpu_type)`` (the Prometheus counter
  ``gpuhub_gpu_seconds_total`` starts from it after a restart, so it never goes back);
* hourly buckets of the last 8 days, for GPU-hours over 24 hours and 7 days;
* per user, the last reclaim of each server, shown on their next visit to the hub;
* the count of idle reclaims per GPU type (the counter ``gpuhub_idle_reclaims_total``
  starts from it after a restart, like the GPU-seconds).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from gpuhub.hub.ledger.statefile import JsonStore, kind_of, rows

HOUR = 3600
KEEP_SECONDS = 8 * 24 * HOUR
NOTICE_SECONDS = 7 * 24 * HOUR  # a notice nobody read is dropped after a week
JOB_NOTICE_SECONDS = 24 * HOUR  # a cancelled job's notice is shown for a day


# ``Notice.by`` when the hub ended a spawn waiting in line as it shut down.
HUB_SHUTDOWN = "hub shutdown"
# A server stopped because it used more of a GPU's memory than its share (gpuhub.hub.monitor.overshare).
SHARE_OVERUSE = "share"
# ``Notice.by`` of a GPU-hour budget's notices, and of work stopped past its grace.
BUDGET = "budget"


@dataclass(frozen=True)
class Notice:
    """Why and when a user's server was stopped (shown until they start it again), or their
    job cancelled by an admin (shown for ``JOB_NOTICE_SECONDS``)."""

    server: str  # the server's name; for a job, the job's name on the fleet page
    when: float
    reason: str
    gpus: int
    gpu_type: str
    # "idle" (the reclaim rule), SHARE_OVERUSE, the admin who stopped it, or HUB_SHUTDOWN
    by: str = "idle"
    kind: str = "server"  # or "job", or "budget" (a GPU-hour budget's 80 %, 100 %, extra hours)
    jobs: tuple[str, ...] = ()  # the job ids a job notice is about
    # The user closed it: hub pages and the lab show it no more; the local jobs backend still
    # reads it (a cancelled job's record says by whom and why).
    dismissed: bool = False

    @property
    def key(self) -> tuple[str, str]:
        """Where the store keeps it among the user's notices: (kind, name)."""
        return (self.kind, self.server)

    @property
    def public_key(self) -> str:
        """The key as the notices API names it: ``<kind>/<name>`` (a kind holds no slash, so
        any name reads back whole)."""
        return f"{self.kind}/{self.server}"


def gpu_hours(
    hourly: Mapping[int, Mapping[tuple[str, str], float]], since: float
) -> dict[str, float]:
    """GPU-hours per user since ``since`` (whole hourly buckets that overlap it)."""
    start = since // HOUR * HOUR
    out: dict[str, float] = {}
    for hour, bucket in hourly.items():
        if hour >= start:
            for (user, _), seconds in bucket.items():
                out[user] = out.get(user, 0.0) + seconds / HOUR
    return out


class UsageStore(JsonStore):
    """GPU-seconds and reclaim notices, persisted to ``path`` (None: memory only)."""

    WHAT = "GPU usage"

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(path)
        self.totals: dict[tuple[str, str], float] = {}
        # hour start -> (user, type) -> GPU-seconds. Only the current hour's dict changes: the
        # others are final, so a reader in another thread may keep them without a copy.
        self.hourly: dict[int, dict[tuple[str, str], float]] = {}
        # user -> (kind, name) -> notice: one per server and one per job
        self.notices: dict[str, dict[tuple[str, str], Notice]] = {}
        self.reclaims: dict[str, int] = {}  # gpu type -> servers reclaimed, ever
        if self.path is not None:
            self._load()

    # -- recording ------------------------------------------------------------------------
    def add(self, user: str, gpu_type: str, gpu_seconds: float, now: float) -> None:
        if gpu_seconds <= 0:
            return
        key = (user, gpu_type)
        self.totals[key] = self.totals.get(key, 0.0) + gpu_seconds
        hour = self.hourly.setdefault(int(now // HOUR * HOUR), {})
        hour[key] = hour.get(key, 0.0) + gpu_seconds
        self._dirty = True

    def count_reclaim(self, gpu_type: str) -> None:
        """One more server stopped for idleness (saved at once, like its notice)."""
        self.reclaims[gpu_type] = self.reclaims.get(gpu_type, 0) + 1
        self._dirty = True
        self.save()

    def notify(self, user: str, notice: Notice) -> None:
        self.notices.setdefault(user, {})[notice.key] = notice
        self._dirty = True
        self.save()

    def dismiss(self, user: str, key: str) -> bool:
        """The user closed the notice whose :attr:`Notice.public_key` is ``key``; False when
        there is none. Saved at once: it stays closed across hub restarts."""
        kind, _, name = key.partition("/")
        notice = self.notices.get(user, {}).get((kind, name))
        if notice is None:
            return False
        if not notice.dismissed:
            self.notices[user][(kind, name)] = dataclasses.replace(notice, dismissed=True)
            self._dirty = True
            self.save()
        return True

    def clear_notice(self, user: str, server: str, kind: str = "server") -> None:
        if self.notices.get(user, {}).pop((kind, server), None) is not None:
            if not self.notices[user]:
                del self.notices[user]
            self._dirty = True
            self.save()

    # -- reading --------------------------------------------------------------------------
    def notices_for(
        self, user: str, now: float | None = None, *, shown: bool = False
    ) -> list[Notice]:
        """The user's notices still kept; ``shown``: only those not dismissed (pages)."""
        now = time.time() if now is None else now
        found = self.notices.get(user, {}).values()
        return sorted(
            (
                n
                for n in found
                if now - n.when < (JOB_NOTICE_SECONDS if n.kind == "job" else NOTICE_SECONDS)
                and not (shown and n.dismissed)
            ),
            key=lambda n: n.when,
        )

    def gpu_hours(self, since: float) -> dict[str, float]:
        """GPU-hours per user since ``since`` (whole hourly buckets that overlap it)."""
        return gpu_hours(self.hourly, since)

    def hourly_snapshot(self) -> dict[int, dict[tuple[str, str], float]]:
        """The hourly buckets as of now, safe to read in another thread: the latest hour (the
        one still growing) is copied, the final ones are shared."""
        snap = dict(self.hourly)
        if snap:
            latest = max(snap)
            snap[latest] = dict(snap[latest])
        return snap

    # -- persistence ----------------------------------------------------------------------
    def _kept(self) -> str:
        return (
            f"{len(self.totals)} GPU-second totals, {sum(map(len, self.hourly.values()))} "
            f"hourly figures, {sum(map(len, self.notices.values()))} notices"
        )

    def _restore(self, data: Any) -> list[str]:
        """Take every section and entry of ``data`` that is what it should be; return what
        was not."""
        if not isinstance(data, dict):
            return [f"expected an object, found {kind_of(data)}"]
        problems: list[str] = []

        bad = 0
        for row in rows(data, "totals", 3, problems):
            user, gpu_type, seconds = row
            if isinstance(user, str) and isinstance(gpu_type, str) and _seconds(seconds):
                self.totals[(user, gpu_type)] = float(seconds)
            else:
                bad += 1
        for row in rows(data, "hourly", 4, problems):
            hour, user, gpu_type, seconds = row
            ok = _seconds(hour) and isinstance(user, str) and isinstance(gpu_type, str)
            if ok and _seconds(seconds):
                self.hourly.setdefault(int(hour), {})[(user, gpu_type)] = float(seconds)
            else:
                bad += 1
        if bad:
            problems.append(f"{bad} GPU-second figures are not numbers")
        notices = data.get("notices") or {}
        if not isinstance(notices, dict):
            problems.append("notices is not an object")
            notices = {}
        for user, entries in notices.items():
            # Version 1 kept a user's notices in an object; version 2 in a list.
            values = list(entries.values()) if isinstance(entries, dict) else entries
            if not isinstance(values, list):
                problems.append(f"the notices of {user!r} are not a list")
                continue
            for entry in values:
                notice = _notice(entry)
                if notice is None:
                    problems.append(f"a notice of {user!r} is damaged")
                    continue
                self.notices.setdefault(str(user), {})[notice.key] = notice
        reclaims = data.get("reclaims") or {}
        if not isinstance(reclaims, dict):
            problems.append("reclaims is not an object")
            reclaims = {}
        for gpu_type, count in reclaims.items():
            if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
                self.reclaims[str(gpu_type)] = count
            else:
                problems.append(f"the reclaim count of {gpu_type!r} is not a count")
        return problems

    def _prune(self, now: float) -> None:
        for hour in [h for h in self.hourly if h < now - KEEP_SECONDS]:
            del self.hourly[hour]
        for user in list(self.notices):  # shown no more: forget them
            shown = {n.key for n in self.notices_for(user, now)}
            self.notices[user] = {k: n for k, n in self.notices[user].items() if k in shown}
            if not self.notices[user]:
                del self.notices[user]

    def _data(self) -> dict[str, Any]:
        return {
            "version": 2,
            "totals": [[u, t, s] for (u, t), s in sorted(self.totals.items())],
            "hourly": [
                [h, u, t, s]
                for h, bucket in sorted(self.hourly.items())
                for (u, t), s in sorted(bucket.items())
            ],
            "notices": {
                user: [{**asdict(n), "jobs": list(n.jobs)} for n in notices.values()]
                for user, notices in self.notices.items()
            },
            "reclaims": dict(sorted(self.reclaims.items())),
        }


def _seconds(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


_NOTICE_FIELDS = {f.name: f.type for f in fields(Notice)}


def _notice(entry: Any) -> Notice | None:
    """A notice of the file, or None when any field is missing or of the wrong type."""
    if not isinstance(entry, dict) or set(entry) - set(_NOTICE_FIELDS):
        return None
    values = dict(entry)
    jobs = values.get("jobs", [])
    if not isinstance(jobs, list | tuple) or not all(isinstance(j, str) for j in jobs):
        return None
    values["jobs"] = tuple(jobs)
    for name in ("server", "reason", "gpu_type", "by", "kind"):
        if name in values and not isinstance(values[name], str):
            return None
    if not _seconds(values.get("when")) or not isinstance(values.get("gpus"), int):
        return None
    try:
        return Notice(**values)
    except TypeError:
        return None
