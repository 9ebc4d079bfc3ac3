"""GPU-seconds per user, and notices of reclaimed servers, kept across hub restarts.

A small JSON file beside the hub's database (``gpu_usage_file``), written atomically by the
hub process alone, so there is nothing new to operate. It holds:

* the running total of GPU-seconds per ``(user, gpu_type)`` (the Prometheus counter
  ``gpuhub_gpu_seconds_total`` starts from it after a restart, so it never goes back);
* hourly buckets of the last 8 days, for GPU-hours over 24 hours and 7 days;
* per user, the last reclaim of each server, shown on their next visit to the hub;
* the count of idle reclaims per GPU type (the counter ``gpuhub_idle_reclaims_total``
  starts from it after a restart, like the GPU-seconds).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

HOUR = 3600
KEEP_SECONDS = 8 * 24 * HOUR
NOTICE_SECONDS = 7 * 24 * HOUR  # a notice nobody read is dropped after a week
JOB_NOTICE_SECONDS = 24 * HOUR  # a cancelled job's notice is shown for a day


# ``Notice.by`` when the hub ended a spawn waiting in line as it shut down.
HUB_SHUTDOWN = "hub shutdown"


@dataclass(frozen=True)
class Notice:
    """Why and when a user's server was stopped (shown until they start it again), or their
    job cancelled by an admin (shown for ``JOB_NOTICE_SECONDS``)."""

    server: str  # the server's name; for a job, the job's name on the fleet page
    when: float
    reason: str
    gpus: int
    gpu_type: str
    by: str = "idle"  # "idle" (the reclaim rule), the admin who stopped it, or HUB_SHUTDOWN
    kind: str = "server"  # or "job"
    jobs: tuple[str, ...] = ()  # the job ids a job notice is about
    # The user closed it: hub pages and the lab show it no more; the local jobs backend still
    # reads it (a cancelled job's record says by whom and why).
    dismissed: bool = False

    @property
    def key(self) -> str:
        """Where the store keeps it: a server's name, ``job/<name>`` for a job (server names
        never hold a slash)."""
        return self.server if self.kind == "server" else f"job/{self.server}"


def cancel_notice_for_job(
    job_id: str, environ: dict[str, str] | None = None, timeout: float = 3.0
) -> tuple[str, str] | None:
    """``(admin, reason)`` if the hub says an admin cancelled this server's user's job
    ``job_id`` from the fleet page (``GET /hub/api/gpuhub/notices/<user>`` with the server's
    own token); None otherwise, and when there is no hub to ask or it does not answer.
    Blocking: call it in a thread."""
    import urllib.parse
    import urllib.request

    env = dict(os.environ if environ is None else environ)
    api, token, user = (
        env.get("JUPYTERHUB_API_URL"),
        env.get("JUPYTERHUB_API_TOKEN"),
        env.get("JUPYTERHUB_USER"),
    )
    if not (api and token and user):
        return None
    url = f"{api.rstrip('/')}/gpuhub/notices/{urllib.parse.quote(user, safe='')}"
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            data = json.loads(answer.read())
    except (OSError, ValueError) as exc:
        log.debug("gpuhub: cannot ask the hub about job %s: %s", job_id, exc)
        return None
    for notice in data.get("notices") or []:
        if notice.get("kind") == "job" and job_id in (notice.get("jobs") or []):
            return str(notice.get("by", "")), str(notice.get("reason", ""))
    return None


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


class UsageStore:
    """GPU-seconds and reclaim notices, persisted to ``path`` (None: memory only)."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path).resolve() if path is not None else None
        self.totals: dict[tuple[str, str], float] = {}
        # hour start -> (user, type) -> GPU-seconds. Only the current hour's dict changes: the
        # others are final, so a reader in another thread may keep them without a copy.
        self.hourly: dict[int, dict[tuple[str, str], float]] = {}
        self.notices: dict[str, dict[str, Notice]] = {}  # user -> server -> notice
        self.reclaims: dict[str, int] = {}  # gpu type -> servers reclaimed, ever
        self._dirty = False
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
        """The user closed the notice kept under ``key`` (:attr:`Notice.key`); False when
        there is none. Saved at once: it stays closed across hub restarts."""
        notice = self.notices.get(user, {}).get(key)
        if notice is None:
            return False
        if not notice.dismissed:
            self.notices[user][key] = dataclasses.replace(notice, dismissed=True)
            self._dirty = True
            self.save()
        return True

    def clear_notice(self, user: str, server: str) -> None:
        if self.notices.get(user, {}).pop(server, None) is not None:
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
                if now - n.when < (NOTICE_SECONDS if n.kind == "server" else JOB_NOTICE_SECONDS)
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
    def _load(self) -> None:
        assert self.path is not None
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.error("gpuhub: cannot read GPU usage %s (%s); starting from zero", self.path, exc)
            return
        try:
            for user, gpu_type, seconds in data.get("totals", []):
                self.totals[(str(user), str(gpu_type))] = float(seconds)
            for hour, user, gpu_type, seconds in data.get("hourly", []):
                bucket = self.hourly.setdefault(int(hour), {})
                bucket[(str(user), str(gpu_type))] = float(seconds)
            for user, servers in (data.get("notices") or {}).items():
                self.notices[user] = {
                    key: Notice(**{**n, "jobs": tuple(n.get("jobs") or ())})
                    for key, n in servers.items()
                }
            for gpu_type, count in (data.get("reclaims") or {}).items():
                self.reclaims[str(gpu_type)] = int(count)
        except (TypeError, ValueError) as exc:
            log.error("gpuhub: GPU usage %s is damaged (%s); keeping what was read", self.path, exc)

    def save(self, now: float | None = None) -> None:
        """Write the store if it changed (the monitor calls this every few ticks)."""
        if self.path is None or not self._dirty:
            return
        now = time.time() if now is None else now
        for hour in [h for h in self.hourly if h < now - KEEP_SECONDS]:
            del self.hourly[hour]
        for user in list(self.notices):  # shown no more: forget them
            shown = {n.key for n in self.notices_for(user, now)}
            self.notices[user] = {k: n for k, n in self.notices[user].items() if k in shown}
            if not self.notices[user]:
                del self.notices[user]
        data: dict[str, Any] = {
            "version": 1,
            "totals": [[u, t, s] for (u, t), s in sorted(self.totals.items())],
            "hourly": [
                [h, u, t, s]
                for h, bucket in sorted(self.hourly.items())
                for (u, t), s in sorted(bucket.items())
            ],
            "notices": {
                user: {name: asdict(n) for name, n in servers.items()}
                for user, servers in self.notices.items()
            },
            "reclaims": dict(sorted(self.reclaims.items())),
        }
        tmp = self.path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(data))
            tmp.replace(self.path)
            self._dirty = False
        except OSError as exc:
            log.error("gpuhub: cannot write GPU usage %s: %s", self.path, exc)
