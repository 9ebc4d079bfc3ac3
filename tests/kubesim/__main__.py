"""``python -m tests.kubesim --port PORT --kubeconfig PATH --nodes NODES.yaml``"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

from .sim import KubeSim, kubeconfig_text, load_nodes


async def _serve(args: argparse.Namespace) -> None:
    sim = KubeSim()
    url = await sim.start(args.host, args.port)
    sim.add_nodes(load_nodes(args.nodes) if args.nodes else [])
    if args.jupyter:
        sim.kubelet.run_locally = lambda pod, c: (
            bool(c.get("args") or c.get("command"))
            and Path([*(c.get("command") or []), *(c.get("args") or [])][0]).name
            == "jupyterhub-singleuser"
        )
    if args.kubeconfig:
        Path(args.kubeconfig).write_text(kubeconfig_text(url))
    print(
        f"kubesim serving on {url}"
        + (f"; kubeconfig written to {args.kubeconfig}" if args.kubeconfig else ""),
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await sim.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.kubesim",
        description="A simulated Kubernetes API server with scheduler, kubelets and a Job controller.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--kubeconfig", help="where to write a kubeconfig for this server")
    parser.add_argument("--nodes", help="YAML list of nodes: name, labels, taints, allocatable")
    parser.add_argument(
        "--jupyter",
        action="store_true",
        help="run jupyterhub-singleuser containers as local processes",
    )
    asyncio.run(_serve(parser.parse_args()))


if __name__ == "__main__":
    main()
