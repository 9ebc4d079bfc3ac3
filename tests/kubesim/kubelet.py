"""The kubelets of all simulated nodes: container lifecycle, status, events and logs.

Containers are simulated: they "pull", start and keep running until the test says how they
end (:meth:`Kubelet.finish`) or the pod is deleted. A container whose command the test
allows (:attr:`Kubelet.run_locally`, e.g. ``jupyterhub-singleuser``) really runs as a local
process with the pod's environment, bound to the pod's own loopback IP (a wildcard
``0.0.0.0`` inside the pod's network namespace means the pod IP), so a hub can reach it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import probes, storage
from .events import Recorder
from .store import Obj, Store, now

RunLocally = Callable[[Obj, Obj], bool]


@dataclass
class LogBuffer:
    """One container's log: timestamped lines, and a way to wait for more."""

    lines: list[tuple[str, str]] = field(default_factory=list)
    closed: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    _partial: str = ""

    def write(self, text: str) -> None:
        text = self._partial + text
        *complete, self._partial = text.split("\n")
        stamp = (
            time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{time.time_ns() % 10**9:09d}Z"
        )
        self.lines.extend((stamp, line + "\n") for line in complete)
        self.changed.set()
        self.changed = asyncio.Event()

    def close(self) -> None:
        if self._partial:
            self.write("\n")
        self.closed = True
        self.changed.set()


@dataclass
class Running:
    """What the kubelet keeps per started pod."""

    pod_key: tuple[str, str]
    ip: str
    task: asyncio.Task[None] | None = None
    processes: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)
    workdir: str | None = None
    finished: dict[str, int] = field(default_factory=dict)


def default_run_locally(pod: Obj, container: Obj) -> bool:
    return False


class Kubelet:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.recorder = Recorder(store, "kubelet")
        self.pods: dict[tuple[str, str], Running] = {}
        self.logs: dict[tuple[str, str, str], LogBuffer] = {}
        self.pull_seconds: dict[str, float] = {}  # image -> simulated pull time
        self.default_pull_seconds = 0.05
        self.failing_images: set[str] = set()
        self.run_locally: RunLocally = default_run_locally
        self.cues: dict[
            tuple[str, str], tuple[int, float, str]
        ] = {}  # (ns, job) -> exit, after, log
        self.termination_seconds = 0.0  # how long a simulated container takes to stop on SIGTERM
        self.retry_seconds = 0.1  # how often a blocked pod (volumes, config) is looked at again
        self._next_ip = int(ipaddress.ip_address("127.1.0.1"))
        self._free_ips: list[str] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        store.listeners.append(self._on_change)

    # -- wiring ---------------------------------------------------------------------------
    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _on_change(self, rt: Any, kind: str, obj: Obj, old: Obj | None) -> None:
        if rt.kind != "Pod":
            return
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        if kind == "DELETED":
            self._spawn(self._cleanup(key, meta["uid"]))
            return
        running = self.pods.get(key)
        if meta.get("deletionTimestamp"):
            if not (old or {}).get("metadata", {}).get("deletionTimestamp"):
                self._spawn(self._terminate(key, meta.get("deletionGracePeriodSeconds", 30)))
            return
        if (
            obj["spec"].get("nodeName")
            and running is None
            and obj["status"].get("phase") == "Pending"
        ):
            running = self.pods[key] = Running(key, self._allocate_ip())
            running.task = self._spawn(self._start(key))

    def _allocate_ip(self) -> str:
        if self._free_ips:
            return self._free_ips.pop()
        ip = str(ipaddress.ip_address(self._next_ip))
        self._next_ip += 1
        return ip

    def _pod(self, key: tuple[str, str]) -> Obj | None:
        return self.store.peek(self.store.by_kind("Pod"), *key)

    def _update(self, key: tuple[str, str], change: Callable[[Obj], None]) -> Obj | None:
        if self._pod(key) is None:
            return None
        return self.store.mutate(self.store.by_kind("Pod"), key[0], key[1], change)

    def log(self, namespace: str, pod: str, container: str) -> LogBuffer:
        return self.logs.setdefault((namespace, pod, container), LogBuffer())

    # -- start ----------------------------------------------------------------------------
    async def _start(self, key: tuple[str, str]) -> None:
        pod = self._pod(key)
        if pod is None:
            return
        node_name = pod["spec"]["nodeName"]
        running = self.pods[key]
        node = self.store.peek(self.store.by_kind("Node"), "", node_name)
        host_ip = next(
            (
                a["address"]
                for a in (node or {}).get("status", {}).get("addresses", [])
                if a["type"] == "InternalIP"
            ),
            "",
        )
        await asyncio.sleep(0)
        mounted = await self._blocked(
            key,
            lambda p: storage.mount_problem(self.store, p),
            "FailedMount",
            "ContainerCreating",
            host_ip,
        )
        if not mounted:
            return
        pod = self._pod(key) or pod
        containers = pod["spec"]["containers"]
        for n, container in enumerate(containers):
            name, image = container["name"], container["image"]
            path = f"spec.containers{{{name}}}"
            present = image in _node_images(node)
            if present and container.get("imagePullPolicy") != "Always":
                self.recorder.emit(
                    pod,
                    "Normal",
                    "Pulled",
                    f'Container image "{image}" already present on machine',
                    field_path=path,
                    host=node_name,
                )
            else:
                self.recorder.emit(
                    pod,
                    "Normal",
                    "Pulling",
                    f'Pulling image "{image}"',
                    field_path=path,
                    host=node_name,
                )
                if n == 0:
                    self._update(key, lambda o: _waiting(o, "ContainerCreating", host_ip))
                started = time.monotonic()
                await asyncio.sleep(self.pull_seconds.get(image, self.default_pull_seconds))
                if self._pod(key) is None or self._pod(key)["metadata"].get("deletionTimestamp"):  # type: ignore[index]
                    return
                if image in self.failing_images:
                    self._image_pull_failed(key, pod, container, node_name, host_ip)
                    return
                took = time.monotonic() - started
                self.recorder.emit(
                    pod,
                    "Normal",
                    "Pulled",
                    f'Successfully pulled image "{image}" in {took:.3f}s ({took:.3f}s including waiting). Image size: 1073741824 bytes.',
                    field_path=path,
                    host=node_name,
                )
                self._remember_image(node_name, image)
            configured = await self._blocked(
                key,
                lambda p, c=container: storage.config_problem(self.store, p, c),
                "Failed",
                "CreateContainerConfigError",
                host_ip,
                field_path=path,
                prefix="Error: ",
            )
            if not configured:
                return
            self.recorder.emit(
                pod,
                "Normal",
                "Created",
                f"Created container {name}",
                field_path=path,
                host=node_name,
            )
            if self.run_locally(pod, container):
                try:
                    await self._run_process(running, pod, container)
                except OSError as exc:
                    self.recorder.emit(
                        pod,
                        "Warning",
                        "Failed",
                        f"Error: failed to start container {name!r}: {exc}",
                        field_path=path,
                        host=node_name,
                    )
                    running.finished[name] = 128
                    self._update(key, lambda o: _terminated(o, running, 128, "StartError"))
                    return
            self.recorder.emit(
                pod,
                "Normal",
                "Started",
                f"Started container {name}",
                field_path=path,
                host=node_name,
            )
        probed = [c for c in containers if c.get("readinessProbe")]
        unready = {c["name"]: False for c in probed}
        self._update(key, lambda o: (_running(o, running.ip, host_ip), _set_ready(o, unready)))
        for container in probed:
            self._spawn(self._probe(key, running, container))
        labels = pod["metadata"].get("labels") or {}
        job = labels.get("batch.kubernetes.io/job-name") or labels.get(
            "training.kubeflow.org/job-name"
        )
        if job and (key[0], job) in self.cues:
            exit_code, after, text = self.cues[(key[0], job)]
            await asyncio.sleep(after)
            self.finish(key[0], key[1], exit_code, text)

    async def _blocked(
        self,
        key: tuple[str, str],
        check: Callable[[Obj], str | None],
        event_reason: str,
        waiting_reason: str,
        host_ip: str,
        *,
        field_path: str | None = None,
        prefix: str = "",
    ) -> bool:
        """Wait while ``check(pod)`` names a problem, as the kubelet retries its sync: a Warning
        event per new problem and the containers waiting with ``waiting_reason``. False if the
        pod went away (or is being deleted) meanwhile."""
        last: str | None = None
        while True:
            pod = self._pod(key)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                return False
            problem = check(pod)
            if problem is None:
                return True
            if problem != last:
                message = None if waiting_reason == "ContainerCreating" else problem
                self._update(key, lambda o, m=message: _waiting(o, waiting_reason, host_ip, m))
                self.recorder.emit(
                    pod,
                    "Warning",
                    event_reason,
                    prefix + problem,
                    field_path=field_path,
                    host=pod["spec"].get("nodeName"),
                )
                last = problem
            await asyncio.sleep(self.retry_seconds)

    async def _probe(self, key: tuple[str, str], running: Running, container: Obj) -> None:
        """Run one container's readiness probe for as long as it runs (see :mod:`.probes`)."""
        probe = container["readinessProbe"]
        name = container["name"]
        period = float(probe.get("periodSeconds") or 10)
        needed = {
            True: int(probe.get("successThreshold") or 1),
            False: int(probe.get("failureThreshold") or 3),
        }
        await asyncio.sleep(float(probe.get("initialDelaySeconds") or 0))
        ready, streak, last_result = False, 0, None
        while True:
            pod = self._pod(key)
            if (
                pod is None
                or pod["metadata"].get("deletionTimestamp")
                or self.pods.get(key) is not running
                or name in running.finished
            ):
                return
            local = name in running.processes
            failure = await probes.check(probe, container, running.ip) if local else None
            passed = failure is None
            streak = streak + 1 if passed == last_result else 1
            last_result = passed
            if failure is not None:
                self.recorder.emit(
                    pod,
                    "Warning",
                    "Unhealthy",
                    f"Readiness probe failed: {failure}",
                    field_path=f"spec.containers{{{name}}}",
                    host=pod["spec"].get("nodeName"),
                )
            if passed != ready and streak >= needed[passed]:
                ready = passed
                self._update(key, lambda o, r=ready: _set_ready(o, {name: r}))
            await asyncio.sleep(period)

    def _image_pull_failed(
        self, key: tuple[str, str], pod: Obj, container: Obj, node: str, host_ip: str
    ) -> None:
        image, path = container["image"], f"spec.containers{{{container['name']}}}"
        self.recorder.emit(
            pod,
            "Warning",
            "Failed",
            f'Failed to pull image "{image}": rpc error: code = NotFound desc = failed to pull and unpack image "{image}": failed to resolve reference "{image}": {image}: not found',
            field_path=path,
            host=node,
        )
        self.recorder.emit(
            pod, "Warning", "Failed", "Error: ErrImagePull", field_path=path, host=node
        )
        self.recorder.emit(
            pod,
            "Normal",
            "BackOff",
            f'Back-off pulling image "{image}"',
            field_path=path,
            host=node,
        )
        self.recorder.emit(
            pod, "Warning", "Failed", "Error: ImagePullBackOff", field_path=path, host=node
        )
        self._update(
            key,
            lambda o: _waiting(o, "ImagePullBackOff", host_ip, f'Back-off pulling image "{image}"'),
        )

    def _remember_image(self, node_name: str, image: str) -> None:
        rt = self.store.by_kind("Node")
        if self.store.peek(rt, "", node_name) is None:
            return

        def add(o: Obj) -> None:
            images = o["status"].setdefault("images", [])
            if not any(image in i.get("names", []) for i in images):
                images.append({"names": [image], "sizeBytes": 1073741824})

        self.store.mutate(rt, "", node_name, add)

    # -- local processes ------------------------------------------------------------------
    def exec_target(self, pod: Obj, container: str) -> tuple[dict[str, str], str] | None:
        """The environment and working directory a command exec'd into ``container`` gets,
        if kubesim runs that container as a live local process (else None)."""
        running = self.pods.get((pod["metadata"]["namespace"], pod["metadata"]["name"]))
        process = running.processes.get(container) if running is not None else None
        if running is None or process is None or process.returncode is not None:
            return None
        spec = next(c for c in pod["spec"]["containers"] if c["name"] == container)
        env = self._environment(pod, spec, running.ip)
        env["HOME"] = running.workdir or ""
        return env, running.workdir or "/"

    def _environment(self, pod: Obj, container: Obj, ip: str) -> dict[str, str]:
        env = {
            "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]),
            "HOSTNAME": pod["metadata"]["name"],
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "LANG": "C.UTF-8",
        }
        secrets, configmaps = self.store.by_kind("Secret"), self.store.by_kind("ConfigMap")
        ns = pod["metadata"]["namespace"]
        for item in container.get("env") or []:
            if "value" in item:
                value = str(item["value"])
            else:
                source = item.get("valueFrom") or {}
                value = ""
                if "fieldRef" in source:
                    value = _field_ref(pod, source["fieldRef"].get("fieldPath", ""), ip)
                elif "secretKeyRef" in source:
                    ref = source["secretKeyRef"]
                    secret = self.store.peek(secrets, ns, ref.get("name", "")) or {}
                    data = (secret.get("data") or {}).get(ref.get("key", ""))
                    value = base64.b64decode(data).decode() if data else ""
                elif "configMapKeyRef" in source:
                    ref = source["configMapKeyRef"]
                    cm = self.store.peek(configmaps, ns, ref.get("name", "")) or {}
                    value = (cm.get("data") or {}).get(ref.get("key", ""), "")
            env[item["name"]] = value.replace("0.0.0.0", ip)
        return env

    async def _run_process(self, running: Running, pod: Obj, container: Obj) -> None:
        argv = [*(container.get("command") or []), *(container.get("args") or [])]
        argv = [a.replace("0.0.0.0", running.ip) for a in argv]
        env = self._environment(pod, container, running.ip)
        executable = shutil.which(argv[0], path=env["PATH"]) or argv[0]
        if running.workdir is None:
            running.workdir = tempfile.mkdtemp(prefix=f"kubesim-{pod['metadata']['name']}-")
        env["HOME"] = running.workdir
        buffer = self.log(pod["metadata"]["namespace"], pod["metadata"]["name"], container["name"])
        process = await asyncio.create_subprocess_exec(
            executable,
            *argv[1:],
            env=env,
            cwd=running.workdir,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        running.processes[container["name"]] = process
        self._spawn(self._follow(running, container["name"], process, buffer))

    async def _follow(
        self, running: Running, name: str, process: asyncio.subprocess.Process, buffer: LogBuffer
    ) -> None:
        assert process.stdout is not None
        while chunk := await process.stdout.read(65536):
            buffer.write(chunk.decode(errors="replace"))
        code = await process.wait()
        buffer.close()
        pod = self._pod(running.pod_key)
        deleting = pod is None or bool(pod["metadata"].get("deletionTimestamp"))
        if running.pod_key in self.pods and name not in running.finished and not deleting:
            running.finished[name] = code if code >= 0 else 128 - code
            self._update(
                running.pod_key, lambda o: _terminated(o, running, running.finished[name], None)
            )
            self._back_off(running.pod_key)

    # -- ending -----------------------------------------------------------------------------
    def finish(self, namespace: str, name: str, exit_code: int = 0, logs: str = "") -> None:
        """The containers of a simulated pod exit with ``exit_code`` (after writing ``logs``)."""
        key = (namespace, name)
        running = self.pods.get(key)
        pod = self._pod(key)
        if running is None or pod is None:
            raise KeyError(f"pod {namespace}/{name} is not running on any node")
        for container in pod["spec"]["containers"]:
            buffer = self.log(namespace, name, container["name"])
            if logs:
                buffer.write(logs if logs.endswith("\n") else logs + "\n")
            buffer.close()
            running.finished[container["name"]] = exit_code
        self._update(key, lambda o: _terminated(o, running, exit_code, None))
        self._back_off(key)

    def _back_off(self, key: tuple[str, str]) -> None:
        """The kubelet's ``BackOff`` event for each container now in CrashLoopBackOff."""
        pod = self._pod(key)
        if pod is None:
            return
        for status in pod["status"].get("containerStatuses") or []:
            if (status.get("state") or {}).get("waiting", {}).get("reason") == "CrashLoopBackOff":
                meta = pod["metadata"]
                self.recorder.emit(
                    pod,
                    "Warning",
                    "BackOff",
                    f"Back-off restarting failed container {status['name']} in pod "
                    f"{meta['name']}_{meta['namespace']}({meta['uid']})",
                    field_path=f"spec.containers{{{status['name']}}}",
                    host=pod["spec"].get("nodeName"),
                )

    async def _terminate(self, key: tuple[str, str], grace: int) -> None:
        pod = self._pod(key)
        running = self.pods.get(key)
        if pod is not None and running is not None:
            for container in pod["spec"]["containers"]:
                self.recorder.emit(
                    pod,
                    "Normal",
                    "Killing",
                    f"Stopping container {container['name']}",
                    field_path=f"spec.containers{{{container['name']}}}",
                    host=pod["spec"].get("nodeName"),
                )
            if running.task is not None and not running.task.done():
                running.task.cancel()
            await _stop_processes(running, grace)
            await asyncio.sleep(min(self.termination_seconds, grace))
            if self._pod(key) is not None:
                # The last status the kubelet writes: every container terminated, a terminal phase.
                self._update(key, lambda o: _killed(o, running))
        pod = self._pod(key)
        if pod is not None:
            self.store.remove(self.store.by_kind("Pod"), pod)

    async def _cleanup(self, key: tuple[str, str], uid: str) -> None:
        running = self.pods.pop(key, None)
        if running is None:
            return
        if running.task is not None and not running.task.done():
            running.task.cancel()
        await _stop_processes(running, 0)
        for name in list(self.logs):
            if name[:2] == key:
                self.logs[name].close()
                del self.logs[name]
        if running.workdir:
            shutil.rmtree(running.workdir, ignore_errors=True)
        self._free_ips.append(running.ip)

    async def shutdown(self) -> None:
        for running in list(self.pods.values()):
            await _stop_processes(running, 2)
            if running.workdir:
                shutil.rmtree(running.workdir, ignore_errors=True)
        for task in list(self._tasks):
            task.cancel()


async def _stop_processes(running: Running, grace: float) -> None:
    for process in running.processes.values():
        if process.returncode is not None:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), timeout=max(grace, 0.5))
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()


def _node_images(node: Obj | None) -> set[str]:
    return {n for i in (node or {}).get("status", {}).get("images", []) for n in i.get("names", [])}


def _field_ref(pod: Obj, path: str, ip: str) -> str:
    meta, spec = pod["metadata"], pod["spec"]
    if path.startswith("metadata.labels['") or path.startswith("metadata.annotations['"):
        section, _, rest = path.partition("['")
        return str((meta.get(section.split(".")[1]) or {}).get(rest.rstrip("']"), ""))
    return {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta["uid"],
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": ip,
        "status.hostIP": "",
    }.get(path, "")


def _conditions(ready: bool, stamp: str) -> list[Obj]:
    status = "True" if ready else "False"
    return [
        {
            "type": "PodReadyToStartContainers",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": stamp,
        },
        {
            "type": "Initialized",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": stamp,
        },
        {"type": "Ready", "status": status, "lastProbeTime": None, "lastTransitionTime": stamp},
        {
            "type": "ContainersReady",
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": stamp,
        },
        {
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": stamp,
        },
    ]


def _container_status(container: Obj, state: Obj, ready: bool) -> Obj:
    return {
        "name": container["name"],
        "image": container["image"],
        "imageID": "",
        "state": state,
        "lastState": {},
        "ready": ready,
        "restartCount": 0,
        "started": "running" in state,
        **(
            {
                "containerID": f"containerd://{abs(hash((container['name'], container['image']))):064x}"[
                    :77
                ]
            }
            if "waiting" not in state
            else {}
        ),
    }


def _waiting(pod: Obj, reason: str, host_ip: str, message: str | None = None) -> None:
    status = pod["status"]
    stamp = now()
    status.update(
        hostIP=host_ip, hostIPs=[{"ip": host_ip}], startTime=status.get("startTime") or stamp
    )
    status["conditions"] = _conditions(False, stamp)
    waiting = {"reason": reason, **({"message": message} if message else {})}
    status["containerStatuses"] = [
        _container_status(c, {"waiting": waiting}, False) for c in pod["spec"]["containers"]
    ]


def _running(pod: Obj, ip: str, host_ip: str) -> None:
    status = pod["status"]
    stamp = now()
    status.update(
        phase="Running",
        podIP=ip,
        podIPs=[{"ip": ip}],
        hostIP=host_ip,
        hostIPs=[{"ip": host_ip}],
        startTime=status.get("startTime") or stamp,
    )
    status["conditions"] = _conditions(True, stamp)
    status["containerStatuses"] = [
        _container_status(c, {"running": {"startedAt": stamp}}, True)
        for c in pod["spec"]["containers"]
    ]


def _set_ready(pod: Obj, readiness: dict[str, bool]) -> None:
    """Set the named containers' ``ready``; the pod is Ready when all its containers are."""
    if not readiness:
        return
    status = pod["status"]
    for entry in status.get("containerStatuses") or []:
        if entry["name"] in readiness and "running" in (entry.get("state") or {}):
            entry["ready"] = readiness[entry["name"]]
    ready = all(e.get("ready") for e in status.get("containerStatuses") or [])
    stamp = now()
    for condition in status.get("conditions") or []:
        value = "True" if ready else "False"
        if condition["type"] in ("Ready", "ContainersReady") and condition["status"] != value:
            condition["status"] = value
            condition["lastTransitionTime"] = stamp


SIGTERM_EXIT = 143  # 128 + SIGTERM: how a simulated container ends when its pod is deleted


def _killed(pod: Obj, running: Running) -> None:
    """A deleted pod's final status: running containers terminated (a local process's own exit
    code, else 143), phase Succeeded if all exited 0, else Failed."""
    status = pod["status"]
    stamp = now()
    codes = []
    statuses = []
    for previous in status.get("containerStatuses") or []:
        state = previous.get("state") or {}
        entry = dict(previous, ready=False, started=False)
        if "running" in state:
            process = running.processes.get(previous["name"])
            code = running.finished.get(previous["name"])
            if code is None and process is not None and process.returncode is not None:
                code = process.returncode if process.returncode >= 0 else 128 - process.returncode
            code = SIGTERM_EXIT if code is None else code
            entry["state"] = {
                "terminated": {
                    "exitCode": code,
                    "reason": "Completed" if code == 0 else "Error",
                    "startedAt": state["running"].get("startedAt", stamp),
                    "finishedAt": stamp,
                }
            }
            codes.append(code)
        elif "terminated" in state:
            codes.append(state["terminated"].get("exitCode", 0))
        statuses.append(entry)
    status["containerStatuses"] = statuses
    for condition in status.get("conditions") or []:
        if condition["type"] in ("Ready", "ContainersReady") and condition["status"] != "False":
            condition["status"] = "False"
            condition["lastTransitionTime"] = stamp
    if status.get("phase") not in ("Succeeded", "Failed"):
        status["phase"] = "Succeeded" if codes and all(c == 0 for c in codes) else "Failed"


def _terminated(pod: Obj, running: Running, exit_code: int, reason: str | None) -> None:
    status = pod["status"]
    stamp = now()
    policy = pod["spec"].get("restartPolicy", "Always")
    labels = pod["metadata"].get("labels") or {}
    owned = "batch.kubernetes.io/job-name" in labels or "training.kubeflow.org/job-name" in labels
    if owned and policy == "OnFailure":
        policy = "Never"  # container restarts are not simulated: a job's pod fails outright
    statuses = []
    all_done = True
    for container in pod["spec"]["containers"]:
        code = running.finished.get(container["name"])
        previous = next(
            (s for s in status.get("containerStatuses") or [] if s["name"] == container["name"]),
            None,
        )
        started = ((previous or {}).get("state", {}).get("running") or {}).get("startedAt", stamp)
        if code is None:
            all_done = False
            statuses.append(
                previous or _container_status(container, {"running": {"startedAt": stamp}}, True)
            )
            continue
        terminated = {
            "exitCode": code,
            "reason": reason or ("Completed" if code == 0 else "Error"),
            "startedAt": started,
            "finishedAt": stamp,
        }
        if policy == "Always" or (policy == "OnFailure" and code != 0):
            # The kubelet would restart it; kubesim leaves it in back-off (see README).
            entry = _container_status(
                container,
                {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": f"back-off 10s restarting failed container={container['name']} pod={pod['metadata']['name']}",
                    }
                },
                False,
            )
            entry["lastState"] = {"terminated": terminated}
            entry["restartCount"] = 1
            all_done = False
        else:
            entry = _container_status(container, {"terminated": terminated}, False)
        statuses.append(entry)
    status["containerStatuses"] = statuses
    ready = all(s["ready"] for s in statuses)
    for condition in status.get("conditions") or []:
        if condition["type"] in ("Ready", "ContainersReady"):
            condition["status"] = "True" if ready else "False"
            condition["lastTransitionTime"] = stamp
    if all_done:
        codes = [running.finished.get(c["name"], 0) for c in pod["spec"]["containers"]]
        status["phase"] = "Succeeded" if all(c == 0 for c in codes) else "Failed"
