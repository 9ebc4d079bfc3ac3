"""How the admin's policy reaches a user's Jupyter server: two environment variables.

Both spawners write them (:meth:`GPUSpawnerMixin.get_env`); the server extension reads
them as the defaults of its ``GPUHubJobs`` config, so a standalone ``jupyter lab`` sets the
same keys in ``jupyter_server_config.py`` instead. Locally the policy only shapes the
choices and messages (local jobs use the server's own GPUs); in Kubernetes mode the hub
service enforces it again with the hub's copy, so a user editing their environment gains
nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from gpuhub.core.env import GROUPS_ENV, POLICY_ENV
from gpuhub.core.policy_traits import POLICY_KEYS


def policy_env(policy_config: Mapping[str, Any], groups: Iterable[str]) -> dict[str, str]:
    """The environment a spawner adds for the user's server."""
    config = {k: policy_config[k] for k in POLICY_KEYS if k in policy_config}
    return {
        # Not sort_keys: the form lists the admin's order (the default is said or sorted).
        POLICY_ENV: json.dumps(config, default=str),
        GROUPS_ENV: json.dumps(sorted(groups)),
    }


def read_policy_env(environ: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """The policy config and groups from the environment ({} and [] when absent).

    Raises ``ValueError`` naming the variable when it is not what a spawner writes.
    """
    config: dict[str, Any] = {}
    groups: list[str] = []
    if environ.get(POLICY_ENV):
        try:
            loaded = json.loads(environ[POLICY_ENV])
        except json.JSONDecodeError as exc:
            raise ValueError(f"{POLICY_ENV} is not valid JSON: {exc}") from None
        if not isinstance(loaded, dict):
            raise ValueError(f"{POLICY_ENV} must be a JSON object")
        config = {k: v for k, v in loaded.items() if k in POLICY_KEYS}
    if environ.get(GROUPS_ENV):
        try:
            loaded = json.loads(environ[GROUPS_ENV])
        except json.JSONDecodeError as exc:
            raise ValueError(f"{GROUPS_ENV} is not valid JSON: {exc}") from None
        if not isinstance(loaded, list) or not all(isinstance(g, str) for g in loaded):
            raise ValueError(f"{GROUPS_ENV} must be a JSON list of group names")
        groups = loaded
    return config, groups
