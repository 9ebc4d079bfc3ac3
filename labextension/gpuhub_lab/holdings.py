"""``GET /gpuhub/api/holdings``: the GPUs this user holds on the hub, and their quota.

Response::

    {"available": bool, "reason": str|null, "quota": int|null, "held": int, "waiting": int,
     "holdings": [{"kind": "server"|"job", "name", "label", "gpus", "share", "gpu_memory", "text", "gpu_type", "devices",
                   "since", "waiting", "estimate", "estimate_text"}],
     "budgets": [{"scope", "name", "shared", "hours", "extra_hours", "used_hours", "left_hours",
                  "period", "resets_at", "resets", "state", "at_limit", "grants", "text"}]}

``held`` counts GPUs given; ``waiting`` what waits for them (in line, in Kueue's queue),
which counts against the quota but is never held (a holding's ``waiting`` says where).
A waiting holding's ``estimate`` (``{"likely", "by", "latest", "because"}``, the hub's estimated
start, docs/architecture.md "When, not only where") comes with ``estimate_text``, the spawn
page's sentence for it (:func:`gpuhub.core.words.start_estimate`), so the sidebar and
``%jobs`` say it in the hub's words rather than re-deriving them; null where there is none.
``budgets``: the user's GPU-hour budget as the hub says it (docs/architecture.md, "GPU-hour
budgets"), [] when none applies or the hub cannot be asked.

The hub's GPU ledger knows every server and job of the user (``/hub/api/gpuhub/holdings``,
:mod:`gpuhub.hub.web.holdings`); this server asks it with its own ``JUPYTERHUB_API_TOKEN``
(:class:`gpuhub.core.hub_client.HubClient`). One answer is shared for a few seconds, so many
polling tabs cost one hub request per period.
Outside JupyterHub (a plain ``jupyter lab``) the answer says there is no hub to ask.
"""

from __future__ import annotations

import json
import math
import time
from fractions import Fraction
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from gpuhub.core import words
from gpuhub.core.hub_client import HubClient, HubUnreachable
from gpuhub_lab.hub_answer import SharedHubAnswer

SETTINGS_KEY = "gpuhub_holdings"
TTL = 5.0  # seconds an answer is shared


def _unavailable(reason: str) -> dict[str, Any]:
    return {
        "available": False,
        "reason": reason,
        "quota": None,
        "held": 0,
        "waiting": 0,
        "holdings": [],
        "budgets": [],
    }


class HubHoldings(SharedHubAnswer):
    """Asks the hub's ledger, at most once per ``ttl``, whatever the number of callers."""

    def __init__(self, environ: dict[str, str] | None = None, ttl: float = TTL) -> None:
        super().__init__(HubClient.from_env(environ), ttl)

    def _unavailable(self, reason: str) -> dict[str, Any]:
        return _unavailable(reason)

    async def _ask(self, hub: HubClient) -> dict[str, Any]:
        try:
            response = await hub.call("GET", "holdings")
        except HubUnreachable:
            return _unavailable("The hub did not answer; your GPUs are shown again soon.")
        if response.code == 404:
            return _unavailable(
                "This hub does not publish GPU holdings (gpuhub's hub endpoints are off)."
            )
        data = response.json()
        if response.code != 200 or not isinstance(data, dict):
            return _unavailable("The hub cannot say what you hold right now.")
        return {
            "available": True,
            "reason": None,
            "quota": data.get("quota"),
            "held": data.get("held", 0),
            "waiting": data.get("waiting", 0),
            "holdings": with_estimates(data.get("holdings") or [], time.time()),
            "budgets": [b for b in data.get("budgets") or [] if isinstance(b, dict)],
        }


def with_estimates(holdings: list[Any], now: float) -> list[Any]:
    """The hub's holdings, each waiting one with its estimate in words (``estimate_text``),
    written once per shared answer rather than by every reader."""
    said = []
    for holding in holdings:
        if isinstance(holding, dict):
            text = words.start_estimate(holding.get("estimate"), now)
            holding = {**holding, "estimate_text": text}
        said.append(holding)
    return said


def job_estimates(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """By job id, the estimated start of each of the user's jobs that waits for GPUs (in
    Kueue's queue or the hub's line): ``{"estimate", "estimate_text"}``. A waiting job
    holding names its job by id (unique across kinds and users, docs/architecture.md
    "Training jobs today"), or, a workstation's job hold, the jobs it holds for."""
    found: dict[str, dict[str, Any]] = {}
    for holding in answer.get("holdings") or []:
        if not isinstance(holding, dict) or holding.get("kind") != "job":
            continue
        if not holding.get("waiting") or not holding.get("estimate_text"):
            continue
        said = {"estimate": holding.get("estimate"), "estimate_text": holding["estimate_text"]}
        jobs = holding.get("jobs")
        for job_id in [holding.get("name"), *(jobs if isinstance(jobs, list) else [])]:
            if isinstance(job_id, str) and job_id:
                found[job_id] = said
    return found


def with_job_estimates(jobs: list[dict[str, Any]], answer: dict[str, Any]) -> list[dict[str, Any]]:
    """``jobs`` (the jobs API's JSON), each still to start given its estimated start from the
    hub's holdings ``answer`` (null where the hub gives none)."""
    estimates = job_estimates(answer)
    return [
        {**job, **estimates.get(str(job.get("id")), {"estimate": None, "estimate_text": None})}
        if job.get("status") in WAITING_STATUSES
        else job
        for job in jobs
    ]


WAITING_STATUSES = frozenset({"queued", "pending"})


class HoldingsHandler(APIHandler):
    auth_resource = "gpuhub"  # Jupyter's authorizer decides who may read it

    @web.authenticated
    @authorized
    async def get(self) -> None:
        source: HubHoldings = self.settings[SETTINGS_KEY]
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(await source.get()))


def setup_holdings(server_app: Any) -> None:
    web_app = server_app.web_app
    web_app.settings[SETTINGS_KEY] = HubHoldings()
    route = url_path_join(web_app.settings["base_url"], "gpuhub/api/holdings")
    web_app.add_handlers(".*$", [(route, HoldingsHandler)])


def quota_room(answer: dict[str, Any]) -> tuple[int | None, str | None]:
    """Whole GPUs the user's quota leaves for a new cluster job (servers and jobs share it),
    and, when it leaves none, the sentence that says why; ``(None, None)`` when the hub does
    not say (no hub, no quota)."""
    quota = answer.get("quota")
    if not answer.get("available") or not isinstance(quota, int | float):
        return None, None
    taken = float(answer.get("held") or 0) + float(answer.get("waiting") or 0)
    left = max(0, math.floor(quota - taken + 1e-9))
    if left > 0:
        return left, None
    holders = [h for h in answer.get("holdings") or [] if isinstance(h, dict) and h.get("gpus")]
    if quota <= 0 or not holders:
        return 0, "Your GPU quota allows no GPU: this job runs without one."
    yours = (
        f"your {words.plural(quota, 'GPU')}"
        if taken >= quota
        else f"{words.amount(Fraction(taken).limit_denominator(1000))} of your "
        f"{words.plural(quota, 'GPU')}, leaving less than one"
    )
    kinds = frozenset(str(h.get("kind")) for h in holders)
    if len(holders) == 1:
        holder = holders[0]
        name = str(holder.get("name") or "")
        if holder.get("kind") == "server":
            server = f'Your server "{name}"' if name else "Your server"
            return (
                0,
                f"{server} holds {yours}: this job runs without one, or stop the server first.",
            )
        return 0, (
            f'Your job "{name}" holds {yours}: this job runs without one, or wait for it to end.'
        )
    subject, then = {
        frozenset({"server"}): ("Your servers", "stop a server first"),
        frozenset({"job"}): ("Your jobs", "wait for one of them to end"),
    }.get(kinds, ("Your servers and jobs", "stop a server first"))
    return 0, f"{subject} hold {yours}: this job runs without one, or {then}."
