"""The jobs service's quota grants: ``/hub/api/gpuhub/grants``.

The ledger (:mod:`gpuhub.hub.ledger.ledger`) is one per hub process: spawns are checked in the
hub. So that cluster jobs are checked by the same ledger under the same per-user lock, the
jobs service asks the hub for a *grant* before it creates anything:

* ``POST /hub/api/gpuhub/grants`` body ``{"user", "kind", "name", "gpus", "gpu_type"}``
  (plus ``"share"``, the GPUs a shared request counts as, as a fraction ``"1/2"``, and
  ``"gpu_memory"`` in bytes, for a shared GPU type: :mod:`gpuhub.core.sharing`)
  -> ``201 {"user", "name", "gpus", "quota", "held", "waiting"}``, or ``403 {"message"}``
  over quota or over the user's GPU-hour budget (the spawners' check, ``gpu_budget_refusal``).
  The grant counts until the workload's pods appear in the hub's pod watch (then they count)
  or ``GRANT_SECONDS`` pass.
* ``DELETE /hub/api/gpuhub/grants/<user>/<name>[?kind=<kind>]`` -> 204: the submit failed
  (or the job was cancelled), forget it.
* ``PUT /hub/api/gpuhub/grants/<user>/<name>`` body ``{"kind", "gpus", "gpu_type", "uid"}``
  (plus ``"queued": true`` while the job waits in Kueue's queue)
  -> 204: the service created the job's object (``uid``: its uid, a pipeline's KFP run id),
  so the ledger matches the job's pods to the grant by kind and uid, never by name; and,
  while the job still waits in Kueue's queue with no pods, keep counting it for another
  ``GRANT_SECONDS`` (no new quota check; the service renews every minute while the job is
  queued, so a queued job holds its place and a forgotten one lapses). A grant holds no
  GPU: until its pods are bound it is *waiting* (in Kueue's queue, or for a node).

These need the custom scope ``custom:gpuhub:grants``
(:data:`gpuhub.hub.web.access.GRANTS_SCOPE`; the chart gives it to the jobs service's role).
"""

from __future__ import annotations

import json
import time
from fractions import Fraction
from typing import Any

from tornado import web

from gpuhub.core import words
from gpuhub.core.holdings import QuotaExceeded, gpus_held, gpus_waiting
from gpuhub.core.options import as_given
from gpuhub.hub.ledger.ledger import Grant
from gpuhub.hub.web.access import GRANTS_SCOPE, GpuhubAPIHandler
from gpuhub.jobs.model import KINDS

# How long a job's grant counts while its pods are not in the watch yet: a pipeline step's
# pod appears after Kubeflow's driver pods, which can take minutes on a busy cluster.
GRANT_SECONDS = 600.0
_KINDS = set(KINDS)  # the job kinds a grant may be for


def _queued(body: dict[str, Any]) -> bool:
    """A grant's ``"queued"`` (the job waits in Kueue's queue), checked (400 otherwise)."""
    queued = body.get("queued", False)
    if not isinstance(queued, bool):
        raise web.HTTPError(400, f"queued must be true or false, not {queued!r}.")
    return queued


def _grant_body(body: Any, fields: str) -> tuple[str, int, str, str, Fraction | None, int]:
    """``(kind, gpus, gpu_type, uid, share, gpu_memory)`` of a grant's JSON body, checked
    (400 otherwise)."""
    if not isinstance(body, dict):
        raise web.HTTPError(400, f"Send a JSON object: {fields}.")
    kind, gpus, uid = body.get("kind"), body.get("gpus"), body.get("uid", "")
    if kind not in _KINDS:
        raise web.HTTPError(
            400, f"kind must be one of {', '.join(sorted(_KINDS))}, not {as_given(kind)}."
        )
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 <= gpus <= 100_000:
        raise web.HTTPError(400, f"gpus must be a whole number of GPUs, not {as_given(gpus)}.")
    if not isinstance(uid, str) or len(uid) > 200:
        raise web.HTTPError(400, "uid must be the job's Kubernetes uid (or KFP run id).")
    share, memory = _share(body.get("share"), gpus), body.get("gpu_memory", 0)
    if isinstance(memory, bool) or not isinstance(memory, int) or not 0 <= memory < 2**63:
        raise web.HTTPError(400, f"gpu_memory must be a number of bytes, not {as_given(memory)}.")
    return kind, gpus, str(body.get("gpu_type") or "")[:200], uid, share, memory


def _share(value: Any, gpus: int) -> Fraction | None:
    """The GPUs a shared request counts as ("1/2"), at most its count of units; None: whole."""
    if value is None:
        return None
    try:
        share = Fraction(value) if isinstance(value, str) and len(value) <= 40 else None
    except (ValueError, ZeroDivisionError):
        share = None
    if share is None or not 0 < share <= gpus:
        raise web.HTTPError(
            400, f'share must be the GPUs a share counts as, such as "1/2", not {as_given(value)}.'
        )
    return share


async def _budget_refusal(user: Any, gpu_type: str, gpus: int) -> str | None:
    """The spawners' one budget check (``gpu_budget_refusal``) for a job's GPUs."""
    spawner = user.get_spawner("", replace_failed=True)
    check = getattr(spawner, "gpu_budget_refusal", None)
    if check is None:
        return None
    message: str | None = await check(gpu_type, gpus)
    return message


class GrantsHandler(GpuhubAPIHandler):
    """``POST /hub/api/gpuhub/grants``: a quota grant for a job about to be created."""

    SUPPORTED_METHODS: tuple[str, ...] = ("POST", "OPTIONS")

    async def post(self) -> None:
        self.require_scope(GRANTS_SCOPE)
        body = self.get_json_body()
        fields = "user, kind, name, gpus, gpu_type"
        kind, gpus, gpu_type, uid, share, memory = _grant_body(body, fields)
        name, job = body.get("user"), body.get("name")
        if not isinstance(name, str) or not isinstance(job, str) or not job:
            raise web.HTTPError(400, "user and name must be strings.")
        user, ledger, limit = await self._ledger_for(name)
        over_budget = await _budget_refusal(user, gpu_type, gpus)
        if over_budget is not None:
            self.log.warning(
                "gpuhub: refused %s GPUs for %s's %s %s: over budget", gpus, name, kind, job
            )
            self._fail(403, over_budget)
            return
        async with ledger.lock(user.name):
            try:
                wanted = share if share is not None else Fraction(gpus)
                held = ledger.check(user.name, limit, wanted, what="job")
            except QuotaExceeded as exc:
                self.log.warning(
                    "gpuhub: refused %s GPUs for %s's %s %s: %s", gpus, name, kind, job, exc
                )
                self._fail(exc.status, exc.message)
                return
            if gpus > 0:
                expires = time.time() + GRANT_SECONDS
                ledger.grant(
                    Grant(user.name, "job", job, gpus, gpu_type, expires, kind, uid, share, memory)
                )
        self.set_status(201)
        self.finish(
            json.dumps(
                {
                    "user": user.name,
                    "name": job,
                    "gpus": gpus,
                    "quota": None if limit is None else words.as_number(limit),
                    "held": words.as_number(gpus_held(held)),
                    "waiting": words.as_number(gpus_waiting(held)),
                }
            )
        )


class GrantHandler(GpuhubAPIHandler):
    """``PUT`` and ``DELETE /hub/api/gpuhub/grants/<user>/<job>``: bind a grant to the object
    it was for (its uid), renew a queued job's, or forget one."""

    SUPPORTED_METHODS: tuple[str, ...] = ("PUT", "DELETE", "OPTIONS")

    async def put(self, name: str, job: str) -> None:
        """Bind the grant to the created object, or renew that of a job waiting in Kueue's
        queue (see the module docstring); no new quota check."""
        self.require_scope(GRANTS_SCOPE)
        kind, gpus, gpu_type, uid, share, memory = _grant_body(
            self.get_json_body(), "kind, gpus, gpu_type, uid"
        )
        queued = _queued(self.get_json_body())
        user, ledger, _ = await self._ledger_for(name)
        if gpus > 0:
            expires = time.time() + GRANT_SECONDS
            ledger.grant(
                Grant(
                    user.name, "job", job, gpus, gpu_type, expires, kind, uid, share, memory, queued
                )
            )
        self.set_status(204)
        self.finish()

    async def delete(self, name: str, job: str) -> None:
        self.require_scope(GRANTS_SCOPE)
        kind = self.get_argument("kind", "")
        if kind and kind not in _KINDS:
            raise web.HTTPError(
                400, f"kind must be one of {', '.join(sorted(_KINDS))}, not {as_given(kind)}."
            )
        user, ledger, _ = await self._ledger_for(name)
        ledger.release_job_grant(user.name, job, kind or None)
        self.set_status(204)
        self.finish()


HANDLERS: list[tuple[str, type[web.RequestHandler]]] = [
    (r"/api/gpuhub/grants", GrantsHandler),
    (r"/api/gpuhub/grants/([^/]+)/([^/]+)", GrantHandler),
]
