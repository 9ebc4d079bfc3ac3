"""What the hub gave each workstation server, signed, in the environment of its processes.

``LocalGPUSpawner`` starts every server with ``GPUHUB_LAUNCH``: who it is for, which launch
(``GPUHUB_SERVER_ID``), which devices and which GPU type, signed with a key derived from the
hub's cookie secret. Every process the server starts inherits it (kernels, local jobs,
``nohup`` runs), and it outlives the server. A user can copy it, never change it.

A process counts for a launch only on :class:`Proof`: that grant, and the OS account the
launch's user's servers run as (each user's own, or the hub's with ``run_as_hub_user``).
Nothing else a process says about itself (``JUPYTERHUB_USER``, ``GPUHUB_SERVER_ID``) is
believed: any process can set those. The one check serves everything that asks whose a
process is:

* the device book's rebuild when its file (``LocalGPUSpawner.ledger_file``) is lost or
  damaged (:meth:`GPUAllocator.open <gpuhub.hub.ledger.device_book.GPUAllocator.open>`):
  every live process with a proven grant keeps the devices it was given and can see, held
  for its user and server, so no GPU a live process uses is handed out again;
* the processes a stopped server leaves running (``LocalGPUSpawner``'s survivors);
* whose GPU memory a shared device's processes use, for the over-share watch
  (:mod:`gpuhub.hub.monitor.utilization`): memory no proven holder explains is reported to
  the admin, never charged to anyone.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
from dataclasses import dataclass, field

from gpuhub.core.devices import visible_devices
from gpuhub.core.env import JOB_ID_ENV, LAUNCH_ENV

log = logging.getLogger(__name__)

_VERSION = "1"

Process = tuple[int, float]  # (pid, psutil create_time): a pid alone may be reused


@dataclass(frozen=True)
class Launch:
    """One server launch's grant of devices."""

    user: str
    server: str
    launch: str  # the launch's random id, also its processes' GPUHUB_SERVER_ID
    devices: tuple[int, ...]
    gpu_type: str = ""
    # A share of a GPU shared by memory: bytes given, of a device of device_memory bytes.
    gpu_memory: int = 0
    device_memory: int = 0


@dataclass(frozen=True)
class RunningProcess:
    """A live process that carries a valid grant."""

    process: Process
    launch: Launch
    visible: frozenset[int] | None  # devices its CUDA_VISIBLE_DEVICES lists; None: unknown
    command: str
    job: str = ""  # the gpuhub job it is part of (GPUHUB_JOB_ID), "" for none


def launch_key(secret: bytes | str) -> bytes:
    """The signing key, derived from the hub's cookie secret (stable across restarts)."""
    raw = secret.encode() if isinstance(secret, str) else bytes(secret)
    return hmac.new(raw, b"gpuhub launch grant", hashlib.sha256).digest()


def sign(key: bytes, launch: Launch) -> str:
    fields: list[object] = [
        launch.user,
        launch.server,
        launch.launch,
        list(launch.devices),
        launch.gpu_type,
    ]
    if launch.gpu_memory:  # a share; a grant of whole devices reads as it always did
        fields += [launch.gpu_memory, launch.device_memory]
    payload = json.dumps(fields, separators=(",", ":")).encode()
    body = base64.urlsafe_b64encode(payload).decode().rstrip("=")
    return f"{_VERSION}.{body}.{_mac(key, body)}"


def verify(key: bytes, value: str | None) -> Launch | None:
    """The grant in ``value`` if the hub signed it with ``key``; None otherwise."""
    if not value or value.count(".") != 2:
        return None
    version, body, mac = value.split(".")
    if version != _VERSION or not hmac.compare_digest(mac, _mac(key, body)):
        return None
    try:
        fields = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        user, server, launch, devices, gpu_type = fields[:5]
        memory, device_memory = fields[5:7] if len(fields) == 7 else (0, 0)
        return Launch(
            str(user),
            str(server),
            str(launch),
            tuple(int(d) for d in devices),
            str(gpu_type),
            int(memory),
            int(device_memory),
        )
    except (ValueError, TypeError):
        return None


def _mac(key: bytes, body: str) -> str:
    digest = hmac.new(key, body.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def device_set(visible: str | None) -> frozenset[int] | None:
    """Device indices in a ``CUDA_VISIBLE_DEVICES`` value; None when it is unset or names
    devices another way (UUIDs), since then the process may see any of its server's GPUs."""
    devices = visible_devices(visible)
    if devices is None or not all(isinstance(d, int) for d in devices):
        return None
    return frozenset(d for d in devices if isinstance(d, int))


@dataclass(frozen=True)
class Proof:
    """What makes a process count for a launch: the grant the hub signed with ``key`` in its
    environment, and that it runs as the OS account its user's servers run as. A user can
    copy their own processes' grant, never forge one, and cannot read another OS account's
    environment; with ``shared_account`` (``run_as_hub_user``: every server runs as the hub's
    own account, where every user can read every other's processes) the account proves
    only that a process is one of the hub's servers'."""

    key: bytes
    shared_account: bool = False
    _accounts: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def account(self, user: str) -> int | None:
        """The uid ``user``'s servers run as (None: no such OS account)."""
        if self.shared_account:
            return os.getuid()
        uid = self._accounts.get(user)
        if uid is None:
            import pwd

            try:
                uid = self._accounts[user] = pwd.getpwnam(user).pw_uid
            except KeyError:
                return None  # not remembered: the account may be made later
        return uid

    def launch(self, grant: str | None, uid: int | None) -> Launch | None:
        """The launch a process whose environment carries ``grant`` (``GPUHUB_LAUNCH``) and
        that runs as ``uid`` (its real uid) proves it belongs to; None without proof."""
        launch = verify(self.key, grant)
        if launch is None or uid is None or uid != self.account(launch.user):
            return None
        return launch


def running(proof: Proof) -> list[RunningProcess]:
    """Every live process that proves a grant (:class:`Proof`; blocking: one pass over the
    machine's processes; the hub does it once, when it opens its book)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "create_time", "environ", "cmdline", "status", "uids"]):
        info = proc.info
        env = info.get("environ") or {}
        if LAUNCH_ENV not in env or info.get("status") == psutil.STATUS_ZOMBIE:
            continue
        uids = info.get("uids")
        launch = proof.launch(env.get(LAUNCH_ENV), uids.real if uids is not None else None)
        if launch is None:
            continue
        found.append(
            RunningProcess(
                (info["pid"], info["create_time"]),
                launch,
                device_set(env.get("CUDA_VISIBLE_DEVICES")),
                command_line(info.get("cmdline")),
                str(env.get(JOB_ID_ENV) or ""),
            )
        )
    return found


def command_line(argv: list[str] | None, limit: int = 80) -> str:
    """A process's command line, shortened for the fleet page and the metrics."""
    text = " ".join(argv or [])
    return text if len(text) <= limit else text[: limit - 1] + "…"
