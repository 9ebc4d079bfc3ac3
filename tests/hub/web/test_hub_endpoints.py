"""gpuhub's endpoints in the hub, through a real JupyterHub: every one answers a wrong method
with 405 and a request without credentials with 403 (never a 500), and what a user holds,
their idle clocks, notices, "Keep my GPUs" and closing a notice need access to the user's
servers, not a token that only identifies them (what OAuth gives every service a user logs in
to); what a caller sends is bounded, and so is what a refusal says back of it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from harness.hub.process import API_TOKEN, Hub, spawn, start_hub, stop, wait_ready
from tests.support.hub.local import jobs_hub_config, server_env

pytestmark = pytest.mark.e2e

ENDPOINTS = """
c.Authenticator.admin_users = {"root"}
c.LocalGPUSpawner.gpu_idle_reclaim = {
    "after": 3600, "utilization_below": 0.05, "warn": 600, "max_postpones": 100
}
c.LocalGPUSpawner.gpu_monitor_interval = 0.5
c.JupyterHub.allow_named_servers = True
# JupyterHub's sharing: users may share their servers (the shares scope is not given by default).
c.JupyterHub.load_roles.append(
    {"name": "user", "scopes": ["self", "shares!user", "read:users:name"]}
)
from gpuhub.hub.web.api import configure_hub

configure_hub(c)
"""
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD")
# Every gpuhub route in the hub and the methods it serves.
ROUTES = {
    "/hub/api/gpuhub/holdings/alice": {"GET"},
    "/hub/api/gpuhub/reclaim/alice": {"GET"},
    "/hub/api/gpuhub/reclaim/alice/keep": {"POST"},
    "/hub/api/gpuhub/notices/alice": {"GET"},
    "/hub/api/gpuhub/notices/alice/dismiss": {"POST"},
    "/hub/api/gpuhub/grants": {"POST"},
    "/hub/api/gpuhub/grants/alice/train-1": {"PUT", "DELETE"},
    "/hub/gpuhub/fleet": {"GET"},
    "/hub/gpuhub/fleet/stop": {"POST"},
    "/hub/gpuhub/fleet/cancel": {"POST"},
    "/hub/gpuhub/calendar": {"GET"},
    "/hub/api/gpuhub/bookings": {"GET", "POST"},
    "/hub/api/gpuhub/bookings/b-0": {"DELETE"},
}
PAGES = {"/hub/gpuhub/fleet", "/hub/gpuhub/calendar"}  # a browser is sent to log in


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    workdir: Path = tmp_path_factory.mktemp("endpoints-hub")
    hub = start_hub(workdir, jobs_hub_config(workdir) + ENDPOINTS)
    try:
        for name in ("alice", "bob"):
            hub.api("POST", f"/users/{name}")
        yield hub
    finally:
        hub.api("DELETE", "/users/alice/server")
        hub.stop()


def call(hub: Hub, method: str, path: str, token: str | None = None) -> requests.Response:
    headers = {"Authorization": f"token {token}"} if token else {}
    return requests.request(
        method, hub.url + path, headers=headers, json={}, timeout=30, allow_redirects=False
    )


def test_wrong_methods_answer_405_and_no_credentials_403_never_500(hub: Hub) -> None:
    for path, served in ROUTES.items():
        for method in METHODS:
            for token in (None, API_TOKEN):
                answer = call(hub, method, path, token)
                assert answer.status_code < 500, (method, path, answer.status_code, answer.text)
                if method not in served:
                    assert answer.status_code == 405, (method, path, token, answer.status_code)
                elif token is None:
                    # Pages send a browser to the login page; everything else: 403.
                    expected = 302 if method == "GET" and path in PAGES else 403
                    assert answer.status_code == expected, (method, path, answer.status_code)
    # With credentials, the served methods do their work, or say what is missing.
    assert call(hub, "GET", "/hub/api/gpuhub/holdings/alice", API_TOKEN).status_code == 200
    grants = call(hub, "POST", "/hub/api/gpuhub/grants", API_TOKEN)  # an admin, not the service
    assert grants.status_code == 403 and "custom:gpuhub:grants" in grants.json()["message"]


def token(hub: Hub, user: str, scopes: list[str] | None = None) -> str:
    body = {"scopes": scopes} if scopes is not None else {}
    answer = hub.api("POST", f"/users/{user}/tokens", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()["token"]


def test_identify_only_tokens_read_and_keep_nothing(hub: Hub) -> None:
    reads = (
        "/hub/api/gpuhub/holdings/alice",
        "/hub/api/gpuhub/reclaim/alice",
        "/hub/api/gpuhub/notices/alice",
    )
    keep = "/hub/api/gpuhub/reclaim/alice/keep"
    # What OAuth gives a service alice logs in to: her name (and groups), nothing more.
    for scopes in (["read:users:name!user"], ["read:users:name!user", "read:users:groups!user"]):
        identify = token(hub, "alice", scopes)
        for path in (*reads, keep):
            method = "POST" if path == keep else "GET"
            answer = call(hub, method, path, identify)
            assert answer.status_code == 403, (path, answer.status_code, answer.text)
            assert "access:servers!user=alice" in answer.json()["message"]
        # Nor does it book GPUs in her name.
        booked = call(hub, "POST", "/hub/api/gpuhub/bookings", identify)
        assert booked.status_code == 403 and "access:servers!user=alice" in booked.text
    # Access to her servers: a token with that scope, her own full token, her server's.
    assert spawn(hub, "alice", {"gpus": 1}).status_code in (201, 202)
    wait_ready(hub, "alice")
    server = server_env(hub, "alice")["JUPYTERHUB_API_TOKEN"]
    # Her server's idle clock runs (a GPU whose use cannot be read is never idle, but timed).
    deadline = time.monotonic() + 60
    while "" not in call(hub, "GET", reads[1], API_TOKEN).json()["servers"]:
        assert time.monotonic() < deadline, hub.log()[-3000:]
        time.sleep(0.3)
    for allowed in (token(hub, "alice", ["access:servers!user"]), token(hub, "alice"), server):
        for path in reads:
            answer = call(hub, "GET", path, allowed)
            assert answer.status_code == 200, (path, answer.status_code, answer.text)
        kept = requests.post(
            hub.url + keep,
            json={"server": ""},
            headers={"Authorization": f"token {allowed}"},
            timeout=30,
        )
        assert kept.status_code == 200 and kept.json()["warned"] is False, kept.text
    assert call(hub, "GET", reads[0], server).json()["holdings"][0]["devices"] == [0]
    # Another user, with every scope of their own, learns nothing about alice.
    bob = token(hub, "bob")
    assert call(hub, "GET", reads[0], bob).status_code == 404
    for path in reads[1:]:
        assert call(hub, "GET", path, bob).status_code == 403


def test_closing_a_notice_needs_access_to_the_users_servers_and_answers_in_bounds(
    hub: Hub,
) -> None:
    # A notice for bob: an admin stops his server from the fleet page, saying why.
    assert spawn(hub, "bob", {"gpus": 0}).status_code in (201, 202)
    wait_ready(hub, "bob")
    root = hub.login("root")
    root.get(f"{hub.url}/hub/gpuhub/fleet", timeout=30)
    stop = {
        "target": "bob/",
        "reason": "maintenance",
        "_xsrf": root.cookies.get("_xsrf", path="/hub/"),
    }
    done = root.post(
        f"{hub.url}/hub/gpuhub/fleet/stop", data=stop, timeout=60, allow_redirects=False
    )
    assert done.status_code == 303, done.text[-2000:]
    full = token(hub, "bob")

    def open_notices() -> list[dict[str, object]]:
        answer = call(hub, "GET", "/hub/api/gpuhub/notices/bob", full)
        assert answer.status_code == 200, answer.text
        return [n for n in answer.json()["notices"] if n["kind"] == "server" and not n["dismissed"]]

    def dismiss(with_token: str, body: object) -> requests.Response:
        return requests.post(
            f"{hub.url}/hub/api/gpuhub/notices/bob/dismiss",
            headers={"Authorization": f"token {with_token}"},
            json=body,
            timeout=30,
        )

    [notice] = open_notices()
    # A token that only identifies bob (any service he logged in to) closes nothing...
    identify = token(hub, "bob", ["read:users:name!user"])
    refused = dismiss(identify, {"key": notice["key"]})
    assert refused.status_code == 403, refused.text
    assert "access:servers!user=bob" in refused.json()["message"]
    # ...nor does anyone else, with every scope of their own.
    assert dismiss(token(hub, "alice"), {"key": notice["key"]}).status_code == 403
    assert open_notices() == [notice]
    # What is sent is bounded, and so is what a refusal says back of it.
    long_key = dismiss(full, {"key": "k" * 10_000})
    assert long_key.status_code == 404, long_key.text
    message = long_key.json()["message"]
    assert message.startswith('bob has no notice "kkkk') and message.endswith("kkk....")
    assert len(long_key.content) < 400
    megabyte = dismiss(full, {"key": "k" * 10**6})
    assert megabyte.status_code == 413 and len(megabyte.content) < 400
    assert "at most 16384 bytes" in megabyte.json()["message"]
    not_a_key = dismiss(full, ["k" * 10_000])
    assert not_a_key.status_code == 400 and len(not_a_key.content) < 400
    assert open_notices() == [notice]
    # The fleet page's form says back no more of what it was given than that.
    target = {"target": "bob/" + "s" * 10_000, "reason": "r", "_xsrf": stop["_xsrf"]}
    long_target = root.post(f"{hub.url}/hub/gpuhub/fleet/stop", data=target, timeout=30)
    assert long_target.status_code == 400 and "s" * 700 not in long_target.text
    assert "at most 600 characters; this one has 10004." in long_target.text
    # Access to his servers closes it.
    allowed = dismiss(token(hub, "bob", ["access:servers!user"]), {"key": notice["key"]})
    assert allowed.status_code == 204, allowed.text
    assert open_notices() == []


def test_a_shared_server_reaches_that_server_never_its_owners_gpu_facts(hub: Hub) -> None:
    """Issue 39: bob shares a server with carol through JupyterHub's sharing API. Her token
    then reaches that server, and none of bob's user-wide facts: his holdings (with his
    budget and its grant reasons), notices, idle clocks, "Keep my GPUs", closing notices."""
    assert hub.api("POST", "/users/carol").status_code in (201, 409)
    assert spawn(hub, "bob", {"gpus": 0}, server="x").status_code in (201, 202)
    wait_ready(hub, "bob", "x")
    bob = hub.login("bob")
    shared = bob.post(
        f"{hub.url}/hub/api/shares/bob/x",
        json={"user": "carol"},
        headers={"X-XSRFToken": bob.cookies.get("_xsrf", path="/hub/") or ""},
        timeout=30,
    )
    assert shared.status_code in (200, 201), shared.text
    carol = token(hub, "carol")
    scopes = requests.get(
        f"{hub.url}/hub/api/user", headers={"Authorization": f"token {carol}"}, timeout=30
    ).json()["scopes"]
    assert "access:servers!server=bob/x" in scopes, scopes
    # The share is real: carol reaches bob's server x itself.
    status = requests.get(
        f"{hub.url}/user/bob/x/api/status",
        headers={"Authorization": f"token {carol}"},
        timeout=30,
    )
    assert status.status_code == 200, status.text
    # Nothing of bob's own: not even whether he exists, for his holdings.
    assert call(hub, "GET", "/hub/api/gpuhub/holdings/bob", carol).status_code == 404
    for path in ("/hub/api/gpuhub/notices/bob", "/hub/api/gpuhub/reclaim/bob"):
        answer = call(hub, "GET", path, carol)
        assert answer.status_code == 403, (path, answer.status_code, answer.text)
    for path, body in (
        ("/hub/api/gpuhub/reclaim/bob/keep", {"server": "x"}),
        ("/hub/api/gpuhub/notices/bob/dismiss", {"key": "any"}),
    ):
        answer = requests.post(
            hub.url + path, json=body, headers={"Authorization": f"token {carol}"}, timeout=30
        )
        assert answer.status_code == 403, (path, answer.status_code, answer.text)
    # bob's own token still reads them all.
    own = token(hub, "bob")
    for path in (
        "/hub/api/gpuhub/holdings/bob",
        "/hub/api/gpuhub/notices/bob",
        "/hub/api/gpuhub/reclaim/bob",
    ):
        assert call(hub, "GET", path, own).status_code == 200, path
    stop(hub, "bob", "x")
