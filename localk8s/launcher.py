"""``make cluster``: a real Kubernetes control plane on loopback, built from Go modules.

``python -m localk8s up|down|status`` (the Makefile's ``cluster``, ``cluster-down`` and
``cluster-status``). ``up`` builds what is missing (:mod:`localk8s.build`), then starts
etcd, kube-apiserver, kube-controller-manager, kube-scheduler, cluster DNS (CoreDNS), kwok
with the fake GPU nodes of a nodes file, the process node agent (``local-0``), JobSet,
Kueue, Kubeflow Trainer and the Training Operator, and writes ``<root>/kubeconfig``
(admin). Everything it starts is marked (:mod:`localk8s.processes`), so ``down`` ends all
of it. A cluster that is already up is reused. docs/cluster.md describes the whole.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import urllib3

from . import addons, build, dra, processes
from .components import KUBERNETES, KWOK
from .kubeapi import KubeAPI, KubeError, kubeconfig, wait_for
from .nodes import (
    DEFAULT_NODES_FILE,
    kwok_module_dir,
    load_dra,
    load_nodes,
    schedulable,
    stages,
)
from .pki import ClusterPKI

REPO = Path(__file__).resolve().parents[1]
DEFAULT_ROOT = REPO / ".cluster"
POD_CIDR_KWOK = "127.64.0.0/12"  # fake pods get loopback addresses nothing listens on
STATE = "state.json"
# Machine-wide, not per root: the ports every cluster picks from are the machine's.
START_LOCK = Path(tempfile.gettempdir()) / "gpuhub-cluster-start.lock"


# The default StorageClass: kube-controller-manager's own hostPath provisioner
# (--enable-hostpath-provisioner, meant for one-machine clusters such as this one); the
# process node mounts a claim's bound volume at the container's mountPath.
STORAGE_CLASS: dict[str, Any] = {
    "apiVersion": "storage.k8s.io/v1",
    "kind": "StorageClass",
    "metadata": {
        "name": "local-hostpath",
        "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
    },
    "provisioner": "kubernetes.io/host-path",
    "reclaimPolicy": "Delete",
    "volumeBindingMode": "Immediate",
}


class ClusterError(RuntimeError):
    """``make cluster`` failed; the message is one sentence for the person at the terminal."""


@dataclass
class Cluster:
    root: Path

    @property
    def state_file(self) -> Path:
        return self.root / STATE

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    def state(self) -> dict[str, Any] | None:
        try:
            state: dict[str, Any] = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return None
        return state

    def api(self) -> KubeAPI:
        state = self.state() or {}
        pki = self.root / "pki"
        return KubeAPI(
            state.get("server", ""), pki / "ca.crt", pki / "admin.crt", pki / "admin.key"
        )

    def healthy(self) -> bool:
        state = self.state()
        if not state:
            return False
        if not all(processes.alive(pid) for pid in state.get("pids", {}).values()):
            return False
        api = self.api()
        try:
            return bool(api.session.get(api.server + "/readyz", timeout=5).status_code == 200)
        except requests.RequestException:
            return False


# kube-controller-manager and kube-scheduler serve /healthz with self-signed certificates.
urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)


def _wait_http(
    what: str,
    url: str,
    process: subprocess.Popen[bytes],
    log: Path,
    timeout: float = 120,
    **kwargs: Any,
) -> None:
    def check() -> bool:
        if process.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            raise ClusterError(
                f"{what} exited with code {process.returncode} while starting: "
                f"{' | '.join(tail) or 'no output'} (log: {log})."
            )
        try:
            return requests.get(url, timeout=2, **kwargs).status_code == 200
        except requests.RequestException:
            return False

    try:
        wait_for(what, check, timeout=timeout)
    except TimeoutError as error:
        raise ClusterError(f"{error}; its log is {log}.") from None


def _slot(root: Path) -> int:
    """0-62, picked by the cluster's root: clusters side by side on one machine rarely share."""
    return zlib.crc32(str(root).encode()) % 63


def pod_range(root: Path) -> str:
    """The process node's pod addresses: a /16 of loopback picked by the cluster's root, so
    that clusters side by side on one machine rarely draw from the same (the agent also skips
    an address something listens on)."""
    return f"127.{1 + _slot(root)}.0.0/16"


def service_range(root: Path) -> str:
    """The Service CIDR: loopback too (127.129-191.0.0/16, beside the pods' 127.1-63 and kwok's
    127.64/12), since the process node listens on each ClusterIP (its Service proxy, cluster
    DNS) and nothing here may dial an address off this machine."""
    return f"127.{129 + _slot(root)}.0.0/16"


def dns_address(root: Path) -> str:
    """The kube-dns Service's ClusterIP, the tenth of the range as kubeadm picks it."""
    return str(ipaddress.ip_network(service_range(root))[10])


def _loopback_resolvers(text: str) -> list[str]:
    """The machine's resolvers (``/etc/resolv.conf``) that are on loopback, such as
    systemd-resolved's 127.0.0.53: cluster DNS forwards other names only to those, so that
    the cluster never sends traffic off this machine."""
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) > 1 and fields[0] == "nameserver":
            with contextlib.suppress(ValueError):
                if ipaddress.ip_address(fields[1]).is_loopback:
                    found.append(fields[1])
    return found


def corefile(dns_ip: str, ready_port: int, names: Path, kubeconfig_path: Path) -> str:
    """CoreDNS's configuration: ``cluster.local`` from the apiserver (its ``kubernetes``
    plugin, with the admin kubeconfig: a test cluster's shortcut for CoreDNS's ClusterRole),
    pods' and headless Services' names from the file the process node writes (``hosts``
    plugin, see localk8s/agent/hosts.py), other names forwarded to a loopback resolver. No
    ``cache``: a pod's name must answer as soon as the node has written it, not after a
    cached "no such name" expires (the node asks before the pod's containers start)."""
    try:
        upstream = _loopback_resolvers(Path("/etc/resolv.conf").read_text())
    except OSError:
        upstream = []
    forward = f"    forward . {' '.join(upstream)}\n    loop\n" if upstream else ""
    return (
        ".:53 {\n"
        f"    bind {dns_ip}\n"
        "    errors\n"
        f"    ready 127.0.0.1:{ready_port}\n"
        f"    hosts {names} cluster.local {{\n"
        "        ttl 5\n        reload 200ms\n        fallthrough\n    }\n"
        "    kubernetes cluster.local in-addr.arpa ip6.arpa {\n"
        f"        kubeconfig {kubeconfig_path}\n"
        "        pods insecure\n        fallthrough in-addr.arpa ip6.arpa\n        ttl 5\n"
        "    }\n"
        f"{forward}"
        "}\n"
    )


def kube_dns_service(dns_ip: str) -> dict[str, Any]:
    """The Service kubeadm makes for cluster DNS. CoreDNS runs as a local process listening
    on the ClusterIP itself, so the Service selects no pods."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "kube-dns",
            "namespace": "kube-system",
            "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"},
        },
        "spec": {
            "clusterIP": dns_ip,
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
            ],
        },
    }


def _advertise_flags() -> list[str]:
    """kube-apiserver advertises the host's default-route address, and refuses to start on
    a machine without one; there, advertise loopback and let nobody reconcile endpoints."""
    try:
        routes = Path("/proc/net/route").read_text().splitlines()[1:]
    except OSError:
        routes = []
    if any(line.split()[1] == "00000000" for line in routes if len(line.split()) > 1):
        return []
    return ["--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"]


class Launcher:
    def __init__(
        self,
        root: Path,
        nodes_file: Path,
        gpus: int,
        quiet: bool = False,
        bare: bool = False,
        dra_gpus: int = 2,
    ) -> None:
        self.cluster = Cluster(root)
        self.root = root
        self.nodes_file = nodes_file
        self.gpus = gpus
        self.dra_gpus = dra_gpus  # the process node's GPUs claimed through DRA
        self.quiet = quiet
        # Only etcd, kube-apiserver and kwok (no node leases): the control plane a scale run
        # fills with thousands of kwok nodes and pods bound by name, without the controllers,
        # scheduler, process node and operators that would each cache every pod.
        self.bare = bare
        self.ports = processes.Ports()
        self.pids: dict[str, int] = {}

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, flush=True)

    def _start(
        self, name: str, argv: list[str], *, ports: tuple[int, ...] = (), **kwargs: Any
    ) -> subprocess.Popen[bytes]:
        """Start one component; ``ports`` are the ones it listens on (released to it now)."""
        self.ports.release(*ports)
        process = processes.start(name, argv, root=self.root, **kwargs)
        self.pids[name] = process.pid
        self._save()
        return process

    def _save(self, **extra: Any) -> None:
        state = self.cluster.state() or {}
        state.update(extra)
        state["pids"] = self.pids
        tmp = self.cluster.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.cluster.state_file)

    def up(self) -> str:
        if self.cluster.healthy():
            return self._ready_line(reused=True)
        down(self.root, quiet=True)  # a half-started or stale cluster goes first
        try:
            binaries = build.build_all(quiet=self.quiet)
        except build.BuildError as error:
            raise ClusterError(str(error)) from None
        started = time.monotonic()
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "logs").mkdir(exist_ok=True)
        try:
            with self._starting_alone():
                self._up(binaries)
        except BaseException:
            down(self.root, quiet=True)
            raise
        finally:
            self.ports.release_all()
        return self._ready_line(seconds=time.monotonic() - started)

    @contextlib.contextmanager
    def _starting_alone(self) -> Iterator[None]:
        """One cluster starts at a time on this machine. A port picked free is held until its
        component starts, but between its release and the component's listen (seconds on a
        busy machine) another starting cluster could pick it too."""
        with open(START_LOCK, "a+b") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self.say("waiting for another cluster on this machine to finish starting ...")
                fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _ready_line(self, *, reused: bool = False, seconds: float = 0.0) -> str:
        state = self.cluster.state() or {}
        how = "already running" if reused else f"up in {seconds:.0f} s"
        what = (
            "bare: etcd, kube-apiserver and kwok only"
            if state.get("bare")
            else "Kueue, JobSet, Trainer, Training Operator"
        )
        return (
            f"Kubernetes {KUBERNETES} cluster {how} at {state.get('server')} "
            f"({state.get('nodes', '?')} nodes, {what}): KUBECONFIG={self.cluster.kubeconfig}"
        )

    def _start_controllers(
        self, binaries: dict[str, Path], pki: ClusterPKI, ports: dict[str, int], api: KubeAPI
    ) -> None:
        """kube-controller-manager and kube-scheduler, once the apiserver answers."""
        root = self.root
        admin_path = str(self.cluster.kubeconfig)
        self.say("starting kube-controller-manager and kube-scheduler ...")
        process = self._start(
            "kube-controller-manager",
            [
                str(binaries["kube-controller-manager"]),
                f"--kubeconfig={admin_path}",
                f"--authentication-kubeconfig={admin_path}",
                f"--authorization-kubeconfig={admin_path}",
                f"--service-account-private-key-file={pki.service_account.key}",
                f"--root-ca-file={pki.ca.pair.cert}",
                f"--cluster-signing-cert-file={pki.ca.pair.cert}",
                f"--cluster-signing-key-file={pki.ca.pair.key}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['controller-manager']}",
                "--kube-api-qps=500",
                "--kube-api-burst=1000",
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
                f"--cert-dir={root / 'pki' / 'kcm'}",
                "--node-monitor-grace-period=120s",
                # PersistentVolumeClaims of the default StorageClass (STORAGE_CLASS) get a
                # folder of this machine, /tmp/hostpath_pv/<uid>, as a hostPath volume.
                "--enable-hostpath-provisioner=true",
            ],
            ports=(ports["controller-manager"],),
        )
        controller_manager = process
        config = root / "scheduler.yaml"
        config.write_text(
            json.dumps(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": admin_path, "qps": 500, "burst": 1000},
                    "leaderElection": {"leaderElect": False},
                }
            )
        )
        scheduler = self._start(
            "kube-scheduler",
            [
                str(binaries["kube-scheduler"]),
                f"--config={config}",
                f"--authentication-kubeconfig={admin_path}",
                f"--authorization-kubeconfig={admin_path}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['scheduler']}",
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
                f"--cert-dir={root / 'pki' / 'scheduler'}",
            ],
            ports=(ports["scheduler"],),
        )
        _wait_http(
            "kube-controller-manager",
            f"https://127.0.0.1:{ports['controller-manager']}/healthz",
            controller_manager,
            root / "logs/kube-controller-manager.log",
            verify=False,
        )
        _wait_http(
            "kube-scheduler",
            f"https://127.0.0.1:{ports['scheduler']}/healthz",
            scheduler,
            root / "logs/kube-scheduler.log",
            verify=False,
        )
        wait_for(
            "the default namespace's ServiceAccount",
            lambda: api.get("v1", "ServiceAccount", "default", "default"),
            timeout=60,
        )
        api.apply(STORAGE_CLASS)

    def _start_dns(self, coredns: Path, api: KubeAPI) -> None:
        """Cluster DNS: CoreDNS on the kube-dns Service's ClusterIP, port 53."""
        self.say("starting CoreDNS ...")
        dns_ip = dns_address(self.root)
        api.apply(kube_dns_service(dns_ip))
        names = self.root / "node-agent" / "cluster-names"
        names.parent.mkdir(parents=True, exist_ok=True)
        names.touch()
        ready = self.ports.pick(8181)
        config = self.root / "Corefile"
        config.write_text(corefile(dns_ip, ready, names, self.cluster.kubeconfig))
        process = self._start("coredns", [str(coredns), "-conf", str(config)], ports=(ready,))
        _wait_http(
            "CoreDNS", f"http://127.0.0.1:{ready}/ready", process, self.root / "logs/coredns.log"
        )

    def _up(self, binaries: dict[str, Path]) -> None:
        root = self.root
        pki = ClusterPKI.create(root / "pki")
        ports = {
            "etcd": self.ports.pick(2379),
            "etcd-peer": self.ports.pick(2380),
            "apiserver": self.ports.pick(6443),
            "controller-manager": self.ports.pick(10257),
            "scheduler": self.ports.pick(10259),
            "kwok": self.ports.pick(10247),
            "node-agent": self.ports.pick(10250),
        }
        server = f"https://127.0.0.1:{ports['apiserver']}"
        self._save(server=server, ports=ports, kubernetes=KUBERNETES, bare=self.bare)
        admin = kubeconfig(server, pki.ca.pair.cert, cert=pki.admin.cert, key=pki.admin.key)
        self.cluster.kubeconfig.write_text(admin)
        self.cluster.kubeconfig.chmod(0o600)

        # etcd
        data = root / "etcd"
        shutil.rmtree(data, ignore_errors=True)
        etcd_url = f"http://127.0.0.1:{ports['etcd']}"
        peer_url = f"http://127.0.0.1:{ports['etcd-peer']}"
        self.say("starting etcd ...")
        process = self._start(
            "etcd",
            [
                str(binaries["etcd"]),
                "--name=gpuhub",
                f"--data-dir={data}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=gpuhub={peer_url}",
                "--unsafe-no-fsync=true",
                "--quota-backend-bytes=8589934592",
                "--auto-compaction-mode=periodic",
                "--auto-compaction-retention=5m",
                "--snapshot-count=10000",
                "--log-level=warn",
                "--listen-metrics-urls=",
            ],
            ports=(ports["etcd"], ports["etcd-peer"]),
        )
        _wait_http("etcd", f"{etcd_url}/health", process, root / "logs/etcd.log")

        self.say("starting kube-apiserver ...")
        process = self._start(
            "kube-apiserver",
            [
                str(binaries["kube-apiserver"]),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['apiserver']}",
                f"--tls-cert-file={pki.serving.cert}",
                f"--tls-private-key-file={pki.serving.key}",
                f"--client-ca-file={pki.ca.pair.cert}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki.service_account.cert}",
                f"--service-account-signing-key-file={pki.service_account.key}",
                "--authorization-mode=Node,RBAC",
                f"--service-cluster-ip-range={service_range(root)}",
                "--allow-privileged=true",
                f"--proxy-client-cert-file={pki.front_proxy_client.cert}",
                f"--proxy-client-key-file={pki.front_proxy_client.key}",
                f"--requestheader-client-ca-file={pki.front_proxy_ca.pair.cert}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--kubelet-client-certificate={pki.kubelet_client.cert}",
                f"--kubelet-client-key={pki.kubelet_client.key}",
                "--kubelet-preferred-address-types=InternalIP",
                "--enable-aggregator-routing=false",
                "--max-requests-inflight=1000",
                "--max-mutating-requests-inflight=500",
                "--profiling=false",
                f"--cert-dir={root / 'pki'}",
                *_advertise_flags(),
            ],
            ports=(ports["apiserver"],),
        )
        _wait_http(
            "kube-apiserver",
            f"{server}/readyz",
            process,
            root / "logs/kube-apiserver.log",
            verify=str(pki.ca.pair.cert),
            cert=(str(pki.admin.cert), str(pki.admin.key)),
        )
        api = self.cluster.api()

        admin_path = str(self.cluster.kubeconfig)
        if not self.bare:
            self._start_controllers(binaries, pki, ports, api)
            if os.geteuid() == 0:
                self._start_dns(binaries["coredns"], api)
            else:  # port 53 needs root; pods then find each other through their hosts files
                self.say("not root: no cluster DNS (CoreDNS listens on port 53)")
        # Nodes: kwok's fake GPU nodes and the process node.
        self.say("starting kwok and the process node ..." if not self.bare else "starting kwok ...")
        nodes = load_nodes(self.nodes_file)
        # DRA: the NVIDIA driver's DeviceClasses, and the slices of the simulated driver for
        # the GPUs of the nodes that have a dra entry (the process node publishes its own).
        dra_nodes = {} if self.bare else load_dra(self.nodes_file)
        if not self.bare:
            api.apply_all(dra.device_classes())
        for node in nodes:
            status = node.pop("status")
            created = api.apply(node)
            name = node["metadata"]["name"]
            if name in dra_nodes:
                devices = dra.devices(name, dra_nodes[name])
                dra.publish(api, name, created["metadata"]["uid"], devices)
            api.request(
                "PATCH",
                api.path("v1", "Node", node["metadata"]["name"]) + "/status",
                data=json.dumps({"status": status}),
                headers={"Content-Type": "application/merge-patch+json"},
            )
            if self.bare:
                # The apiserver taints a new node not-ready; no node lifecycle controller
                # runs here to lift it once kwok reports the node Ready.
                api.request(
                    "PATCH",
                    api.path("v1", "Node", node["metadata"]["name"]),
                    data=json.dumps({"spec": {"taints": node["spec"]["taints"]}}),
                    headers={"Content-Type": "application/merge-patch+json"},
                )
        stage_file = root / "kwok-stages.yaml"
        stage_file.write_text(stages(kwok_module_dir(KWOK)))
        kwok = self._start(
            "kwok",
            [
                str(binaries["kwok"]),
                f"--kubeconfig={admin_path}",
                "-c",
                str(stage_file),
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--cidr={POD_CIDR_KWOK}",
                "--node-ip=127.0.0.1",
                f"--node-port={ports['kwok']}",
                f"--server-address=127.0.0.1:{ports['kwok']}",
                f"--tls-cert-file={pki.serving.cert}",
                f"--tls-private-key-file={pki.serving.key}",
                # A bare cluster runs no node lifecycle controller to read leases, and
                # 5,000 nodes renewing one every 10 s would be most of its write load.
                f"--node-lease-duration-seconds={0 if self.bare else 40}",
                "--v=WARN",
            ],
            ports=(ports["kwok"],),
        )
        started = [(kwok, "kwok")]
        if not self.bare:
            agent = self._start(
                "node-agent",
                [
                    sys.executable,
                    "-m",
                    "localk8s.agent",
                    f"--server={api.server}",
                    f"--pki={root / 'pki'}",
                    f"--state={root / 'node-agent'}",
                    f"--port={ports['node-agent']}",
                    f"--gpus={self.gpus}",
                    f"--dra-gpus={self.dra_gpus}",
                    f"--pod-range={pod_range(root)}",
                    *(
                        [
                            f"--cluster-dns={dns_address(root)}",
                            f"--dns-names={root / 'node-agent' / 'cluster-names'}",
                        ]
                        if "coredns" in self.pids
                        else []
                    ),
                    f"--socket={root / 'node-agent' / 'kubelet.sock'}",
                ],
                cwd=REPO,
            )
            started.append((agent, "node-agent"))
            # The node's kubelet port: exec, attach and port-forward, the rest to the agent.
            kubelet = self._start(
                "process-kubelet",
                [
                    str(binaries["process-kubelet"]),
                    f"--port={ports['node-agent']}",
                    f"--pki={root / 'pki'}",
                    f"--agent-socket={root / 'node-agent' / 'kubelet.sock'}",
                ],
                ports=(ports["node-agent"],),
            )
            started.append((kubelet, "process-kubelet"))
        expected = len(nodes) + (0 if self.bare else 1)  # and the process node

        def nodes_ready() -> bool:
            for proc, name in started:
                if proc.poll() is not None:
                    raise ClusterError(
                        f"{name} exited while starting (log: {root}/logs/{name}.log)."
                    )
            listing = api.request("GET", "/api/v1/nodes")["items"]
            return sum(map(schedulable, listing)) >= expected

        wait_for("every node Ready and schedulable", nodes_ready, timeout=120)
        self._save(nodes=expected)
        if self.bare:
            self._save(ready=True)
            return

        # The operators.
        certs = root / "pki" / "webhook"
        certs.mkdir(exist_ok=True)
        for src, dst in (
            (pki.serving.cert, "tls.crt"),
            (pki.serving.key, "tls.key"),
            (pki.ca.pair.cert, "ca.crt"),
            (pki.ca.pair.key, "ca.key"),
        ):
            shutil.copyfile(src, certs / dst)
        ca_bundle = base64.b64encode(pki.ca.pem).decode()
        operators = addons.operators(
            kubectl=binaries["kubectl"],
            pick=self.ports.pick,
            folder=root / "operators",
            kubeconfig=self.cluster.kubeconfig,
            certs=certs,
            ca_bundle=ca_bundle,
        )
        for operator in operators:
            self.say(f"starting {operator.name} {operator.version} ...")
            namespaces = [m for m in operator.manifests if m["kind"] == "Namespace"]
            api.apply_all(namespaces)
            api.apply_all(m for m in operator.manifests if m["kind"] == "CustomResourceDefinition")
            for crd in (m for m in operator.manifests if m["kind"] == "CustomResourceDefinition"):
                wait_for(
                    f"CRD {crd['metadata']['name']} established",
                    lambda crd=crd: _established(api, crd["metadata"]["name"]),
                    timeout=60,
                )
            api.apply_all(
                m
                for m in operator.manifests
                if m["kind"] not in ("Namespace", "CustomResourceDefinition")
            )
            argv = addons.in_mount_namespace(
                [str(binaries[operator.binary]), *operator.argv], operator.binds
            )
            env = dict(os.environ) | operator.env
            process = self._start(
                operator.name, argv, env=env, ports=tuple(operator.ports.values())
            )
            _wait_http(
                f"{operator.name} {operator.version}",
                operator.health_url,
                process,
                root / f"logs/{operator.name}.log",
                timeout=180,
            )
            if operator.probe is not None:
                wait_for(
                    f"{operator.name}'s webhooks",
                    lambda operator=operator: _webhooks_accept(api, operator),
                    timeout=90,
                    interval=1,
                )
            for obj in operator.after:
                wait_for(
                    f"{obj['kind']} {obj['metadata']['name']} accepted",
                    lambda obj=obj: api.apply(obj),
                    timeout=60,
                )
        wait_for(
            "Kueue's visibility API",
            lambda: api.request("GET", "/apis/visibility.kueue.x-k8s.io/v1beta2"),
            timeout=60,
        )
        self._save(ready=True)


def _webhooks_accept(api: KubeAPI, operator: addons.Operator) -> bool:
    """True once the operator's webhooks accept its probe object (a dry-run create)."""
    if operator.cert_secret and operator.cert_dir:
        _sync_cert_secret(api, *operator.cert_secret, operator.cert_dir)
    probe = operator.probe or {}
    meta = probe["metadata"]
    path = api.path(probe["apiVersion"], probe["kind"], "", meta["namespace"])
    api.request("POST", path, params={"dryRun": "All"}, json=probe)
    return True


def _sync_cert_secret(api: KubeAPI, namespace: str, name: str, folder: Path) -> None:
    """Copy the serving certificate an operator keeps in a Secret to the folder its webhook
    server reads (what the kubelet does for a mounted Secret), then wait until the webhook
    answers with it."""

    def secret() -> dict[str, str] | None:
        obj = api.get("v1", "Secret", name, namespace)
        data = (obj or {}).get("data") or {}
        return data if {"tls.crt", "tls.key"} <= set(data) else None

    data = wait_for(f"Secret {namespace}/{name}", secret, timeout=60)
    for key in ("tls.crt", "tls.key"):
        tmp = folder / f".{key}.tmp"
        tmp.write_bytes(base64.b64decode(data[key]))
        tmp.replace(folder / key)


def _established(api: KubeAPI, name: str) -> bool:
    crd = api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
    conditions = (crd or {}).get("status", {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def down(root: Path, quiet: bool = False) -> int:
    """Stop every process of the cluster at ``root``; its data goes too."""
    count = processes.stop_marked(root)
    state_file = root / STATE
    if state_file.exists():
        state = json.loads(state_file.read_text() or "{}")
        processes.terminate(state.get("pids", {}).values())
        state_file.unlink()
    for folder in ("etcd", "node-agent"):
        shutil.rmtree(root / folder, ignore_errors=True)
    if not quiet:
        print(f"cluster at {root} stopped ({count} processes ended)")
    return count


def status(root: Path) -> int:
    cluster = Cluster(root)
    state = cluster.state()
    if not state:
        print(f"no cluster at {root} (make cluster starts one)")
        return 1
    print(f"cluster at {root}: Kubernetes {state.get('kubernetes')} at {state.get('server')}")
    for name, pid in state.get("pids", {}).items():
        print(f"  {name:28} pid {pid:<8} {'running' if processes.alive(pid) else 'NOT RUNNING'}")
    try:
        nodes = cluster.api().request("GET", "/api/v1/nodes")["items"]
        pods = cluster.api().request("GET", "/api/v1/pods")["items"]
    except (requests.RequestException, KubeError) as error:
        print(f"  the apiserver does not answer: {error}")
        return 1
    print(f"  {len(nodes)} nodes, {len(pods)} pods; KUBECONFIG={cluster.kubeconfig}")
    return 0 if cluster.healthy() else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localk8s", description=__doc__)
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument(
        "--root", type=Path, default=Path(os.environ.get("GPUHUB_CLUSTER_ROOT", DEFAULT_ROOT))
    )
    parser.add_argument(
        "--nodes",
        type=Path,
        default=Path(os.environ.get("GPUHUB_CLUSTER_NODES", DEFAULT_NODES_FILE)),
    )
    parser.add_argument(
        "--bare",
        action="store_true",
        help="etcd, kube-apiserver and kwok only, without node leases (for scale runs)",
    )
    parser.add_argument(
        "--gpus",
        type=int,
        default=int(os.environ.get("GPUHUB_CLUSTER_GPUS", 4)),
        help="simulated nvidia.com/gpu on the process node (default 4)",
    )
    parser.add_argument(
        "--dra-gpus",
        type=int,
        default=int(os.environ.get("GPUHUB_CLUSTER_DRA_GPUS", 2)),
        help="simulated GPUs the process node offers through DRA, besides those (default 2)",
    )
    args = parser.parse_args(argv)
    root = args.root.resolve()
    if args.command == "down":
        down(root)
        return 0
    if args.command == "status":
        return status(root)
    try:
        print(
            Launcher(root, args.nodes, args.gpus, bare=args.bare, dra_gpus=args.dra_gpus).up(),
            flush=True,
        )
    except ClusterError as error:
        print(f"make cluster failed: {error}", file=sys.stderr)
        return 1
    except (TimeoutError, KubeError) as error:
        print(f"make cluster failed: {error} (logs in {root / 'logs'}).", file=sys.stderr)
        return 1
    return 0
