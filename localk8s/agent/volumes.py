"""A pod's volumes as folders on this machine, and the mounts that put them at their paths.

The agent writes each volume's content under the pod's folder (ConfigMap and Secret keys
as files, a projected ServiceAccount token from the TokenRequest API, an emptyDir as an empty
folder; a PersistentVolumeClaim is its bound hostPath or local volume's folder), then each
container starts in a private mount namespace (``unshare --mount``) where those folders are
bind-mounted at the container's ``mountPath`` (``subPath`` and ``readOnly`` honoured). The paths a program sees are the ones its pod spec names.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
from pathlib import Path
from typing import Any

from .kube import ApiError, Kube

SERVICE_ACCOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


# A PersistentVolume's spec fields that are not its source.
_PV_FIELDS = {
    "accessModes",
    "capacity",
    "claimRef",
    "mountOptions",
    "nodeAffinity",
    "persistentVolumeReclaimPolicy",
    "storageClassName",
    "volumeAttributesClassName",
    "volumeMode",
}


class VolumeNotReady(RuntimeError):
    """A volume's source does not exist yet (the kubelet's FailedMount); the pod waits."""


class VolumeUnsupported(RuntimeError):
    """A volume kind this node cannot provide."""


def _write(folder: Path, relative: str, data: bytes, mode: int) -> None:
    target = folder / relative
    if not target.resolve().is_relative_to(folder.resolve()):
        raise VolumeUnsupported(f"volume item path {relative!r} leaves its volume")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    target.chmod(mode)


def _key_files(
    data: dict[str, bytes], items: list[dict[str, Any]] | None, default_mode: int
) -> list[tuple[str, bytes, int]]:
    if not items:
        return [(k, v, default_mode) for k, v in data.items()]
    return [
        (item["path"], data[item["key"]], item.get("mode", default_mode))
        for item in items
        if item["key"] in data
    ]


class Volumes:
    """Materialises the volumes of one pod."""

    def __init__(self, kube: Kube, pod: dict[str, Any], folder: Path, apiserver_port: int):
        self.kube = kube
        self.pod = pod
        self.namespace = pod["metadata"]["namespace"]
        self.folder = folder
        self.apiserver_port = apiserver_port

    async def _configmap(self, name: str, optional: bool) -> dict[str, bytes] | None:
        try:
            cm = await self.kube.request(
                "GET", f"/api/v1/namespaces/{self.namespace}/configmaps/{name}"
            )
        except ApiError as error:
            if error.status == 404:
                if optional:
                    return None
                raise VolumeNotReady(f'configmap "{name}" not found') from None
            raise
        data = {k: v.encode() for k, v in (cm.get("data") or {}).items()}
        data |= {k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()}
        return data

    async def _secret(self, name: str, optional: bool) -> dict[str, bytes] | None:
        try:
            secret = await self.kube.request(
                "GET", f"/api/v1/namespaces/{self.namespace}/secrets/{name}"
            )
        except ApiError as error:
            if error.status == 404:
                if optional:
                    return None
                raise VolumeNotReady(f'secret "{name}" not found') from None
            raise
        return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}

    async def _token(self, source: dict[str, Any]) -> bytes:
        account = self.pod["spec"].get("serviceAccountName") or "default"
        meta = self.pod["metadata"]
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": source.get("expirationSeconds", 3607),
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
                **({"audiences": [source["audience"]]} if source.get("audience") else {}),
            },
        }
        answer = await self.kube.request(
            "POST",
            f"/api/v1/namespaces/{self.namespace}/serviceaccounts/{account}/token",
            body,
        )
        return str(answer["status"]["token"]).encode()

    async def _claim(self, name: str) -> Path:
        """The folder of the volume bound to PersistentVolumeClaim ``name``: until it is
        bound the pod waits in ContainerCreating, as a kubelet's does."""
        try:
            claim = await self.kube.request(
                "GET", f"/api/v1/namespaces/{self.namespace}/persistentvolumeclaims/{name}"
            )
        except ApiError as error:
            if error.status == 404:
                raise VolumeNotReady(f'persistentvolumeclaim "{name}" not found') from None
            raise
        volume_name = claim.get("spec", {}).get("volumeName")
        if claim.get("status", {}).get("phase") != "Bound" or not volume_name:
            raise VolumeNotReady(f'persistentvolumeclaim "{name}" is not bound')
        volume = await self.kube.request("GET", f"/api/v1/persistentvolumes/{volume_name}")
        spec = volume.get("spec", {})
        if "hostPath" in spec:
            path = Path(spec["hostPath"]["path"])
        elif "local" in spec:
            path = Path(spec["local"]["path"])
        else:
            kind = next((k for k in spec if k not in _PV_FIELDS), "unknown")
            raise VolumeUnsupported(
                f"persistentvolume {volume_name!r} of claim {name!r} is a {kind} volume; the "
                "process node mounts hostPath and local volumes"
            )
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _field(self, path: str) -> bytes:
        meta = self.pod["metadata"]
        if path in ("metadata.name", "metadata.namespace", "metadata.uid"):
            return str(meta[path.split(".", 1)[1]]).encode()
        if path in ("metadata.labels", "metadata.annotations"):
            values = meta.get(path.split(".", 1)[1]) or {}
            return "".join(f"{k}={json.dumps(v)}\n" for k, v in sorted(values.items())).encode()
        raise VolumeUnsupported(f"downwardAPI field {path!r} is not served by the process node")

    async def materialise(self) -> dict[str, Path]:
        """Write every volume; returns volume name -> folder (or file, for hostPath files)."""
        out: dict[str, Path] = {}
        for volume in self.pod["spec"].get("volumes") or []:
            name = volume["name"]
            folder = self.folder / "volumes" / name
            folder.mkdir(parents=True, exist_ok=True)
            out[name] = folder
            if "emptyDir" in volume:
                continue
            if "configMap" in volume:
                src = volume["configMap"]
                found = await self._configmap(src["name"], src.get("optional", False))
                mode = src.get("defaultMode", 0o644)
                for path, content, m in _key_files(found or {}, src.get("items"), mode):
                    _write(folder, path, content, m)
            elif "secret" in volume:
                src = volume["secret"]
                found = await self._secret(src["secretName"], src.get("optional", False))
                mode = src.get("defaultMode", 0o644)
                for path, content, m in _key_files(found or {}, src.get("items"), mode):
                    _write(folder, path, content, m)
            elif "projected" in volume:
                mode = volume["projected"].get("defaultMode", 0o644)
                for source in volume["projected"].get("sources") or []:
                    if "serviceAccountToken" in source:
                        sat = source["serviceAccountToken"]
                        _write(folder, sat["path"], await self._token(sat), mode)
                    elif "configMap" in source:
                        src = source["configMap"]
                        data = await self._configmap(src["name"], src.get("optional", False))
                        for path, content, m in _key_files(data or {}, src.get("items"), mode):
                            _write(folder, path, content, m)
                    elif "secret" in source:
                        src = source["secret"]
                        data = await self._secret(src["name"], src.get("optional", False))
                        for path, content, m in _key_files(data or {}, src.get("items"), mode):
                            _write(folder, path, content, m)
                    elif "downwardAPI" in source:
                        for item in source["downwardAPI"].get("items") or []:
                            path = item.get("fieldRef", {}).get("fieldPath", "")
                            _write(folder, item["path"], self._field(path), mode)
            elif "downwardAPI" in volume:
                mode = volume["downwardAPI"].get("defaultMode", 0o644)
                for item in volume["downwardAPI"].get("items") or []:
                    path = item.get("fieldRef", {}).get("fieldPath", "")
                    _write(folder, item["path"], self._field(path), mode)
            elif "hostPath" in volume:
                out[name] = Path(volume["hostPath"]["path"])
            elif "persistentVolumeClaim" in volume:
                out[name] = await self._claim(volume["persistentVolumeClaim"]["claimName"])
            else:
                kind = next((k for k in volume if k != "name"), "unknown")
                raise VolumeUnsupported(
                    f"volume {name!r} is a {kind} volume; the process node provides configMap, "
                    "secret, projected, downwardAPI, emptyDir, hostPath and "
                    "persistentVolumeClaim volumes"
                )
        return out


def mount_script(
    container: dict[str, Any],
    volumes: dict[str, Path],
    workdir: str | None,
    hosts: Path,
    resolv: Path,
    hostname: str | None = None,
    stage: Path | None = None,
) -> str:
    """The shell lines that, inside a private mount namespace, bind the pod's hosts file at
    ``/etc/hosts`` and its resolver configuration at ``/etc/resolv.conf`` (cluster DNS), each
    volume at its ``mountPath``, and enter the working directory, before the container's
    command runs. Given a ``hostname`` (the container then has a UTS namespace of its own,
    ``unshare --uts``), it becomes the kernel's host name, as a pod's is its own name: a
    program asking ``gethostname()`` (KubeSpawner's test hub) gets a name its hosts file
    answers, not the machine's.

    Every volume's folder is found before any is mounted, as a kubelet resolves them on the
    host, not in the container: each is first bound into ``stage`` (a folder of the
    container's own), which the script holds open, and mounted from there. A pod that mounts
    an emptyDir over a folder holding the cluster's own (``/tmp`` of a cluster rooted in
    ``/tmp``) then still gets its other volumes."""
    lines = ["set -e"]
    if hostname:
        lines.append(f"printf %s {shlex.quote(hostname)} > /proc/sys/kernel/hostname")
    lines += [
        f"mount --bind {shlex.quote(str(hosts))} /etc/hosts",
        f"mount --bind {shlex.quote(str(resolv))} /etc/resolv.conf",
    ]
    mounts: list[tuple[Path, dict[str, Any]]] = []
    for mount in container.get("volumeMounts") or []:
        source = volumes.get(mount["name"])
        if source is None:
            raise VolumeUnsupported(f"volumeMount {mount['name']!r} names no volume of the pod")
        if mount.get("subPath"):
            source = source / mount["subPath"]
            if not source.exists():
                source.mkdir(parents=True)
        mounts.append((source, mount))
    if mounts and stage is not None:
        stage.mkdir(parents=True, exist_ok=True)
        for index, (source, _) in enumerate(mounts):
            placeholder = stage / str(index)
            if source.is_dir():
                placeholder.mkdir(exist_ok=True)
            else:
                placeholder.touch()
            lines.append(f"mount --bind {shlex.quote(str(source))} {shlex.quote(str(placeholder))}")
        # fd 9 reaches the staged folders whatever the pod mounts over the path to them;
        # mount is told not to turn /proc/self/fd/9 back into that (maybe hidden) path.
        lines.append(f"exec 9< {shlex.quote(str(stage))}")
    for index, (source, mount) in enumerate(mounts):
        target = shlex.quote(mount["mountPath"])
        if source.is_dir():
            lines.append(f"mkdir -p {target}")
        else:
            lines.append(f"mkdir -p $(dirname {target}); [ -e {target} ] || touch {target}")
        if stage is not None:
            lines.append(f"mount --no-canonicalize --bind /proc/self/fd/9/{index} {target}")
        else:
            lines.append(f"mount --bind {shlex.quote(str(source))} {target}")
        if mount.get("readOnly"):
            lines.append(f"mount -o remount,bind,ro {target}")
    if mounts and stage is not None:
        lines.append("exec 9<&-")
    if workdir:
        lines.append(f"mkdir -p {shlex.quote(workdir)} && cd {shlex.quote(workdir)}")
    lines.append('exec "$@"')
    return "\n".join(lines) + "\n"


def can_mount() -> bool:
    """Private mount namespaces need root (CI and the demo run as root)."""
    return os.geteuid() == 0
