"""The pods bound to the process node, run as local processes.

What a container gets, as on a kubelet: its ``command`` and ``args`` (``$(VAR)`` expanded),
its ``env`` and ``envFrom`` (values, ConfigMap and Secret keys, the downward API), its
volumes at their ``mountPath`` (:mod:`.volumes`), and its GPUs: a pod that asks for
``nvidia.com/gpu`` gets that many of the node's simulated devices, by index, in
``NVIDIA_VISIBLE_DEVICES`` and ``CUDA_VISIBLE_DEVICES``; a pod with ResourceClaims
(``spec.resourceClaims``) starts only once each is allocated and reserved for it, and each
container gets the devices its ``resources.claims`` were allocated (:mod:`.claims`); a
container that asks for none gets ``NVIDIA_VISIBLE_DEVICES=void`` and an empty
``CUDA_VISIBLE_DEVICES``. Every pod is told the
GPUs are simulated (``GPUHUB_SIMULATED_GPUS``, what gpuhub's lab reads on a workstation with
simulated GPUs). Each pod has its own
loopback address as its pod IP; because every pod shares this machine's network, a program
that binds ``0.0.0.0`` or ``::`` would take the port from every other pod, so each container
preloads a shim that turns such a bind into one on the pod IP (:mod:`.shim`, a documented
test-only rule). Each pod gets the kubelet's ``/etc/hosts`` and ``/etc/resolv.conf``
(:mod:`.hosts`: cluster DNS) and its namespace's Service variables; the node proxies
Services' ClusterIPs to its pods (:mod:`.services`).

A container without a ``command`` runs its ``args`` (as images whose entrypoint is an init
such as tini, ``exec "$@"``, do: KubeSpawner sets only ``args``).

What it does not do: images are not pulled (the image is ignored: programs come from this
machine, the test's virtualenv first on ``PATH``; a container with neither command nor args
runs only if its image is the pause image: :mod:`.images`); every container runs as the agent's own
user (``securityContext`` is not enforced); probes are not run (a started container is
ready); there are no cgroups, so CPU and memory limits are not enforced.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import logging
import os
import re
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuhub.core.env import SHARE_ENV, SHARE_MEMORY_ENV

from ..dra import SIMULATED_MEMORY
from ..processes import MARK, carrying
from . import probes
from .claims import ClaimsNotReady, Grant, claim_names, grants, reserved_for
from .hosts import (
    answers,
    cluster_names,
    hosts_file,
    names_of,
    pod_hostname,
    pod_name,
    resolv_conf,
    selects,
    write_in_place,
)
from .images import as_root_jupyter, entrypoint, missing_entrypoint, runs_as_non_root
from .kube import ApiError, Kube
from .logs import ContainerLog, timestamp
from .services import MASTER, ServiceProxy, pod_env_services, service_env, target_port
from .shim import POD_IP_ENV
from .volumes import VolumeNotReady, Volumes, VolumeUnsupported, can_mount, mount_script

log = logging.getLogger("gpuhub.node-agent")

GPU_RESOURCE = "nvidia.com/gpu"
BACKOFF_FIRST, BACKOFF_MAX = 10.0, 300.0  # the kubelet's crash-loop back-off


class NoLog(Exception):
    """A container log the node cannot give: the HTTP status and the kubelet's sentence."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Container:
    """One container of a running pod: its current process and its status."""

    spec: dict[str, Any]
    init: bool = False
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0
    logs: list[ContainerLog] = field(default_factory=list)
    state: dict[str, Any] = field(
        default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}}
    )
    last_state: dict[str, Any] = field(default_factory=dict)
    ready: bool = False
    # What its current process was given, for `kubectl exec` (process-kubelet asks: .server).
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ""
    stdin: Path | None = None  # the FIFO that is its stdin, where its spec asks for one

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def status(self) -> dict[str, Any]:
        running = self.process is not None and self.process.returncode is None
        return {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": f"process://{self.spec.get('image', '')}",
            "containerID": f"process://{self.process.pid}" if self.process else "",
            "ready": self.ready and running,
            "started": running,
            "restartCount": self.restarts,
            "state": self.state,
            "lastState": self.last_state,
        }


@dataclass
class PodRun:
    """What the agent keeps for one pod it runs."""

    pod: dict[str, Any]
    ip: str
    gpus: list[int]
    folder: Path
    containers: dict[str, Container] = field(default_factory=dict)
    init_containers: dict[str, Container] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    deleting: bool = False
    phase: str = "Pending"
    initialized: bool = False
    volumes: dict[str, Path] = field(default_factory=dict)
    # A pod with ResourceClaims: each container's devices, once its claims are reserved.
    claims: dict[str, Grant] | None = None
    message: str = ""
    reason: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return self.pod["metadata"]["namespace"], self.pod["metadata"]["name"]

    @property
    def uid(self) -> str:
        return str(self.pod["metadata"]["uid"])


def listening_addresses(table: Path = Path("/proc/net/tcp")) -> set[str]:
    """The IPv4 addresses with a listening TCP socket on this machine (Linux' table: the
    local address in hex, little-endian, state 0A = LISTEN)."""
    try:
        lines = table.read_text().splitlines()[1:]
    except OSError:
        return set()
    found = set()
    for line in lines:
        fields = line.split()
        if len(fields) > 3 and fields[3] == "0A":
            found.add(str(ipaddress.IPv4Address(bytes.fromhex(fields[1].split(":")[0])[::-1])))
    return found


def _host_resolv() -> str:
    """This machine's resolver configuration (a pod with ``dnsPolicy: Default`` gets it)."""
    try:
        return Path("/etc/resolv.conf").read_text()
    except OSError:
        return ""


def gpu_request(pod: dict[str, Any]) -> int:
    """GPUs a pod needs: the sum over its containers, or the largest init container's."""

    def count(containers: list[dict[str, Any]] | None) -> list[int]:
        return [
            int((c.get("resources") or {}).get("limits", {}).get(GPU_RESOURCE, 0) or 0)
            for c in containers or []
        ]

    spec = pod["spec"]
    return max(sum(count(spec.get("containers"))), max(count(spec.get("initContainers")) or [0]))


_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: known names are replaced, ``$$`` escapes."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _VAR.sub(replace, text)


class ProcessNode:
    """Runs the pods bound to ``name`` as local processes and reports their status."""

    def __init__(
        self,
        kube: Kube,
        name: str,
        folder: Path,
        *,
        gpus: int,
        apiserver_port: int,
        ip_range: str = "127.1.0.0/16",
        dra_gpus: int = 0,
        cluster_dns: str | None = None,
        names_file: Path | None = None,
        shim: Path | None = None,
    ) -> None:
        self.kube = kube
        self.name = name
        self.folder = folder
        self.apiserver_port = apiserver_port
        self.free_gpus = set(range(gpus))
        # The GPUs claimed through DRA come after those: the scheduler allocates them
        # (this node's ResourceSlice, published by __main__), the agent only hands them out.
        self.dra_memory = {i: SIMULATED_MEMORY for i in range(gpus, gpus + dra_gpus)}
        self.total_gpus = gpus + dra_gpus
        self.runs: dict[str, PodRun] = {}  # uid -> run
        self.by_key: dict[tuple[str, str], str] = {}
        network = ipaddress.ip_network(ip_range)
        self._ips = (str(ip) for ip in network.hosts())
        self._free_ips: list[str] = []
        # (pod uid, "configmaps"|"secrets", name) -> data, read once when the pod starts
        self._refs: dict[tuple[str, str, str], dict[str, str]] = {}
        self._deletions: set[asyncio.Task[None]] = set()
        self.services: dict[tuple[str, str], dict[str, Any]] = {}
        self.cluster_dns = cluster_dns  # the kube-dns ClusterIP pods' resolv.conf names
        self.names_file = names_file  # pods' names for cluster DNS (hosts.cluster_names)
        self.shim = shim  # the wildcard-bind shim every container preloads
        self.proxy = ServiceProxy(self._endpoints)
        # The virtualenv's programs, then npm's (configurable-http-proxy for z2jh's proxy pod).
        self.path = os.pathsep.join(
            [
                os.path.dirname(sys.executable),
                str(Path(__file__).resolve().parents[2] / "node_modules" / ".bin"),
                "/usr/local/bin",
                "/usr/bin",
                "/bin",
                "/usr/local/sbin",
                "/usr/sbin",
                "/sbin",
            ]
        )

    # -- the watch ---------------------------------------------------------------------------
    async def handle(self, kind: str, pod: dict[str, Any]) -> None:
        if kind == "SYNCED":
            return
        meta = pod["metadata"]
        uid = meta["uid"]
        run = self.runs.get(uid)
        if kind == "DELETED":
            if run is not None:
                await self._kill(run, grace=0)
                self._forget(run)
            return
        if run is not None:
            run.pod = pod
        if meta.get("deletionTimestamp"):
            if run is None:
                await self._finalise_delete(pod)
            elif not run.deleting:
                run.deleting = True
                self.refresh_names()  # a terminating pod leaves DNS at once, as endpoints do
                grace = float(meta.get("deletionGracePeriodSeconds", 30))
                self._deletions.add(task := asyncio.create_task(self._delete(run, grace)))
                task.add_done_callback(self._deletions.discard)
            return
        if run is None and pod["status"].get("phase") in ("Pending", "Running", None):
            if kind == "SYNC" and pod["status"].get("phase") == "Running":
                # This agent restarted: the pod's processes ended with the last agent.
                await self._report_lost(pod)
                return
            self._admit(pod)

    def service_event(self, kind: str, service: dict[str, Any]) -> None:
        """A Service changed: cluster DNS's pod names and the Service proxy follow."""
        if kind == "SYNCED":
            return
        key = (service["metadata"]["namespace"], service["metadata"]["name"])
        if kind == "DELETED":
            self.services.pop(key, None)
        else:
            self.services[key] = service
        self.refresh_names()
        self.proxy.update(list(self.services.values()))

    def refresh_names(self) -> None:
        """Rewrite the names cluster DNS serves from this node (see :mod:`.hosts`), or,
        without cluster DNS, each pod's hosts file with them."""
        names = [pod_name(run.pod, run.ip) for run in self.runs.values() if not run.deleting]
        services = self.services.values()
        if self.names_file is not None:
            write_in_place(self.names_file, cluster_names(names, services))
            return
        for run in list(self.runs.values()):
            me = pod_name(run.pod, run.ip)
            text = hosts_file(run.pod, run.ip) + cluster_names(names, services, me)
            write_in_place(run.folder / "hosts", text)

    def _endpoints(self, service: dict[str, Any], port: dict[str, Any]) -> list[tuple[str, int]]:
        """A Service port's ready endpoints on this node (see :mod:`.services`)."""
        meta = service["metadata"]
        if (meta["namespace"], meta["name"]) == MASTER:
            return [("127.0.0.1", self.apiserver_port)]
        selector = service["spec"].get("selector") or {}
        found = []
        for run in self.runs.values():
            pod = run.pod
            if (
                pod["metadata"]["namespace"] != meta["namespace"]
                or run.deleting
                or run.phase != "Running"
                or not selects(selector, pod["metadata"].get("labels") or {})
                or not all(c.status()["ready"] for c in run.containers.values())
            ):
                continue
            target = target_port(port, pod)
            if target is not None:
                found.append((run.ip, target))
        return found

    def _admit(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        need = gpu_request(pod)
        folder = self.folder / "pods" / meta["uid"]
        folder.mkdir(parents=True, exist_ok=True)
        gpus = sorted(self.free_gpus)[:need]
        run = PodRun(pod, self._allocate_ip(), gpus, folder)
        if pod["spec"].get("resourceClaims"):
            run.claims = {}
        self.runs[meta["uid"]] = run
        self.by_key[run.key] = meta["uid"]
        write_in_place(folder / "hosts", hosts_file(pod, run.ip))
        write_in_place(folder / "resolv.conf", resolv_conf(pod, self.cluster_dns, _host_resolv()))
        self.refresh_names()  # (without cluster DNS, this rewrites the hosts files)
        if len(gpus) < need:
            run.phase, run.reason = "Failed", "UnexpectedAdmissionError"
            run.message = (
                f"Allocate failed due to requested number of devices unavailable for "
                f"{GPU_RESOURCE}. Requested: {need}, Available: {len(self.free_gpus)}"
            )
            run.task = asyncio.create_task(self._report(run))
            return
        self.free_gpus -= set(gpus)
        spec = pod["spec"]
        run.init_containers = {
            c["name"]: Container(c, init=True) for c in spec.get("initContainers") or []
        }
        run.containers = {c["name"]: Container(c) for c in spec.get("containers") or []}
        run.task = asyncio.create_task(self._run(run))

    def _allocate_ip(self) -> str:
        """A loopback address for a new pod: one this node freed, else a new one; never one
        something already listens on (a pod of another cluster on this machine)."""
        taken = listening_addresses()
        while True:
            ip = self._free_ips.pop() if self._free_ips else next(self._ips)
            if ip not in taken:
                return ip

    def _release(self, run: PodRun) -> None:
        self.free_gpus |= set(run.gpus)
        run.gpus = []

    def _forget(self, run: PodRun) -> None:
        # Once only: a graceful delete (_delete) and the watch's DELETED event may both end
        # a run, and an address freed twice would be handed to two pods at once.
        if self.runs.get(run.uid) is not run:
            return
        self._release(run)
        self.runs.pop(run.uid, None)
        if self.by_key.get(run.key) == run.uid:
            del self.by_key[run.key]
        self._free_ips.append(run.ip)
        for key in [k for k in self._refs if k[0] == run.uid]:
            del self._refs[key]
        shutil.rmtree(run.folder, ignore_errors=True)
        self.refresh_names()

    def container_log(
        self, namespace: str, pod: str, container: str, previous: bool = False
    ) -> ContainerLog:
        """The container's log, or :class:`NoLog` saying why there is none, in the kubelet's
        words and status: 404 for a pod or container this node does not have, 400 for one
        that has not started yet (KubeSpawner, like kubectl, reads 404 as "gone")."""
        uid = self.by_key.get((namespace, pod))
        run = self.runs.get(uid or "")
        if run is None:
            raise NoLog(404, f'pod "{pod}" in namespace "{namespace}" does not run on this node')
        c = run.containers.get(container) or run.init_containers.get(container)
        if c is None:
            raise NoLog(404, f'container "{container}" is not in pod "{pod}"')
        if previous:
            if len(c.logs) > 1:
                return c.logs[-2]
            raise NoLog(
                400, f'previous terminated container "{container}" in pod "{pod}" not found'
            )
        if not c.logs:
            reason = (c.state.get("waiting") or {}).get("reason") or "ContainerCreating"
            raise NoLog(
                400, f'container "{container}" in pod "{pod}" is waiting to start: {reason}'
            )
        return c.logs[-1]

    # -- status and events -------------------------------------------------------------------
    def _status(self, run: PodRun) -> dict[str, Any]:
        now = timestamp()
        pod_status = run.pod.get("status") or {}
        old = {c["type"]: c for c in pod_status.get("conditions") or []}

        def condition(kind: str, ok: bool, reason: str = "") -> dict[str, Any]:
            previous = old.get(kind, {})
            status = "True" if ok else "False"
            changed = previous.get("status") != status
            out = {
                "type": kind,
                "status": status,
                "lastProbeTime": None,
                "lastTransitionTime": now if changed else previous.get("lastTransitionTime", now),
            }
            if reason and not ok:
                out["reason"] = reason
            return out

        containers = [c.status() for c in run.containers.values()]
        ready = bool(containers) and all(c["ready"] for c in containers)
        terminal = run.phase in ("Succeeded", "Failed")
        reason = "PodCompleted" if terminal else "ContainersNotReady"
        status: dict[str, Any] = {
            "phase": run.phase,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": run.ip,
            "podIPs": [{"ip": run.ip}],
            "startTime": pod_status.get("startTime") or now,
            "conditions": [
                condition("PodReadyToStartContainers", True),
                condition("Initialized", run.initialized, "ContainersNotInitialized"),
                condition("Ready", ready and not terminal, reason),
                condition("ContainersReady", ready and not terminal, reason),
                old.get("PodScheduled") or condition("PodScheduled", True),
            ],
            "containerStatuses": containers,
        }
        if run.init_containers:
            status["initContainerStatuses"] = [c.status() for c in run.init_containers.values()]
        if run.reason:
            status["reason"], status["message"] = run.reason, run.message
        return status

    async def _report(self, run: PodRun) -> None:
        namespace, name = run.key
        try:
            await self.kube.patch_status(namespace, name, self._status(run))
        except ApiError as error:
            if error.status != 404:
                log.warning("status of %s/%s: %s", namespace, name, error)

    async def event(
        self, run: PodRun, kind: str, reason: str, message: str, container: str | None = None
    ) -> None:
        meta = run.pod["metadata"]
        now = timestamp()
        involved = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
            "resourceVersion": meta.get("resourceVersion", ""),
        }
        if container:
            involved["fieldPath"] = f"spec.containers{{{container}}}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            # Named as the kubelet's recorder names them, "<pod>.<UnixNano in hex>": clients
            # that sort events by their second-resolution time (KubeSpawner's progress) and
            # break ties by name then see them in the order they happened.
            "metadata": {
                "name": f"{meta['name']}.{time.time_ns():x}",
                "namespace": meta["namespace"],
            },
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": "kubelet", "host": self.name},
            "reportingComponent": "kubelet",
            "reportingInstance": self.name,
            "firstTimestamp": now[:19] + "Z",
            "lastTimestamp": now[:19] + "Z",
            "count": 1,
        }
        with contextlib.suppress(ApiError):
            await self.kube.request("POST", f"/api/v1/namespaces/{meta['namespace']}/events", body)

    async def _report_lost(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        status = dict(pod["status"])
        status["phase"] = "Failed"
        status["reason"] = "NodeAgentRestarted"
        status["message"] = "The process node's agent restarted; the pod's processes ended with it."
        with contextlib.suppress(ApiError):
            await self.kube.patch_status(meta["namespace"], meta["name"], status)

    # -- running -----------------------------------------------------------------------------
    async def _run(self, run: PodRun) -> None:
        try:
            if run.claims is not None:
                await self._prepare_claims(run)
            await self._prepare_volumes(run)
            await self._load_refs(run)
            await self._names_served(run)
            if run.deleting:
                return
            if run.init_containers:
                # As the kubelet says of app containers while init containers run.
                for container in run.containers.values():
                    container.state = {"waiting": {"reason": "PodInitializing"}}
            for container in run.init_containers.values():
                while True:
                    code = await self._start_and_wait(run, container)
                    if code == 0 or run.deleting:
                        break
                    if run.pod["spec"].get("restartPolicy", "Always") == "Never":
                        run.phase = "Failed"
                        await self._report(run)
                        self._release(run)
                        return
                    await self._back_off(run, container)
                if run.deleting:
                    return
            run.initialized = True
            await asyncio.gather(*(self._supervise(run, c) for c in run.containers.values()))
            if run.deleting:
                return
            codes = [
                c.state.get("terminated", {}).get("exitCode", 1) for c in run.containers.values()
            ]
            run.phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
            await self._report(run)
            self._release(run)
        except VolumeUnsupported as error:
            run.phase, run.reason, run.message = "Failed", "UnsupportedVolume", str(error)
            await self.event(run, "Warning", "FailedMount", str(error))
            await self._report(run)
            self._release(run)
        except Exception:  # one pod's surprise must not stop the node
            log.exception("pod %s/%s", *run.key)
            run.phase, run.reason = "Failed", "NodeAgentError"
            run.message = "The process node's agent failed to run this pod; see its log."
            await self._report(run)
            self._release(run)

    async def _prepare_claims(self, run: PodRun) -> None:
        """Wait until each of the pod's claims is allocated and reserved for it, as the
        kubelet does, then note each container's devices."""
        warned = False
        namespace = run.pod["metadata"]["namespace"]
        while not run.deleting:
            try:
                claims = {}
                for name, claim_name in claim_names(run.pod).items():
                    if claim_name is None:
                        continue  # the pod does not need this claim
                    try:
                        claim = await self.kube.request(
                            "GET",
                            f"/apis/resource.k8s.io/v1/namespaces/{namespace}"
                            f"/resourceclaims/{claim_name}",
                        )
                    except ApiError as error:
                        if error.status != 404:
                            raise
                        raise ClaimsNotReady(f"the ResourceClaim {claim_name}, not found") from None
                    if not reserved_for(claim, run.uid):
                        raise ClaimsNotReady(
                            f"the ResourceClaim {claim_name} to be allocated and reserved for it"
                        )
                    claims[name] = claim
                run.claims = grants(run.pod, claims, self.name, self.dra_memory)
                return
            except ClaimsNotReady as waiting:
                if not warned:
                    await self.event(
                        run,
                        "Warning",
                        "FailedPrepareDynamicResources",
                        f"The pod waits for {waiting}.",
                    )
                    await self._report(run)
                    warned = True
                await asyncio.sleep(0.5)

    async def _names_served(self, run: PodRun, timeout: float = 10) -> None:
        """Wait until cluster DNS serves the pod's names, as its network is set up before
        its containers start (CoreDNS rereads this node's names file on a timer)."""
        if self.cluster_dns is None or self.names_file is None:
            return
        names = names_of(run.ip, self.names_file.read_text())
        if not names:
            return
        deadline = asyncio.get_running_loop().time() + timeout
        while not await asyncio.to_thread(answers, self.cluster_dns, names[0]):
            if run.deleting or asyncio.get_running_loop().time() > deadline:
                log.warning(
                    "cluster DNS does not answer %s yet; pod %s/%s starts", names[0], *run.key
                )
                return
            await asyncio.sleep(0.1)

    async def _prepare_volumes(self, run: PodRun) -> None:
        volumes = Volumes(self.kube, run.pod, run.folder, self.apiserver_port)
        warned = False
        while not run.deleting:
            try:
                run.volumes = await volumes.materialise()
                return
            except VolumeNotReady as error:
                if not warned:
                    await self.event(
                        run,
                        "Warning",
                        "FailedMount",
                        f"MountVolume.SetUp failed: {error}",
                    )
                    await self._report(run)
                    warned = True
                await asyncio.sleep(1)

    async def _supervise(self, run: PodRun, container: Container) -> None:
        policy = run.pod["spec"].get("restartPolicy", "Always")
        while not run.deleting:
            code = await self._start_and_wait(run, container)
            if run.deleting:
                return
            if policy == "Never" or (policy == "OnFailure" and code == 0):
                return
            await self._back_off(run, container)

    async def _back_off(self, run: PodRun, container: Container) -> None:
        delay = min(BACKOFF_FIRST * 2 ** max(container.restarts - 1, 0), BACKOFF_MAX)
        container.restarts += 1
        container.last_state = container.state
        container.state = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off {delay:.0f}s restarting failed container={container.name} "
                f"pod={run.pod['metadata']['name']}_{run.pod['metadata']['namespace']}"
                f"({run.uid})",
            }
        }
        await self._report(run)
        await self.event(
            run,
            "Warning",
            "BackOff",
            f"Back-off restarting failed container {container.name} in pod "
            f"{run.pod['metadata']['name']}_{run.pod['metadata']['namespace']}({run.uid})",
            container.name,
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._until_deleting(run), delay)

    async def _until_deleting(self, run: PodRun) -> None:
        while not run.deleting:
            await asyncio.sleep(0.2)

    def _environment(self, run: PodRun, spec: dict[str, Any]) -> dict[str, str]:
        pod = run.pod
        meta = pod["metadata"]
        # The kubelet's Service links first: the pod's own env may override them.
        env: dict[str, str] = service_env(pod_env_services(self.services, pod))
        env |= {
            "PATH": self.path,
            "HOSTNAME": meta["name"],
            "HOME": str(run.folder / "home"),
            "LANG": "C.UTF-8",
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.apiserver_port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(self.apiserver_port),
            "KUBERNETES_PORT": f"tcp://127.0.0.1:{self.apiserver_port}",
        }
        if "GPUHUB_CLUSTER" in os.environ:  # so `make cluster-down` finds pod processes too
            env["GPUHUB_CLUSTER"] = os.environ["GPUHUB_CLUSTER"]
        if self.shim is not None:  # a bind to 0.0.0.0 or :: becomes one on the pod IP
            env[POD_IP_ENV] = run.ip
            env["LD_PRELOAD"] = str(self.shim)
        if os.geteuid() == 0 and runs_as_non_root(pod, spec):  # its user here is root
            env["JUPYTER_CONFIG_PATH"] = as_root_jupyter(run.folder / "as-root-jupyter")
        (run.folder / "home").mkdir(exist_ok=True)
        for source in spec.get("envFrom") or []:
            prefix = source.get("prefix", "")
            if "configMapRef" in source:
                data = self._lookup("configmaps", source["configMapRef"]["name"], run)
            else:
                data = self._lookup("secrets", source.get("secretRef", {}).get("name", ""), run)
            env.update({prefix + k: v for k, v in data.items()})
        for item in spec.get("env") or []:
            if "valueFrom" not in item:
                value = expand(str(item.get("value", "")), env)
            else:
                value = self._value_from(run, item["valueFrom"], spec)
            env[item["name"]] = value
        given = {i["name"] for i in spec.get("env") or []}
        gpus = run.gpus
        if run.claims is not None:
            grant = run.claims.get(spec["name"]) or Grant()
            gpus = grant.devices
            if grant.share is not None and grant.share_memory is not None:
                # A share of one device's memory, told as gpuhub tells a pod its share
                # (gpuhub.core.holder_env), unless the pod says so itself.
                if SHARE_ENV not in given:
                    env[SHARE_ENV] = str(grant.share)
                if SHARE_MEMORY_ENV not in given:
                    env[SHARE_MEMORY_ENV] = str(grant.share_memory)
        devices = ",".join(str(g) for g in gpus)
        env["NVIDIA_VISIBLE_DEVICES"] = devices or "void"
        # This node's GPUs are simulated: gpuhub's lab then charts them as it does a
        # workstation's simulated GPUs (their processes' CPU and memory), saying "simulated".
        env["GPUHUB_SIMULATED_GPUS"] = str(self.total_gpus)
        if "CUDA_VISIBLE_DEVICES" not in given:
            env["CUDA_VISIBLE_DEVICES"] = devices
        return env

    def _lookup(self, plural: str, name: str, run: PodRun) -> dict[str, str]:
        """ConfigMap or Secret data read when the pod started (see _load_refs)."""
        return self._refs.get((run.uid, plural, name), {})

    async def _load_refs(self, run: PodRun) -> None:
        """Read every ConfigMap and Secret the pod's env refers to, once, before it starts."""
        wanted: set[tuple[str, str]] = set()
        for spec in [
            *(run.pod["spec"].get("initContainers") or []),
            *run.pod["spec"]["containers"],
        ]:
            for source in spec.get("envFrom") or []:
                if "configMapRef" in source:
                    wanted.add(("configmaps", source["configMapRef"]["name"]))
                elif "secretRef" in source:
                    wanted.add(("secrets", source["secretRef"]["name"]))
            for item in spec.get("env") or []:
                ref = item.get("valueFrom") or {}
                if "configMapKeyRef" in ref:
                    wanted.add(("configmaps", ref["configMapKeyRef"]["name"]))
                elif "secretKeyRef" in ref:
                    wanted.add(("secrets", ref["secretKeyRef"]["name"]))
        namespace = run.pod["metadata"]["namespace"]
        for plural, name in wanted:
            try:
                obj = await self.kube.request(
                    "GET", f"/api/v1/namespaces/{namespace}/{plural}/{name}"
                )
            except ApiError as error:
                if error.status != 404:
                    raise
                continue
            data = obj.get("data") or {}
            if plural == "secrets":
                data = {k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()}
            self._refs[(run.uid, plural, name)] = data

    def _value_from(self, run: PodRun, source: dict[str, Any], spec: dict[str, Any]) -> str:
        pod = run.pod
        meta = pod["metadata"]
        if "fieldRef" in source:
            path = source["fieldRef"].get("fieldPath", "")
            simple = {
                "metadata.name": meta["name"],
                "metadata.namespace": meta["namespace"],
                "metadata.uid": meta["uid"],
                "spec.nodeName": self.name,
                "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
                "status.podIP": run.ip,
                "status.podIPs": run.ip,
                "status.hostIP": "127.0.0.1",
                "status.hostIPs": "127.0.0.1",
            }
            if path in simple:
                return str(simple[path])
            match = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
            if match:
                return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
            return ""
        if "resourceFieldRef" in source:
            ref = source["resourceFieldRef"]
            kind, _, resource = ref.get("resource", "").partition(".")
            target = spec
            if ref.get("containerName"):
                target = next(
                    (c for c in pod["spec"]["containers"] if c["name"] == ref["containerName"]),
                    spec,
                )
            return str((target.get("resources") or {}).get(kind, {}).get(resource, ""))
        for key, plural in (("configMapKeyRef", "configmaps"), ("secretKeyRef", "secrets")):
            if key in source:
                ref = source[key]
                return self._lookup(plural, ref["name"], run).get(ref["key"], "")
        return ""

    async def _start_and_wait(self, run: PodRun, container: Container) -> int:
        """Start one run of ``container``, wait for it to end; returns its exit code."""
        spec = container.spec
        env = self._environment(run, spec)
        argv = [expand(a, env) for a in [*(spec.get("command") or []), *(spec.get("args") or [])]]
        argv = argv or entrypoint(spec)  # the pause image pauses
        if not argv:
            container.state = {
                "waiting": {
                    "reason": "CreateContainerError",
                    "message": missing_entrypoint(container.name, spec.get("image", "")),
                }
            }
            await self._report(run)
            await self._until_deleting(run)
            return 1
        log_file = ContainerLog(run.folder / f"{container.name}-{container.restarts}.log")
        container.logs.append(log_file)
        image = spec.get("image", "")
        if not container.restarts:
            await self.event(
                run,
                "Normal",
                "Pulled",
                f'Container image "{image}" already present on machine',
                container.name,
            )
        mounts = spec.get("volumeMounts") or []
        workdir = spec.get("workingDir")
        cwd = str(run.folder / "home")
        if mounts and not can_mount():
            raise VolumeUnsupported(
                "the process node mounts volumes in a private mount namespace, which needs "
                "root; run the cluster as root"
            )
        if "/" not in argv[0] and shutil.which(argv[0], path=env["PATH"]) is None:
            now = timestamp()[:19] + "Z"
            container.state = {
                "terminated": {
                    "exitCode": 127,
                    "reason": "StartError",
                    "message": f'exec: "{argv[0]}": executable file not found in $PATH',
                    "startedAt": now,
                    "finishedAt": now,
                }
            }
            log_file.close()
            await self._report(run)
            return 127
        if can_mount():
            script = run.folder / f"{container.name}.sh"
            script.write_text(
                mount_script(
                    spec,
                    run.volumes,
                    workdir,
                    run.folder / "hosts",
                    run.folder / "resolv.conf",
                    pod_hostname(run.pod),
                    stage=run.folder / "mounts" / container.name,
                )
            )
            # Its own mount namespace (volumes) and UTS namespace (the pod's host name).
            namespaces = ["unshare", "--mount", "--uts", "--propagation", "private"]
            argv = [*namespaces, "sh", str(script), *argv]
        container.env, container.cwd = env, (workdir if workdir and can_mount() else cwd)
        stdin = self._stdin(run, container)
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                env=env,
                cwd=cwd,
                stdin=stdin,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as error:
            container.state = {
                "terminated": {
                    "exitCode": 128,
                    "reason": "StartError",
                    "message": str(error),
                    "startedAt": timestamp()[:19] + "Z",
                    "finishedAt": timestamp()[:19] + "Z",
                }
            }
            log_file.close()
            await self._report(run)
            return 128
        finally:
            if stdin != asyncio.subprocess.DEVNULL:
                os.close(stdin)  # the container holds it now
        container.process = process
        started = timestamp()[:19] + "Z"
        container.state = {"running": {"startedAt": started}}
        probe = None if container.init else spec.get("readinessProbe")
        container.ready = not container.init and not probes.runs(probe)
        await self.event(
            run, "Normal", "Created", f"Created container: {container.name}", container.name
        )
        await self.event(
            run, "Normal", "Started", f"Started container {container.name}", container.name
        )
        if run.initialized or container.init:
            if not container.init:
                run.phase = "Running"
            await self._report(run)
        pumps = [
            asyncio.create_task(self._pump(process.stdout, "stdout", log_file)),
            asyncio.create_task(self._pump(process.stderr, "stderr", log_file)),
        ]
        prober = None
        if probe is not None and probes.runs(probe):
            prober = asyncio.create_task(
                probes.readiness(
                    probe,
                    run.ip,
                    spec,
                    lambda ok: self._set_ready(run, container, ok),
                    lambda why: self.event(run, "Warning", "Unhealthy", why, container.name),
                )
            )
        code = await process.wait()
        if prober is not None:
            prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await prober
        await asyncio.gather(*pumps)
        log_file.close()
        exit_code = code if code >= 0 else 128 - code
        terminated = {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": started,
            "finishedAt": timestamp()[:19] + "Z",
            "containerID": f"process://{process.pid}",
        }
        if code < 0:
            terminated["signal"] = -code
        container.state = {"terminated": terminated}
        container.ready = False
        if not run.deleting:
            await self._report(run)
        return exit_code

    async def _set_ready(self, run: PodRun, container: Container, ready: bool) -> None:
        """Its readiness probe passed or failed (probes.py): the pod's status says so."""
        if container.process is None or container.process.returncode is not None:
            return
        container.ready = ready
        if not run.deleting and run.initialized:
            await self._report(run)

    @staticmethod
    def _stdin(run: PodRun, container: Container) -> int:
        """A container whose spec asks for ``stdin`` reads a FIFO that `kubectl attach`
        writes to (process-kubelet); it holds it open read-write, so it never reads end of
        file when a client detaches (``stdinOnce`` is not honoured). Others get none."""
        if not container.spec.get("stdin"):
            return asyncio.subprocess.DEVNULL
        if container.stdin is None:
            container.stdin = run.folder / f"{container.name}.stdin"
            os.mkfifo(container.stdin)
        return os.open(container.stdin, os.O_RDWR)

    @staticmethod
    async def _pump(stream: asyncio.StreamReader | None, name: str, out: ContainerLog) -> None:
        assert stream is not None
        while chunk := await stream.read(65536):
            out.write(name, chunk)

    # -- ending ------------------------------------------------------------------------------
    async def _kill(self, run: PodRun, grace: float) -> None:
        processes = [
            c.process
            for c in [*run.init_containers.values(), *run.containers.values()]
            if c.process is not None and c.process.returncode is None
        ]
        strays = self._strays(run)
        for process in processes:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM if grace > 0 else signal.SIGKILL)
        for pid in strays:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM if grace > 0 else signal.SIGKILL)
        if grace > 0 and processes:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(*(p.wait() for p in processes)), timeout=grace
                )
        for process in processes:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
        for pid in self._strays(run):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if processes:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(p.wait() for p in processes)), 10)

    @staticmethod
    def _strays(run: PodRun) -> list[int]:
        """The pod's processes that left its containers' process groups (a program started in
        a session of its own, as JupyterHub starts configurable-http-proxy): in a container
        they end with it, and here one would keep the pod IP's ports when the pod is gone.
        Found by the pod IP and cluster mark in their environment (with the shim)."""
        if not run.ip or not os.environ.get(MARK):
            return []
        return carrying(f"{POD_IP_ENV}={run.ip}", f"{MARK}={os.environ[MARK]}")

    async def _delete(self, run: PodRun, grace: float) -> None:
        """A graceful delete: stop the containers, then remove the pod (the kubelet's job)."""
        for container in run.containers.values():
            if container.process is not None and container.process.returncode is None:
                await self.event(
                    run, "Normal", "Killing", f"Stopping container {container.name}", container.name
                )
        await self._kill(run, grace)
        if run.task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(run.task, 10)
        await self._finalise_delete(run.pod)
        self._forget(run)

    async def _finalise_delete(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": meta["uid"]},
        }
        try:
            await self.kube.request(
                "DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", body
            )
        except ApiError as error:
            if error.status not in (404, 409):
                log.warning("deleting %s/%s: %s", meta["namespace"], meta["name"], error)

    async def shutdown(self) -> None:
        """The agent stops: every pod's processes end with it."""
        await self.proxy.close()
        for run in list(self.runs.values()):
            run.deleting = True
        await asyncio.gather(*(self._kill(run, grace=5) for run in list(self.runs.values())))
