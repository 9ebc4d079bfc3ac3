"""The one client of the hub's gpuhub API (``/hub/api/gpuhub``, :mod:`gpuhub.hub.web.api`)
from a user's server or a job: the address and the token come from the environment JupyterHub
gives every server (``JUPYTERHUB_API_URL``, ``JUPYTERHUB_API_TOKEN``, ``JUPYTERHUB_USER``).
"""

from __future__ import annotations

import json
import logging
import os

log = logging.getLogger("gpuhub.core.hub_client")


def cancel_notice_for_job(
    job_id: str, environ: dict[str, str] | None = None, timeout: float = 3.0
) -> tuple[str, str] | None:
    """``(admin, reason)`` if the hub says an admin cancelled this server's user's job
    ``job_id`` from the fleet page (``GET /hub/api/gpuhub/notices/<user>`` with the server's
    own token); None otherwise, and when there is no hub to ask or it does not answer.
    Blocking: call it in a thread."""
    import urllib.parse
    import urllib.request

    env = dict(os.environ if environ is None else environ)
    api, token, user = (
        env.get("JUPYTERHUB_API_URL"),
        env.get("JUPYTERHUB_API_TOKEN"),
        env.get("JUPYTERHUB_USER"),
    )
    if not (api and token and user):
        return None
    url = f"{api.rstrip('/')}/gpuhub/notices/{urllib.parse.quote(user, safe='')}"
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            data = json.loads(answer.read())
    except (OSError, ValueError) as exc:
        log.debug("gpuhub: cannot ask the hub about job %s: %s", job_id, exc)
        return None
    for notice in data.get("notices") or []:
        if notice.get("kind") == "job" and job_id in (notice.get("jobs") or []):
            return str(notice.get("by", "")), str(notice.get("reason", ""))
    return None
