"""``python -m gpuhub.service --config FILE``: run the jobs service.

Environment (what JupyterHub gives a managed service; the Helm chart sets the same):
``JUPYTERHUB_API_TOKEN``, ``JUPYTERHUB_API_URL``, ``JUPYTERHUB_SERVICE_NAME`` (``gpuhub``),
``JUPYTERHUB_SERVICE_URL`` (where to listen, default ``http://0.0.0.0:10101``),
``JUPYTERHUB_SERVICE_PREFIX`` (default ``/services/gpuhub/``), ``GPUHUB_LOG_LEVEL``.
Kubernetes credentials: the pod's service account in a cluster, else ``KUBECONFIG``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import Any
from urllib.parse import urlparse

from gpuhub.core.env import LOG_LEVEL_ENV
from gpuhub.service.config import ServiceConfig, ServiceConfigError

DEFAULT_URL = "http://0.0.0.0:10101"


async def kube_client() -> Any:
    from kubernetes_asyncio import client, config

    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()
        return client.ApiClient()
    return await config.new_client_from_config(config_file=os.environ.get("KUBECONFIG"))


async def serve(config: ServiceConfig) -> None:
    from jupyterhub.services.auth import HubAuth

    from gpuhub.jobs.k8s.backend import KubernetesBackend
    from gpuhub.jobs.pipeline import KFPBackend
    from gpuhub.service.app import Jobs, make_app

    api = await kube_client()
    names = {key: t.display_name for key, t in config.policy.gpu_types.items()}
    kube = KubernetesBackend(api, config.jobs, gpu_names=names)
    kfp = KFPBackend(api, config.jobs, config.kfp)
    hub_auth = HubAuth(
        api_token=os.environ.get("JUPYTERHUB_API_TOKEN", ""),
        cache_max_age=60,
    )
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/gpuhub/")
    url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL") or DEFAULT_URL)
    app = make_app(Jobs(config, kube, kfp), hub_auth, prefix)
    server = app.listen(url.port or 10101, address=url.hostname or "0.0.0.0")
    holds = None
    if config.jobs.kueue_queue:
        from gpuhub.service.holds import hold_queued_places
        from gpuhub.service.quota import HubQuota

        quota = HubQuota(hub_auth.api_url, hub_auth.api_token, kube.own_quota(None))
        holds = asyncio.create_task(hold_queued_places(kube, quota))
    log = logging.getLogger("gpuhub.service")
    log.info(
        "gpuhub jobs service on %s%s, namespace %s, pipelines %s, Kueue queue %s",
        url.geturl().rstrip("/"),
        prefix,
        config.namespace,
        config.kfp.endpoint or "not configured",
        config.jobs.kueue_queue or "not used",
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    if holds is not None:
        holds.cancel()
    server.stop()
    await kube.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuhub.service", description=__doc__)
    parser.add_argument("--config", required=True, help="the service's YAML configuration")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=os.environ.get(LOG_LEVEL_ENV, "INFO").upper(),
        format="[%(levelname)1.1s %(asctime)s %(name)s] %(message)s",
    )
    try:
        config = ServiceConfig.load(args.config)
    except ServiceConfigError as exc:
        print(f"gpuhub service: {args.config}: {exc}", file=sys.stderr)
        return 2
    asyncio.run(serve(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
