"""What a user holds against their quota: ``GET /hub/api/gpuhub/holdings/<user>``.

For tokens with access to the user's servers (``access:servers`` or ``servers`` for that
user: the user's session and tokens, their server's own JUPYTERHUB_API_TOKEN, admins; see
:data:`gpuhub.hub.web.access.SERVER_ACCESS_SCOPES`), and for ``custom:gpuhub:grants`` (the
jobs service); never for a token that only identifies the user, as OAuth gives every
service they log in to.

* ``GET /hub/api/gpuhub/holdings/<user>`` -> ``{"user", "budgets", "quota", "held", "waiting",
  "holdings": [{"kind", "name", "label", "gpus", "share", "gpu_memory", "text", "gpu_type",
  "devices", "device_names", "since", "processes", "jobs", "waiting", "stops_at",
  "stops_why", "estimate"}]}`` (``estimate``, on a waiting holding: ``{"likely", "by",
  "latest", "because"}``, :mod:`gpuhub.hub.monitor.eta`; ``stops_at``: when a holding that
  will be stopped stops, epoch seconds,
  and ``stops_why`` why, ``"budget"`` (a budget's grace), ``"idle"``, ``"share"`` or
  ``"booking"`` (the start of a booking of its GPUs); null
  for what nothing stops) (a share of a GPU:
  ``share`` what it counts as, ``gpu_memory`` its bytes, ``text`` "8 GB of GPU 3 (T4), 0.5
  GPU" as the fleet page says it; claimed through DRA, ``device_names`` its devices, "GPU 3
  (A100-SXM4-80GB) on a100-7"). ``held`` counts GPUs given; ``waiting`` those asked for by what waits for
  them (in line, in Kueue's queue), which count against the quota too; a holding's
  ``waiting`` says where it waits ("waiting in line"), null once held. ``budgets``: the
  user's GPU-hour budget (:meth:`gpuhub.hub.ledger.budget_usage.BudgetState.as_json`), [] when
  none applies.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tornado import web

from gpuhub.core import words
from gpuhub.core.holdings import Holding, gpu_type_names, gpus_held, gpus_waiting, named
from gpuhub.core.options import as_given
from gpuhub.core.policy import PolicyConfigError
from gpuhub.hub.monitor import gpu_monitor
from gpuhub.hub.web.access import GRANTS_SCOPE, GpuhubAPIHandler


class HoldingsHandler(GpuhubAPIHandler):
    """``GET /hub/api/gpuhub/holdings/<user>``: what one user holds against their quota, for
    a token with access to their servers (their own, their server's) or the jobs service."""

    SUPPORTED_METHODS: tuple[str, ...] = ("GET", "OPTIONS")

    async def get(self, name: str) -> None:
        self.require_access(
            name,
            "reading or keeping their GPUs",
            # Never confirm to someone else that a user exists.
            web.HTTPError(404, f"No user {as_given(name)} on this hub (gpuhub ledger)."),
            scope=GRANTS_SCOPE,
        )
        user, ledger, limit = await self._ledger_for(name)
        try:
            held = ledger.holdings(user.name)
        except RuntimeError:  # the cluster has not answered yet
            raise web.HTTPError(503, "GPU holdings cannot be read right now.") from None
        try:
            names = gpu_type_names(user.get_spawner("").gpu_policy.gpu_types)
        except PolicyConfigError:  # an admin mistake is reported where the form renders
            names = {}
        held = [named(h, names) for h in held]
        monitor = gpu_monitor.current()
        stops = monitor.stops(user.name) if monitor is not None else {}
        self.finish(
            json.dumps(
                {
                    "user": user.name,
                    "budgets": await budgets_of(user),
                    "quota": None if limit is None else words.as_number(limit),
                    "held": words.as_number(gpus_held(held)),
                    "waiting": words.as_number(gpus_waiting(held)),
                    "holdings": [holding_json(h, stops, monitor) for h in held],
                }
            )
        )


def holding_json(
    h: Holding,
    stops: Mapping[Any, tuple[float, str]],
    monitor: gpu_monitor.GPUMonitor | None,
) -> dict[str, Any]:
    """One holding of the answer (see the module docstring)."""
    return {
        "kind": h.kind,
        "name": h.name,
        "label": h.label,
        "gpus": h.gpus,
        # A share of a GPU: what it counts as, and its memory (bytes).
        "share": None if h.share is None else words.as_number(h.share),
        "gpu_memory": h.memory or None,
        "text": h.gpus_text,
        "gpu_type": h.gpu_type,
        "devices": list(h.devices),
        # Claimed through DRA: "GPU 3 (A100-SXM4-80GB) on a100-7".
        "device_names": list(h.claimed),
        "since": h.since,
        "processes": [{"pid": p, "command": c} for p, c in h.processes],
        "jobs": list(h.jobs),
        "waiting": h.waiting_words or None,
        # Will be stopped (a budget's grace, idle reclaim, a share over its memory, a
        # booking's start): when
        # (epoch seconds) and why; else null.
        "stops_at": stops.get((h.user, h.kind, h.name), (None,))[0],
        "stops_why": stops.get((h.user, h.kind, h.name), (None, None))[1],
        # Waiting: when it likely starts, by when, at the latest, and why
        # (gpuhub.hub.monitor.eta); null once held.
        "estimate": estimate_of(monitor, h),
    }


def estimate_of(monitor: gpu_monitor.GPUMonitor | None, holding: Holding) -> Any:
    """A waiting holding's estimated start as JSON (docs/architecture.md, "When, not only
    where"); None once held, or before the monitor's first estimate."""
    if monitor is None or not holding.waiting:
        return None
    found = monitor.eta.estimates.get((holding.user, holding.kind, holding.name))
    return found.as_json() if found is not None else None


async def budgets_of(user: Any) -> list[dict[str, Any]]:
    """The ``budgets`` of a holdings answer: the GPU-hour budget that applies to ``user``
    (docs/architecture.md, "GPU-hour budgets"); empty when none does."""
    spawner = user.get_spawner("", replace_failed=True)
    budget_json = getattr(spawner, "gpu_budget_json", None)
    found = await budget_json() if budget_json is not None else None
    return [found] if found is not None else []


HANDLERS: list[tuple[str, type[web.RequestHandler]]] = [
    (r"/api/gpuhub/holdings/([^/]+)", HoldingsHandler),
]
