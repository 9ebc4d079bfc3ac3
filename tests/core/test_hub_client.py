"""The one client of the hub's gpuhub API: the URL, the token and the answers, as a stand-in
hub sees them, blocking and on the event loop."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import pytest
from tornado import web
from tornado.httpserver import HTTPServer

from gpuhub.core.hub_client import HubClient, HubUnreachable, cancel_notice_for_job

ENV = {
    "JUPYTERHUB_API_URL": "http://127.0.0.1:{port}/hub/api/",
    "JUPYTERHUB_API_TOKEN": "secret",
    "JUPYTERHUB_USER": "ada lovelace",
    "JUPYTERHUB_SERVER_NAME": "train",
}


class Recorder(web.RequestHandler):
    """Answers every call with what it was asked, or with ``answer`` when set."""

    def initialize(self, seen: list[dict[str, Any]], answer: tuple[int, bytes] | None) -> None:
        self.seen, self.answer = seen, answer

    def _record(self) -> None:
        self.seen.append(
            {
                "method": self.request.method,
                "path": self.request.path,
                "token": self.request.headers.get("Authorization"),
                "type": self.request.headers.get("Content-Type"),
                "body": self.request.body,
            }
        )
        if self.answer is not None:
            self.set_status(self.answer[0])
            self.finish(self.answer[1])
            return
        self.finish({"notices": [{"kind": "job", "jobs": ["j1"], "by": "root", "reason": "x"}]})

    get = post = _record


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _hub(answer: tuple[int, bytes] | None = None) -> tuple[HTTPServer, dict[str, str], list]:
    seen: list[dict[str, Any]] = []
    app = web.Application([(r"/.*", Recorder, {"seen": seen, "answer": answer})])
    port = _port()
    server = app.listen(port, address="127.0.0.1")
    env = {k: v.format(port=port) for k, v in ENV.items()}
    return server, env, seen


def test_outside_jupyterhub_there_is_no_client() -> None:
    assert HubClient.from_env({}) is None
    assert HubClient.from_env({**ENV, "JUPYTERHUB_API_TOKEN": ""}) is None
    assert cancel_notice_for_job("j1", {}) is None


def test_urls_are_per_user_and_quoted() -> None:
    hub = HubClient.from_env(ENV)
    assert hub is not None and hub.server == "train"
    assert hub.url("reclaim", "keep") == (
        "http://127.0.0.1:{port}/hub/api/gpuhub/reclaim/ada%20lovelace/keep"
    )
    # A service's client names no one user; every part of a path is quoted.
    service = HubClient("http://hub:8081/hub/api", "service-token")
    assert service.url("grants") == "http://hub:8081/hub/api/gpuhub/grants"
    assert HubClient(service.api_url, service.token, "ada").url("grants", "a/b") == (
        "http://hub:8081/hub/api/gpuhub/grants/ada/a%2Fb"
    )


async def test_calls_carry_the_servers_token_and_json() -> None:
    server, env, seen = await _hub()
    try:
        hub = HubClient.from_env(env)
        assert hub is not None
        answer = await hub.call("POST", "reclaim", "keep", body={"server": "train"})
        assert answer.code == 200 and answer.json()["notices"]
        assert seen[-1] == {
            "method": "POST",
            "path": "/hub/api/gpuhub/reclaim/ada%20lovelace/keep",
            "token": "token secret",
            "type": "application/json",
            "body": b'{"server": "train"}',
        }
        # Blocking, for a job's thread: the notice of an admin's cancel.
        found = await asyncio.to_thread(cancel_notice_for_job, "j1", env)
        assert found == ("root", "x")
        assert seen[-1]["path"] == "/hub/api/gpuhub/notices/ada%20lovelace"
        assert seen[-1]["token"] == "token secret"
    finally:
        server.stop()


async def test_any_status_is_an_answer_and_silence_is_unreachable() -> None:
    server, env, _ = await _hub((404, b"not json"))
    try:
        hub = HubClient.from_env(env)
        assert hub is not None
        answer = await hub.call("GET", "holdings")
        assert (answer.code, answer.json()) == (404, None)
        assert await asyncio.to_thread(cancel_notice_for_job, "j1", env) is None
    finally:
        server.stop()
    hub = HubClient.from_env({**env, "JUPYTERHUB_API_URL": f"http://127.0.0.1:{_port()}/"})
    assert hub is not None
    with pytest.raises(HubUnreachable):
        await hub.call("GET", "holdings", timeout=5)


def test_a_blocking_get_returns_the_json() -> None:
    async def serve_and_get() -> Any:
        server, env, _ = await _hub((200, json.dumps({"held": 1}).encode()))
        try:
            hub = HubClient.from_env(env)
            assert hub is not None
            return await asyncio.to_thread(hub.get_json, "holdings")
        finally:
            server.stop()

    assert asyncio.run(serve_and_get()) == {"held": 1}
