"""Servers run as the hub's own OS account (``run_as_hub_user``; demo and tests): a part of
:class:`gpuhub.hub.local_gpu_spawner.LocalGPUSpawner`.

Each user's home under ``home_dir_template``, the server joining its cgroup before it execs,
and the refusal to start such servers on a hub reachable beyond loopback unless the admin
acknowledged it.
"""

from __future__ import annotations

import ipaddress
import os
from typing import Any
from urllib.parse import urlparse

from gpuhub.hub.refusals import log_name, refusal
from gpuhub.hub.spawner_parts import LocalPart

SHARED_ACCOUNT_WARNING = (
    "All users' servers run as one OS account, so every user can read every other user's "
    "files and API tokens (and the hub's database and cookie secret)."
)


class SharedAccount(LocalPart):
    """Home, environment and arguments of a server run as the hub's own account."""

    @property
    def home_dir(self) -> str:
        return self.home_dir_template.format(username=self.user.name)

    def make_preexec_fn(self, name: str) -> Any:
        """Join the server's cgroup (before anything drops privileges: the user's account
        may not write cgroups), then become the user or go home as LocalProcessSpawner's or
        :meth:`_shared_account_preexec` says."""
        then = self._shared_account_preexec(name)
        cgroup, strict = self._gpuhub_cgroup, self.enforce_limits is True
        if cgroup is None:
            return then

        def preexec() -> None:
            try:
                cgroup.join(os.getpid())
            except OSError:
                if strict:
                    raise
            if then is not None:
                then()

        return preexec

    def _shared_account_preexec(self, name: str) -> Any:
        if not self.run_as_hub_user:
            return super().make_preexec_fn(name)
        self.check_shared_account_exposure()  # in the hub, before anything is started
        home = self.home_dir

        def preexec() -> None:
            # 0700: other OS accounts on the machine stay out (the hub's users share one).
            os.makedirs(home, 0o700, exist_ok=True)
            os.chmod(home, 0o700)
            os.chdir(home)

        return preexec

    def check_shared_account_exposure(self) -> None:
        """Refuse to start a shared-account server on a hub reachable beyond loopback, unless
        the admin has acknowledged what that means (``SHARED_ACCOUNT_WARNING``)."""
        if self.run_as_hub_user_acknowledge_shared_account:
            return
        host = public_host(self.config)
        if is_loopback(host):
            return
        where = host or "every address"
        self.log.error(
            "Refusing to start %s: run_as_hub_user on a hub listening on %s. %s",
            log_name(self),
            where,
            SHARED_ACCOUNT_WARNING,
        )
        raise refusal(
            f"This hub runs every server as one shared OS account and listens on {where}, so "
            "it will not start servers until the admin sets "
            "LocalGPUSpawner.run_as_hub_user_acknowledge_shared_account = True or binds "
            "JupyterHub.ip to 127.0.0.1.",
            403,
        )

    def user_env(self, env: dict[str, str]) -> dict[str, str]:
        if not self.run_as_hub_user:
            return super().user_env(env)
        env["USER"] = self.user.name
        env["HOME"] = self.home_dir
        env["SHELL"] = "/bin/bash"
        return env

    def get_args(self) -> list[str]:
        args = super().get_args()
        if self.run_as_hub_user and os.geteuid() == 0:
            # A hub run as root (containers, CI) runs servers as root too in this mode;
            # jupyter_server refuses that unless told it is deliberate.
            args.append("--ServerApp.allow_root=True")
        return args

    async def move_certs(self, paths: dict[str, str]) -> dict[str, str]:
        if self.run_as_hub_user:
            return paths
        return await super().move_certs(paths)


def public_host(config: Any) -> str:
    """The host JupyterHub's public proxy binds (``JupyterHub.bind_url``, else ``.ip``;
    JupyterHub's default, "", is every address)."""
    hub = config.get("JupyterHub", {}) if config is not None else {}
    if "bind_url" in hub:
        return urlparse(str(hub["bind_url"])).hostname or ""
    return str(hub.get("ip", "") or "")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
