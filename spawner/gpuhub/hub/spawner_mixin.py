"""What GPUSpawner and LocalGPUSpawner share: the admin traits, the form, one validation path.

JupyterHub calls, in order: ``options_form`` (render), ``options_from_form`` (reshape the
posted fields; ``options_from_query`` for a spawn link's ``?opt-…`` options), then
``apply_user_options`` (validate and apply, JupyterHub >= 5.3). The REST API skips the first
two and lands in the same ``apply_user_options``, so the form, links and the API cannot
disagree (:mod:`gpuhub.hub.spawn_options`). Refusals are ``HTTPError(400)`` carrying one
sentence for the user (:mod:`gpuhub.hub.refusals`).

Only options that started a server are kept as the user's next defaults: JupyterHub stores a
spawn's options before any validation, so a refused request's are put back to the last
accepted ones. A spawn link from outside the hub starts nothing: it shows the form filled in
with what it asks for, and the user's own submit (with JupyterHub's XSRF token) starts it.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from copy import deepcopy
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from tornado import web
from traitlets import Any as TraitAny
from traitlets import Dict, Float, Unicode, Union, default, observe
from traitlets.config import Configurable

from gpuhub.core import words
from gpuhub.core.budgets import BudgetConfig
from gpuhub.core.holdings import GPUQuota, gpu_type_names, named
from gpuhub.core.line_order import LineOrder
from gpuhub.core.options import (
    LaunchOptions,
    OptionsError,
    check_json_value,
    check_options_object,
)
from gpuhub.core.policy import Policy
from gpuhub.core.policy_traits import HubPolicyTraits
from gpuhub.core.quantity import human_memory
from gpuhub.core.sharing import Platform
from gpuhub.hub.form import (
    Preset,
    QuotaView,
    options_from_formdata,
    options_from_querydata,
    render_form,
)
from gpuhub.hub.ledger.gpu_capacity import GPUCapacity
from gpuhub.hub.ledger.ledger import Ledger
from gpuhub.hub.monitor import gpu_monitor
from gpuhub.hub.monitor.gpu_monitor import ensure_started
from gpuhub.hub.monitor.reclaim import ReclaimRule
from gpuhub.hub.monitor.traits import MonitorTraits
from gpuhub.hub.refusals import log_refusal, refusal, refused_server
from gpuhub.hub.spawn_options import (
    apply_gpuhub_options,
    hold_link,
    hub_prefix,
    link_from_the_hub,
    reshape,
)
from gpuhub.jobs.policy_env import policy_env

_POLICY_CACHE: dict[str, Policy] = {}
_QUOTA_CACHE: dict[str, GPUQuota] = {}
_RECLAIM_CACHE: dict[str, ReclaimRule | None] = {}
_BUDGET_CACHE: dict[str, BudgetConfig | None] = {}


class GPUSpawnerMixin(HubPolicyTraits, MonitorTraits, Configurable):
    """Traits and behaviour common to both gpuhub spawners (mixed in before the Spawner); the
    admin's policy traits are :class:`gpuhub.core.policy_traits.HubPolicyTraits`, the GPU
    monitor's :class:`gpuhub.hub.monitor.traits.MonitorTraits`."""

    # JupyterHub assigns the REST body to user_options before apply_user_options sees it, so
    # any JSON value can arrive here; a non-object must reach the validation and be refused
    # with 400 there, not fail this assignment with a TraitError (a 500).
    user_options = Union(
        [Dict(), TraitAny()],
        help="""The options the user asked for (JupyterHub's trait, widened to any JSON value
        so that a bad REST body is refused with 400 by the validation).""",
    )

    gpu_queue_timeout = Float(
        1800,
        config=True,
        help="""Seconds a GPU spawn may wait in line for its GPUs, past ``start_timeout``; it
        takes them as soon as they are free. LocalGPUSpawner: gpuhub's own line, first come,
        first served per GPU type (0: refuse at once with HTTP 409 when too few are free).
        GPUSpawner: Kueue's queue, when ``kueue_queue_name`` is set (0: within
        ``start_timeout`` only).""",
    )
    bookings = Dict(
        config=True,
        help="""GPU bookings (docs/architecture.md, "Bookings"): who may set GPUs of a type aside
        for a time, e.g. ``{"groups": {"staff": {"max_gpus": 4, "max_hours": 8, "days_ahead":
        14}}, "admins_book_for_groups": True, "warn_before": 900}``. Members of a listed group
        book for themselves within its rule and their quota; fleet admins book for a group
        (a class) when ``admins_book_for_groups``; work still on booked GPUs is warned
        ``warn_before`` seconds ahead and stopped at the start. Empty: nobody books.""",
    )
    gpu_bookings_file = Unicode(
        "gpuhub-bookings.json",
        config=True,
        help="""Where the hub keeps the bookings not yet ended across restarts; relative to the
        hub's working directory. "" keeps them in memory.""",
    )

    launch_options: LaunchOptions | None = None
    # The options this server last started with (None: not known yet; JupyterHub's stored
    # ones then), put back when a spawn is refused.
    _gpuhub_accepted: Any = None
    # What the spawner runs on: what the GPU types may ask of it (Policy.check_platform).
    gpu_platform: Platform | None = None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Only a spawner of a running hub (whose users carry the hub's settings) starts the
        # hub's GPU monitor; spawners built in tools and unit tests do not.
        settings = getattr(getattr(self, "user", None), "settings", None)
        if isinstance(settings, Mapping) and settings.get("users") is not None:
            ensure_started(self)

    if TYPE_CHECKING:  # provided by jupyterhub.spawner.Spawner, which this is mixed into
        log: Any
        user: Any
        name: str
        db: Any
        server: Any
        start_timeout: Any

    # JupyterHub waits for start() at most start_timeout seconds. A spawn accepted to wait in
    # line for its GPUs gets gpu_queue_timeout more until start() is done waiting; meanwhile
    # this is the admin's own start_timeout (None: not extended).
    _gpuhub_start_timeout: int | None = None

    def extend_start_timeout(self) -> None:
        """Let JupyterHub wait for ``start()`` through a wait in line too: ``gpu_queue_timeout``
        seconds on top of the admin's ``start_timeout``."""
        if self._gpuhub_start_timeout is None:
            self._gpuhub_start_timeout = int(self.start_timeout)
        self.start_timeout = int(self._gpuhub_start_timeout + self.gpu_queue_timeout)

    def restore_start_timeout(self) -> None:
        """Put the admin's ``start_timeout`` back once ``start()`` is done waiting."""
        if self._gpuhub_start_timeout is not None:
            self.start_timeout = self._gpuhub_start_timeout
            self._gpuhub_start_timeout = None

    @property
    def admin_start_timeout(self) -> Any:
        """The admin's ``start_timeout``, whether this spawn's is extended or not."""
        if self._gpuhub_start_timeout is None:
            return self.start_timeout
        return self._gpuhub_start_timeout

    @default("options_form")
    def _gpuhub_options_form(self) -> Any:
        return _render_options_form

    @default("options_from_form")
    def _gpuhub_options_from_form(self) -> Any:
        return options_from_form

    @default("apply_user_options")
    def _gpuhub_apply_user_options(self) -> Any:
        return apply_gpuhub_options

    async def options_from_query(self, query_data: Mapping[str, list[str]]) -> dict[str, Any]:
        """A spawn link's options (``/hub/spawn?opt-gpus=1&opt-gpu_type=a100``).

        JupyterHub's own default hands them to ``options_from_form`` without the spawner, so a
        refusal would not reach the form it renders next; and the form drops names it does
        not know, where a link's misspelt option must be refused by name. JupyterHub starts
        the server from a link at once, on a plain GET without its XSRF check; a link that
        was not followed from the hub's own pages (:func:`link_from_the_hub`) starts nothing
        and the form asks first, whatever it asks for (a CPU-only link starts a process too).
        """
        options = reshape(options_from_querydata, query_data, self)
        handler = getattr(self, "handler", None)
        if not link_from_the_hub(getattr(handler, "request", None), hub_prefix(self)):
            raise await hold_link(self, options)
        return options

    @observe("handler")
    def _refuse_unstorable_body(self, change: Any) -> None:
        """Refuse a REST body JupyterHub could not store, before it tries.

        JupyterHub saves a spawn's body to its database as the user's next defaults before
        any spawner code runs; a body nested deep enough overflows ``json.dumps`` there (a
        500). It sets ``spawner.handler`` just before, which is the last moment to say 400.
        JupyterHub 6 also takes a false body (``0``, ``false``, ``""``, ``[]``) for none and
        starts a server with the last options: a body that is no object is refused here.
        """
        # Before JupyterHub stores this spawn's options over them: the ones last accepted,
        # put back should this spawn be refused (refusals.forget_refused_options).
        orm = getattr(self, "orm_spawner", None)
        if orm is not None:
            self._gpuhub_accepted = deepcopy(orm.user_options or {})
        request = getattr(change["new"], "request", None)
        if request is None or request.method != "POST" or not request.body:
            return
        try:
            body = json.loads(request.body)
        except (ValueError, RecursionError):
            return  # JupyterHub has already refused what it could not parse
        try:
            if body is not None:  # JSON null: no options, the last ones are used
                check_options_object(body)
            check_json_value(body, "user_options")
        except OptionsError as exc:
            log_refusal(self, exc.message)
            # JupyterHub has just recorded a server for this spawn: take it back (its own
            # setter deletes the record), so that nothing is left half-made.
            self.server = None
            if self.db is not None:
                self.db.commit()
            raise refusal(exc.message) from None

    @default("progress_ready_hook")
    def _gpuhub_progress_ready_hook(self) -> Any:
        return _ready_event

    def clear_state(self) -> None:
        super().clear_state()  # type: ignore[misc]  # Spawner.clear_state
        self.launch_options = None

    # -- policy (its settings: HubPolicyTraits.policy_config) ------------------------------
    @property
    def gpu_policy(self) -> Policy:
        """The validated policy, built once per distinct configuration and shared."""
        config = self.policy_config()
        key = json.dumps([self.gpu_platform, config], sort_keys=True, default=str)
        policy = _POLICY_CACHE.get(key)
        if policy is None:
            policy = Policy.from_config(**config)
            if self.gpu_platform is not None:
                policy.check_platform(self.gpu_platform)
            _POLICY_CACHE[key] = policy
        return policy

    def gpu_quota_limit(self) -> Fraction | None:
        """This user's GPU quota (None: none). The admin's dict is checked once and shared."""
        key = json.dumps(self.gpu_quota, sort_keys=True, default=str)
        quota = _QUOTA_CACHE.get(key)
        if quota is None:
            quota = _QUOTA_CACHE[key] = GPUQuota.from_config(self.gpu_quota)
        return quota.limit_for(self.user_groups())

    def gpu_idle_reclaim_rule(self) -> ReclaimRule | None:
        """The validated reclaim rule (None: off), checked once per distinct setting."""
        key = json.dumps(self.gpu_idle_reclaim, sort_keys=True, default=str)
        if key not in _RECLAIM_CACHE:
            _RECLAIM_CACHE[key] = ReclaimRule.from_config(self.gpu_idle_reclaim)
        return _RECLAIM_CACHE[key]

    def gpu_line_order(self) -> LineOrder:
        """How lines for GPUs are ordered (``line_order``, ``usage_half_life``), checked."""
        return LineOrder.from_config(self.line_order, self.usage_half_life, type(self).__name__)

    def gpu_budget_config(self) -> BudgetConfig | None:
        """The validated ``gpu_hours`` (None: no budgets), checked once per distinct setting."""
        key = json.dumps(self.gpu_hours, sort_keys=True, default=str)
        if key not in _BUDGET_CACHE:
            _BUDGET_CACHE[key] = BudgetConfig.from_config(self.gpu_hours)
        return _BUDGET_CACHE[key]

    async def gpu_budget_refusal(self, gpu_type: str, gpus: int) -> str | None:
        """The one budget check of GPU spawns and job grants: the 403 sentence when this
        user's GPU-hour budget is used up and the admin's ``at_limit`` does not let
        ``gpus`` of ``gpu_type`` (its key or display name) start now; None when they may."""
        config = self.gpu_budget_config()
        if config is None or not gpus:
            return None
        monitor = await gpu_monitor.started(self)
        if monitor is None:
            return None
        state = monitor.budget_state(self.user.name, self.user_groups())
        if state is None or not state.over:
            return None
        if config.at_limit == "idle_only" and await self.gpus_would_idle(gpu_type, gpus):
            self.log.info(
                "gpuhub: %s is over their GPU-hour budget (%s); %s GPUs of %s start as nobody "
                "waits for them",
                self.user.name,
                state.text,
                gpus,
                gpu_type,
            )
            return None
        self.log.warning("gpuhub: %s is over their GPU-hour budget: %s", self.user.name, state.text)
        return state.refusal()

    async def gpu_budget_json(self) -> dict[str, Any] | None:
        """This user's GPU-hour budget as the holdings answer says it (None: none applies,
        or the hub's monitor does not run)."""
        if self.gpu_budget_config() is None:
            return None
        monitor = await gpu_monitor.started(self)
        if monitor is None:
            return None
        state = monitor.budget_state(self.user.name, self.user_groups())
        if state is None:
            return None
        found = state.as_json()
        why = self.caps_not_enforced()
        found["enforced"] = not why
        if why:  # the form and the GPU sidebar show the text: they must not promise a cap
            found["text"] = f"{found['text']}; not enforced on this hub: {why}"
        return found

    def caps_not_enforced(self) -> str:
        """Why a server can lift the caps the hub sets it (its CPU and memory, its GPU-hour
        budget), said where those caps are shown; "" where it cannot."""
        return ""

    async def gpus_would_idle(self, gpu_type: str, gpus: int) -> bool:
        """Whether ``gpus`` GPUs of ``gpu_type`` (its key or display name) would otherwise stay
        idle now: free, and nobody waits for GPUs of that type (in line, in Kueue's queue, for
        a node)."""
        try:
            types = self.gpu_policy.gpu_types
            if gpu_type not in types:  # a job's grant names its type by display name
                gpu_type = next(k for k, t in types.items() if t.display_name == gpu_type)
            name = types[gpu_type].display_name
            ledger = await self.gpu_ledger()
            names = gpu_type_names(types)
            if any(named(h, names).gpu_type == name for h in ledger.holdings() if h.waiting):
                return False
            capacity = (await self.gpu_capacity())[0].get(gpu_type)
        except (KeyError, StopIteration, RuntimeError, web.HTTPError):
            return False
        if capacity is None or capacity.waiting:
            return False
        free = capacity.largest_free if capacity.largest_free is not None else capacity.free
        return free >= gpus

    def gpu_utilization_settings(self) -> dict[str, Any]:
        """Keyword arguments for the utilization source (the Kubernetes one's Prometheus)."""
        return {}

    def user_groups(self) -> list[str]:
        return [group.name for group in self.user.groups]

    def get_env(self) -> dict[str, str]:
        """Hand the policy and the user's groups to the server, for its jobs API and magics."""
        env: dict[str, str] = super().get_env()  # type: ignore[misc]  # Spawner.get_env
        env.update(policy_env(self.policy_config(), self.user_groups()))
        return env

    # -- progress -------------------------------------------------------------------------
    def assigned_gpus(self) -> list[int]:
        """Device indices this server holds (LocalGPUSpawner); empty where the cluster picks."""
        return list(getattr(self, "allocated_gpus", []) or [])

    def gpus_said(self) -> str:
        """ "GPUs 0, 1 (RTX A6000)" where the indices are known (local), else "2 NVIDIA A100
        80GB GPUs" (the cluster picks them); "" for a CPU-only server."""
        options = self.launch_options
        if options is None or options.gpu_type is None or not options.gpus:
            return ""
        devices = self.assigned_gpus()
        name = options.gpu_type.display_name
        if options.gpu_memory is not None:  # a share: "8 GB of GPU 3 (RTX 4090, shared)"
            where = words.device_list(devices, name) if devices else f"one {name}"
            return f"{human_memory(options.gpu_memory)} of {where}"
        if devices:
            return words.device_list(devices, name)
        return words.gpus(options.gpus, name)

    def starting_message(self) -> str:
        """ "GPUs 0, 1 (RTX A6000) assigned; starting your server": the spawn page's words."""
        if self.launch_options is None:
            return "Starting your server"
        said = self.gpus_said()
        return f"{said} assigned; starting your server" if said else "Starting your CPU-only server"

    async def progress(self) -> Any:
        """What JupyterHub's spawn page shows while the server starts (GPUSpawner has its own,
        from the cluster's events)."""
        yield {"progress": 50, "message": self.starting_message()}

    # -- hooks for the concrete spawners -------------------------------------------------
    async def profile_presets(self) -> list[Preset]:
        """Named presets over the form's fields (KubeSpawner's ``profile_list``)."""
        return []

    def extra_option_keys(self) -> set[str]:
        """``user_options`` keys another layer validates (KubeSpawner profile options)."""
        return set()

    def resource_enforcement(self) -> str:
        """What the form may promise of CPU and memory (:data:`gpuhub.hub.form.RESOURCES`):
        "guaranteed" where the platform reserves them (a pod's request = limit), "capped"
        where it only holds the server to them, "unenforced" where nothing does."""
        return "guaranteed"

    async def gpu_capacity(self) -> tuple[dict[str, GPUCapacity], str]:
        """Free/total GPUs per type for the form, and a note when figures are unavailable."""
        return {}, ""

    async def reserve_launch(self, options: LaunchOptions) -> None:
        """Reserve what valid options need to run here (GPUs, a place in line, a quota grant),
        or refuse (raise :func:`refusal`) what cannot run here now."""

    async def gpu_ledger(self, wait: float | None = None) -> Ledger:
        """The hub's GPU ledger this spawner counts in (see :mod:`gpuhub.hub.ledger.ledger`);
        ``wait``: how long a request that changes holdings may wait for the hub's first view
        of the cluster after its start."""
        raise NotImplementedError

    async def quota_view(self) -> QuotaView | None:
        """What this user holds against their quota, beside this server; None without a
        quota or when the ledger cannot be read now (the submit is checked anyway)."""
        limit = self.gpu_quota_limit()
        if limit is None:
            return None
        try:
            ledger = await self.gpu_ledger()
            held = ledger.holdings(self.user.name)
        except (web.HTTPError, RuntimeError):  # no ledger yet (cluster not answering)
            return None
        name = getattr(self, "name", "")
        others = tuple(h for h in held if (h.kind, h.name) != ("server", name))
        return QuotaView(limit, others)

    def apply_launch_options(self, options: LaunchOptions) -> None:
        """Turn validated options into spawner attributes."""
        raise NotImplementedError

    async def ensure_launch_options(self) -> LaunchOptions:
        """Validate in ``start()`` too, in case an admin replaced ``apply_user_options``."""
        if self.launch_options is None:
            await apply_gpuhub_options(self, self.user_options)
        assert self.launch_options is not None
        return self.launch_options


async def _render_options_form(spawner: GPUSpawnerMixin) -> str:
    # After a refused submit: that server's form, with what the user typed and what they
    # hold now, each sentence next to its field.
    target, refused = refused_server(spawner)
    capacity, note = await target.gpu_capacity()
    return render_form(
        target.gpu_policy,
        target.user_groups(),
        # Else the last ones a server started with (a refused spawn's are put back).
        refused.options if refused else target.user_options,
        presets=await target.profile_presets(),
        capacity=capacity,
        capacity_note=note,
        quota=await target.quota_view(),
        problems=refused.problems if refused else (),
        notice=refused.notice if refused else "",
        resources=target.resource_enforcement(),
        budget=await target.gpu_budget_json(),
    )


def _ready_event(spawner: GPUSpawnerMixin, event: dict[str, Any]) -> dict[str, Any]:
    """JupyterHub's "Server ready at …" names the GPUs too ("… with GPUs 0, 1 (RTX A6000)")."""
    said = spawner.gpus_said() or "no GPU (CPU only)"
    event["message"] = f"{event.get('message', 'Server ready')} with {said}"
    if event.get("html_message"):
        event["html_message"] = f"{event['html_message']} with {html.escape(said)}"
    return event


def options_from_form(formdata: Mapping[str, list[str]], spawner: Any = None) -> dict[str, Any]:
    """The form's posted fields to raw ``user_options`` (the default ``options_from_form``)."""
    return reshape(options_from_formdata, formdata, spawner)
