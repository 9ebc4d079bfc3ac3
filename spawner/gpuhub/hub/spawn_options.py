"""What a spawn asks for, from the form, a spawn link or the REST API, checked on one path.

The form's posted fields and a link's ``?opt-…`` options are reshaped into raw
``user_options`` (:func:`reshape`); :func:`apply_gpuhub_options` (the spawners' default
``apply_user_options``) validates them against the policy, the named-server limit and the
GPU-hour budget, then has the spawner reserve what they need. A spawn link that was not
followed from the hub's own pages (:func:`link_from_the_hub`) starts nothing: the form asks
first (:func:`hold_link`). Each refusal is said as :mod:`gpuhub.hub.refusals` says it.
"""

from __future__ import annotations

import inspect
import posixpath
from collections.abc import Callable, Mapping
from copy import deepcopy
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from tornado import web

from gpuhub.core import words
from gpuhub.core.options import LaunchOptions, OptionsError, parse_launch_options
from gpuhub.core.policy import Policy
from gpuhub.hub.form import Preset
from gpuhub.hub.refusals import (
    forget_refused_options,
    log_name,
    log_refusal,
    quiet_refusals,
    refusal,
    remember_refusal,
    said_once,
)


class OptionsSpawner(Protocol):
    """What the validation path reads of a spawner (:class:`gpuhub.hub.spawner_mixin.GPUSpawnerMixin`
    provides it), said here so that this module needs nothing above it."""

    log: Any
    name: str
    launch_options: LaunchOptions | None
    _gpuhub_accepted: Any

    @property
    def gpu_policy(self) -> Policy: ...

    def user_groups(self) -> list[str]: ...

    async def profile_presets(self) -> list[Preset]: ...

    def extra_option_keys(self) -> set[str]: ...

    async def gpu_budget_refusal(self, gpu_type: str, gpus: int) -> str | None: ...

    async def reserve_launch(self, options: LaunchOptions) -> None: ...

    def apply_launch_options(self, options: LaunchOptions) -> None: ...


async def parse(spawner: OptionsSpawner, user_options: object) -> LaunchOptions:
    """The one validation path, with this spawner's policy, groups and presets."""
    return parse_launch_options(
        user_options,
        spawner.gpu_policy,
        spawner.user_groups(),
        presets={p.slug: p.values for p in await spawner.profile_presets()},
        ignore=spawner.extra_option_keys(),
    )


async def apply_gpuhub_options(spawner: OptionsSpawner, user_options: Mapping[str, Any]) -> None:
    """Default ``Spawner.apply_user_options``: validate against the policy, then apply."""
    try:
        options = await parse(spawner, user_options)
    except OptionsError as exc:
        log_refusal(spawner, exc.message)
        kept = remember_refusal(spawner, user_options, exc.problems)
        forget_refused_options(spawner)
        raise said_once(refusal(exc.message), kept, exc.problems) from None
    try:
        await check_named_server_limit(spawner)
        await check_budget(spawner, options)
        await spawner.reserve_launch(options)
    except BaseException as exc:
        message = getattr(exc, "jupyterhub_message", None)
        if isinstance(exc, web.HTTPError) and message:
            log_refusal(spawner, message)
            field = "gpus" if exc.status_code in (403, 409) else ""
            problems = ((field, message),)
            said_once(exc, remember_refusal(spawner, user_options, problems), problems)
        forget_refused_options(spawner)
        raise
    spawner.launch_options = options
    spawner.apply_launch_options(options)
    spawner._gpuhub_accepted = deepcopy(user_options)


async def check_budget(spawner: OptionsSpawner, options: LaunchOptions) -> None:
    """Refuse a GPU spawn (403) over the user's GPU-hour budget
    (:meth:`GPUSpawnerMixin.gpu_budget_refusal`); CPU-only servers are never refused."""
    if options.gpu_type is None or not options.gpus:
        return
    message = await spawner.gpu_budget_refusal(options.gpu_type.key, options.gpus)
    if message is not None:
        raise refusal(message, status=403)


async def check_named_server_limit(spawner: Any) -> None:
    """Refuse a named server beyond ``JupyterHub.named_server_limit_per_user`` running or
    waiting to start (in line for GPUs too). JupyterHub checks it only when the REST API
    creates a server's record, not when the form starts one or starts it again, so without
    this a user could fill the GPU line with as many named servers as they like."""
    user = getattr(spawner, "user", None)
    if not spawner.name or user is None:
        return
    limit = user.settings.get("named_server_limit_per_user", 0)
    if callable(limit):
        handler = getattr(spawner, "handler", None)
        if handler is None:
            return  # JupyterHub's own check asks the callable with the request
        limit = limit(handler)
        if inspect.isawaitable(limit):
            limit = await limit
    if not isinstance(limit, int) or limit <= 0:
        return
    others = [
        name
        for name, other in getattr(user, "spawners", {}).items()
        if name and name != spawner.name and other.active
    ]
    if len(others) >= limit:
        raise refusal(
            f"You already have {words.plural(len(others), 'named server')} running or "
            f"waiting to start ({', '.join(sorted(others))}), the most this hub allows at "
            f"once; stop one before starting {spawner.name!r}."
        )


def reshape(
    reshaper: Callable[[Mapping[str, list[str]]], dict[str, Any]],
    formdata: Mapping[str, list[str]],
    spawner: Any,
) -> dict[str, Any]:
    """Posted fields or a link's options to raw ``user_options``; a refusal here (an empty
    custom image) is said and remembered for the form as the validation's are."""
    try:
        return reshaper(formdata)
    except OptionsError as exc:
        if spawner is not None:
            log_refusal(spawner, exc.message)
            typed = {k: v[0] for k, v in formdata.items() if v and isinstance(v[0], str)}
            remember_refusal(spawner, typed, exc.problems, pages=True)
        raise refusal(exc.message) from None


# -- spawn links ------------------------------------------------------------------------------
def link_from_the_hub(request: Any, hub_prefix: str) -> bool:
    """Whether a spawn link was followed from one of the hub's own pages: the page it was on
    (``Referer``) is under the hub's prefix (``/hub/``) on the hub's own host.

    Browsers say where a navigation comes from in ``Sec-Fetch-Site``: ``cross-site`` and
    ``same-site`` are other sites, ``none`` a typed address or a bookmark. ``same-origin`` is
    not enough: without ``subdomain_host`` every user's server shares the hub's origin, so
    ``/user/carol/files/evil.html`` is same-origin too; only the ``Referer`` says which page
    it was, and a link whose page is not said (no Referer) is not the hub's. The scheme is
    left out, as a TLS proxy in front of the hub need not say it. (A page on the hub's
    origin can also script the hub's own pages; only ``subdomain_host`` keeps servers off
    it: docs/admin-guide.md.)"""
    headers = getattr(request, "headers", None)
    if headers is None:
        return False
    site = headers.get("Sec-Fetch-Site")
    if site is not None and site.strip().lower() != "same-origin":
        return False
    referer = urlparse(headers.get("Referer", ""))
    host = str(getattr(request, "host", "") or "")
    if not referer.netloc or referer.netloc.lower() != host.lower():
        return False
    # "/hub/../user/carol/x" and its %-escaped spellings are not under the prefix.
    path = posixpath.normpath(unquote(referer.path))
    prefix = hub_prefix.rstrip("/")
    return bool(prefix) and (path == prefix or path.startswith(prefix + "/"))


def hub_prefix(spawner: Any) -> str:
    """The path the hub's own pages are under (``/hub/``, or ``/<base_url>/hub/``)."""
    hub = getattr(spawner, "hub", None)
    return str(getattr(hub, "base_url", "") or "/hub/")


async def hold_link(spawner: Any, options: Mapping[str, Any]) -> web.HTTPError:
    """A spawn link from outside the hub: nothing starts. The form JupyterHub renders next
    shows what the link asks for and says why nothing started; the user's own submit, which
    carries JupyterHub's XSRF token, starts it. Options no submit could start are refused
    here as they would be there, naming the field."""
    try:
        await parse(spawner, options)
    except OptionsError as exc:
        log_refusal(spawner, exc.message)
        remember_refusal(spawner, options, exc.problems, pages=True)
        return refusal(exc.message)
    server = f"your server {spawner.name!r}" if spawner.name else "your server"
    notice = (
        f"Nothing has started yet: this link to start {server} came from outside the hub. "
        "Check the options below and press Start to start it with them."
    )
    quiet_refusals(spawner.log).recent.append(notice)
    headers = getattr(getattr(spawner.handler, "request", None), "headers", {}) or {}
    spawner.log.info(
        "Spawn link for %s from outside the hub (Sec-Fetch-Site: %s): the form asks first",
        log_name(spawner),
        headers.get("Sec-Fetch-Site", "absent"),
    )
    remember_refusal(spawner, options, (), notice, pages=True)
    # JupyterHub renders the form after a failed link with the error's status and message:
    # 200 and no message of its own (the notice is in the form, not in red as an error).
    held = web.HTTPError(200, "%s", notice)
    held.jupyterhub_message = ""  # type: ignore[attr-defined]
    return held
