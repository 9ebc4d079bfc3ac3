"""The private members of KubeSpawner and JupyterHub that gpuhub still relies on.

There is no public hook for these, so gpuhub overrides or calls them as they are in the
versions it was written against. An upgrade that renames one, changes its signature or
makes it sync/async would break gpuhub quietly (an override nobody calls any more, a call
that raises at spawn time); this test fails first, naming the member, what gpuhub does
with it, and the installed version that changed it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from importlib.metadata import version

import pytest
from jupyterhub.services.auth import HubAuthenticated
from kubespawner import KubeSpawner


@dataclass(frozen=True)
class Pin:
    owner: type
    member: str
    parameters: tuple[str, ...]
    is_async: bool
    distribution: str
    written_against: str
    used_by: str

    @property
    def name(self) -> str:
        return f"{self.owner.__name__}.{self.member}"


PINS = [
    Pin(KubeSpawner, "_start", ("self",), True, "jupyterhub-kubespawner", "7.1.0",
        "GPUSpawner._start overrides it to end a spawn with a sentence before start_timeout "
        "and to release the quota grant when the spawn fails"),
    Pin(KubeSpawner, "_make_create_pod_request", ("self", "pod", "request_timeout"), True,
        "jupyterhub-kubespawner", "7.1.0",
        "GPUSpawner overrides it to retry 429/5xx and to tell admission refusals in words"),
    Pin(KubeSpawner, "_make_delete_pod_request",
        ("self", "pod_name", "delete_options", "grace_seconds", "request_timeout"), True,
        "jupyterhub-kubespawner", "7.1.0", "GPUSpawner overrides it to retry 429/5xx"),
    Pin(KubeSpawner, "_get_initialized_profile_list", ("self", "profile_list"), False,
        "jupyterhub-kubespawner", "7.1.0",
        "GPUSpawner.profile_presets reads profile_list through it (slugs, defaults filled in)"),
    Pin(KubeSpawner, "_start_watching_events", ("self", "replace"), True,
        "jupyterhub-kubespawner", "7.1.0",
        "GPUSpawner.progress starts the event watch with it, as KubeSpawner.progress does"),
]  # fmt: skip


@pytest.mark.parametrize("pin", PINS, ids=lambda pin: pin.name)
def test_private_member_is_as_gpuhub_uses_it(pin: Pin) -> None:
    installed = version(pin.distribution)
    where = (
        f"{pin.name} is private {pin.distribution} API that gpuhub relies on ({pin.used_by}); "
        f"it was written against {pin.distribution} {pin.written_against}, and "
        f"{pin.distribution} {installed} is installed"
    )
    member = getattr(pin.owner, pin.member, None)
    assert callable(member), f"{where}: the member is gone. Find its replacement and adapt."
    parameters = tuple(inspect.signature(member).parameters)
    assert parameters == pin.parameters, (
        f"{where}: its parameters changed from {pin.parameters} to {parameters}. Adapt the "
        "override or call, then update this pin."
    )
    assert inspect.iscoroutinefunction(member) == pin.is_async, (
        f"{where}: it is {'no longer' if pin.is_async else 'now'} a coroutine function. "
        "Adapt the override or call, then update this pin."
    )


def test_kubespawner_start_keeps_the_future_progress_watches() -> None:
    """GPUSpawner.progress stops when ``self._start_future`` (set by KubeSpawner.start, the
    future of ``_start``) is done, as KubeSpawner.progress does."""
    source = inspect.getsource(KubeSpawner.start)
    assert "self._start_future" in source and "self._start()" in source, (
        "KubeSpawner.start no longer keeps self._start_future = ensure_future(self._start()) "
        f"(jupyterhub-kubespawner {version('jupyterhub-kubespawner')} is installed; gpuhub was "
        "written against 7.1.0): GPUSpawner.progress and GPUSpawner._start rely on both."
    )


def test_hub_authenticated_caches_the_user_where_the_service_sets_it() -> None:
    """The jobs service authenticates asynchronously and stores the user model where
    HubAuthenticated.get_current_user looks for it: ``self._hub_auth_user_cache``."""
    source = inspect.getsource(HubAuthenticated.get_current_user)
    assert "_hub_auth_user_cache" in source, (
        "HubAuthenticated.get_current_user no longer reads self._hub_auth_user_cache "
        f"(jupyterhub {version('jupyterhub')} is installed; gpuhub was written against 5.5.4): "
        "gpuhub.service.app.JobsHandler.authenticate sets it, so adapt that."
    )
