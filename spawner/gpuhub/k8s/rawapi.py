"""Raw JSON from the Kubernetes API, for every backend that talks to it.

The jobs service's backends (:mod:`gpuhub.jobs.k8s.backend`, :mod:`gpuhub.jobs.pipeline`)
make their ``kubernetes_asyncio`` calls with ``_preload_content=False`` and read the answer
here: plain JSON, the objects as the apiserver wrote them (no model round trip), and a
non-2xx answer raised as the ``ApiException`` the preloading path would raise.

Importing this module costs nothing: ``kubernetes_asyncio`` is imported only on an error.
"""

from __future__ import annotations

import json
from typing import Any


async def request_json(call: Any) -> Any:
    """Await a ``kubernetes_asyncio`` call made with ``_preload_content=False``: its JSON."""
    return json.loads(await request_body(call))


async def request_body(call: Any) -> bytes:
    """The raw body of a ``_preload_content=False`` call (see :func:`read_body`)."""
    return await read_body(await call)


async def read_body(response: Any) -> bytes:
    """The raw body of an answer already received (aiohttp's response); non-2xx raise
    ``ApiException`` as the preloading path would (kubernetes_asyncio skips that check
    without preloading)."""
    try:
        data: bytes = await response.read()
        if not 200 <= response.status <= 299:
            from kubernetes_asyncio.client.exceptions import ApiException

            exc = ApiException(status=response.status, reason=response.reason)
            exc.body = data
            raise exc
        return data
    finally:
        response.release()


async def get_json(api: Any, path: str, query: list[tuple[str, str]] | None = None) -> Any:
    """GET ``path`` (``query``: its query parameters) through the ``kubernetes_asyncio``
    ``ApiClient`` ``api``, with its credentials: the JSON answer (non-2xx raise)."""
    return await request_json(
        api.call_api(
            path, "GET", query_params=query, auth_settings=["BearerToken"], _preload_content=False
        )
    )


async def served_resources(
    api: Any, group: str, version: str, missing: tuple[int, ...] = (404,)
) -> set[str] | None:
    """The resource names that discovery (``/apis/<group>/<version>``) lists, through the
    ``kubernetes_asyncio`` ``ApiClient`` ``api``; None where that group version is not
    served (an answer whose HTTP status is in ``missing``; others raise)."""
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        doc = await get_json(api, f"/apis/{group}/{version}")
    except ApiException as exc:
        if exc.status not in missing:
            raise
        return None
    return {str(r.get("name")) for r in doc.get("resources") or []}
