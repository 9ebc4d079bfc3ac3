"""What reading every pod costs kube-apiserver, by the way it is asked: the other half of the
hub's first sync (``benchmarks ledger`` times the hub's half).

``python -m benchmarks.apiserver_reads --root DIR [MODE ...]`` on the cluster a
``benchmarks ledger --root DIR`` run filled and kept. Each mode reads all active pods (the
capacity watch's field selector) with a plain aiohttp client that throws the bytes away,
and reports the wall time, the apiserver's CPU (``/proc``), the client's and the bytes:
``list-json-1000`` (LIST pages of 1,000, as the hub read before issue 30, without gzip),
``list-json-gzip-1000``, ``list-pb-1000`` (Kubernetes' protobuf), ``stream-json`` (a
streaming list, ``sendInitialEvents``) and ``stream-pb``, each read as it comes, and
``stream-json-gathered``, ``stream-pb-gathered``: read as the hub reads now, pausing 10 ms
whenever a read brings less than 128 KB right after another
(:class:`gpuhub.k8s.listwatch.Gatherer`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import sys
import time
from pathlib import Path

from gpuhub.hub.ledger.capacity import ACTIVE_PODS
from gpuhub.k8s.listwatch import Gatherer

MODES = (
    "list-json-1000",
    "list-json-gzip-1000",
    "list-pb-1000",
    "stream-json",
    "stream-pb",
    "stream-json-gathered",
    "stream-pb-gathered",
)
PROTOBUF = "application/vnd.kubernetes.protobuf"


def _varint(b: bytes, i: int) -> tuple[int, int]:
    x = s = 0
    while True:
        c = b[i]
        i += 1
        x |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return x, i


def _fields(b: bytes) -> dict[int, bytes]:
    """The length-delimited fields of one protobuf message (enough for a list's metadata)."""
    out: dict[int, bytes] = {}
    i = 0
    while i < len(b):
        tag, i = _varint(b, i)
        size, i = _varint(b, i)
        out.setdefault(tag >> 3, b[i : i + size])
        i += size
    return out


def pb_continue(body: bytes) -> str | None:
    """A protobuf PodList's continue token: the envelope (``k8s\\0``, runtime.Unknown) holds
    the list in field 2, whose ListMeta (field 1) has it in field 3."""
    raw = _fields(body[4:]).get(2, b"")
    token = _fields(_fields(raw).get(1, b"")).get(3)
    return token.decode() if token else None


def json_continue(body: bytes) -> str | None:
    head = body[: body.index(b'"items"')].rstrip(b",") + b"}"
    return json.loads(head).get("metadata", {}).get("continue") or None


async def read(root: Path, mode: str) -> dict[str, float]:
    import aiohttp

    state = json.loads((root / "state.json").read_text())
    pki = root / "pki"
    stat = Path(f"/proc/{state['pids']['kube-apiserver']}/stat")

    def server_cpu() -> float:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    headers = {"Accept": PROTOBUF if "pb" in mode else "application/json"}
    if "gzip" not in mode:
        headers["Accept-Encoding"] = "identity"
    url = f"{state['server']}/api/v1/pods"
    total = reads = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        server, client, wall = server_cpu(), time.process_time(), time.perf_counter()
        if mode.startswith("stream"):
            if "pb" in mode:
                headers["Accept"] = PROTOBUF + ";stream=watch"
            params = {
                "watch": "1",
                "sendInitialEvents": "true",
                "resourceVersionMatch": "NotOlderThan",
                "allowWatchBookmarks": "true",
                "timeoutSeconds": "600",
                "fieldSelector": ACTIVE_PODS,
            }
            async with session.get(url, params=params, headers=headers) as response:
                tail = b""
                gathering = Gatherer(response)
                async for chunk in response.content.iter_any():
                    total += len(chunk)
                    reads += 1
                    tail = (tail + chunk)[-4000:]
                    if b"initial-events-end" in tail:
                        break
                    if mode.endswith("gathered"):
                        await gathering.after(chunk)
        else:
            token: str | None = None
            while True:
                page = {"limit": mode.rsplit("-", 1)[1], "fieldSelector": ACTIVE_PODS}
                if token:
                    page["continue"] = token
                async with session.get(url, params=page, headers=headers) as response:
                    body = await response.read()
                total += len(body)
                reads += 1
                token = pb_continue(body) if "pb" in mode else json_continue(body)
                if not token:
                    break
        return {
            "wall_s": time.perf_counter() - wall,
            "apiserver_cpu_s": server_cpu() - server,
            "client_cpu_s": time.process_time() - client,
            "mb": total / 1e6,
            "reads": reads,
        }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.apiserver_reads")
    parser.add_argument("--root", type=Path, help="the folder a `ledger --root` run kept")
    parser.add_argument("modes", nargs="*", help=f"some of {', '.join(MODES)} (default: all)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.modes) - set(MODES))
    if unknown:
        parser.error(f"no read mode {unknown[0]!r}; the modes are {', '.join(MODES)}")
    root = args.root / "cluster" if args.root else None
    if root is None or not (root / "state.json").exists():
        print("apiserver_reads: needs --root, a cluster a `benchmarks ledger --root` run kept")
        return 0
    print(f"load average {os.getloadavg()[0]:.1f}")
    print(
        "| read | wall | kube-apiserver's CPU | client's CPU | MB | reads |\n"
        "|---|---|---|---|---|---|"
    )
    for mode in args.modes or MODES:
        r = asyncio.run(read(root, mode))
        print(
            f"| {mode} | {r['wall_s']:.1f} s | {r['apiserver_cpu_s']:.1f} s | "
            f"{r['client_cpu_s']:.2f} s | {r['mb']:.0f} | {r['reads']:,} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
