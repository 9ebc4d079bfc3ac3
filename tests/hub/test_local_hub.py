"""LocalGPUSpawner end to end: a real JupyterHub, the real proxy, real single-user servers.

The workstation here has no GPU, so the hub is told the indices (``gpu_devices``), which is
what docs/architecture.md offers when NVML is unavailable; the allocator and CUDA_VISIBLE_DEVICES are real.
"""

from __future__ import annotations

import html
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from harness.hub.process import Hub, spawn_json, start_hub
from tests.support.hub.local import LOCAL_HUB_CONFIG as CONFIG
from tests.support.hub.local import server_env, server_state

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    hub = start_hub(tmp_path_factory.mktemp("local-hub"), CONFIG)
    try:
        yield hub
    finally:
        for name in ("alice", "bob", "carol", "dave"):
            hub.api("DELETE", f"/users/{name}/server")
        hub.stop()


@pytest.fixture(autouse=True)
def no_servers_left(hub: Hub) -> Iterator[None]:
    yield
    for name in ("alice", "bob", "carol", "dave"):
        model = hub.api("GET", f"/users/{name}")
        if model.status_code == 200 and model.json().get("servers"):
            hub.stop_server(name)


def csrf_post(session: requests.Session, url: str, data: dict[str, str]) -> requests.Response:
    xsrf = session.cookies.get("_xsrf", path="/hub/")
    return session.post(url, data={**data, "_xsrf": xsrf}, allow_redirects=False, timeout=60)


def test_spawn_through_the_form_and_come_back_to_prefilled_choices(hub: Hub) -> None:
    session = hub.login("alice")
    page = session.get(f"{hub.url}/hub/spawn", timeout=30)
    assert page.status_code == 200
    assert 'name="gpus"' in page.text and 'max="3"' in page.text
    assert "Default &lt;b&gt;env&lt;/b&gt;" in page.text  # admin display names are escaped
    assert "3 of 3 free now" in page.text

    response = csrf_post(
        session,
        f"{hub.url}/hub/spawn",
        {"image": "default", "cpu": "2", "memory": "2G", "gpus": "2", "gpu_type": "gpu"},
    )
    assert response.status_code == 302, response.text
    hub.wait_for_server("alice")
    assert server_env(hub, "alice")["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert server_state(hub, "alice")["gpus"] == [0, 1]
    lab = session.get(f"{hub.url}/user/alice/lab", timeout=30)
    assert lab.status_code == 200 and "JupyterLab" in lab.text

    hub.stop_server("alice")
    again = session.get(f"{hub.url}/hub/spawn", timeout=30).text
    assert re.search(r'name="cpu"[^>]*value="2"', again)
    assert re.search(r'name="memory"[^>]*value="2G"', again)
    assert re.search(r'name="gpus"[^>]*value="2"', again)


def test_refused_form_rerenders_with_the_message_and_values(hub: Hub) -> None:
    session = hub.login("bob")
    response = csrf_post(
        session,
        f"{hub.url}/hub/spawn",
        {"cpu": "1", "memory": "1G", "gpus": "2", "gpu_type": "gpu"},
    )
    assert response.status_code == 400
    assert "You may use at most 1" in response.text
    assert re.search(r'name="gpus"[^>]*value="2"', response.text)
    assert not hub.user_model("bob")["servers"]
    # The hub log says it once, as a warning: a refusal is not the hub's error.
    log = hub.log_path.read_text()
    refused = [line for line in log.splitlines() if "You may use at most 1" in line]
    assert any(" Refused options for bob: " in line for line in refused), refused
    assert not any(line.startswith("[E") for line in refused), refused
    assert "Traceback" not in log


# What Chromium sends with a navigation from one of the hub's own pages, and from another site
# ("{hub}": the hub's URL, filled in by sent()).
FROM_THE_HUB = {
    "Sec-Fetch-Site": "same-origin",
    "Sec-Fetch-Mode": "navigate",
    "Referer": "{hub}/hub/home",
}
FROM_ELSEWHERE = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
# A page of a user's server shares the hub's origin (no subdomain_host): not the hub's page.
FROM_A_SERVER = {
    "Sec-Fetch-Site": "same-origin",
    "Sec-Fetch-Mode": "navigate",
    "Referer": "{hub}/user/carol/files/evil.html",
}


def sent(headers: dict[str, str], hub: Hub) -> dict[str, str]:
    """``headers`` with the hub's URL filled in."""
    return {name: value.replace("{hub}", hub.url) for name, value in headers.items()}


LINK = "opt-gpus=2&opt-gpu_type=gpu&opt-cpu=1.5&opt-memory=1G"


def test_a_spawn_link_with_opt_options_starts_that_server(hub: Hub) -> None:
    """JupyterHub 6's spawn links: ``/hub/spawn?opt-<field>=…``, followed from the hub's own
    pages, starts the server with those options, through the same reshaping and validation
    as the form."""
    session = hub.login("alice")
    response = session.get(
        f"{hub.url}/hub/spawn?{LINK}",
        headers=sent(FROM_THE_HUB, hub),
        allow_redirects=False,
        timeout=60,
    )
    assert response.status_code == 302, response.text
    assert "/hub/spawn-pending/alice" in response.headers["Location"]
    hub.wait_for_server("alice")
    assert server_state(hub, "alice")["gpus"] == [0, 1]
    env = server_env(hub, "alice")
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    # Kept as the link gave them (the GPU count as a number), as a form's fields are.
    options = hub.user_model("alice")["servers"][""]["user_options"]
    assert options == {"gpus": 2, "gpu_type": "gpu", "cpu": "1.5", "memory": "1G"}


def field_value(page: str, name: str) -> str | None:
    """The value an input of the form is filled in with."""
    found = re.search(rf'<input[^>]*name="{name}"[^>]*value="([^"]*)"', page)
    return html.unescape(found[1]) if found else None


@pytest.mark.parametrize(
    "headers",
    [
        FROM_ELSEWHERE,
        {"Sec-Fetch-Site": "same-site"},  # a sibling subdomain is another site too
        {"Sec-Fetch-Site": "none"},  # typed or bookmarked: nothing says it is wanted
        {},  # no Sec-Fetch-* and no Referer: an old browser or a script
        {"Referer": "https://elsewhere.example/gpus.html"},
        FROM_A_SERVER,
        {"Referer": "{hub}/user/carol/files/evil.html"},  # an old browser, from a server
        {"Referer": "{hub}/hub/../user/carol/evil.html"},
        {"Referer": "{hub}/hub/%2e%2e/user/carol/evil.html"},
        {"Sec-Fetch-Site": "same-origin"},  # which page is not said
    ],
    ids=[
        "cross-site",
        "same-site",
        "typed",
        "no-headers",
        "foreign-referer",
        "server-page",
        "server-page-referer",
        "dot-dot",
        "escaped-dot-dot",
        "same-origin-unsaid",
    ],
)
def test_a_spawn_link_from_elsewhere_starts_nothing_until_the_user_confirms(
    hub: Hub, headers: dict[str, str]
) -> None:
    """A link on another site to ``/hub/spawn?opt-gpus=2…`` reaches the hub with the login
    cookie and no XSRF token: the form, filled in with what the link asks for, says why
    nothing started; no server, no GPU held. The user's own submit starts it."""
    session = hub.login("alice")
    page = session.get(
        f"{hub.url}/hub/spawn?{LINK}", headers=sent(headers, hub), allow_redirects=False, timeout=60
    )
    assert page.status_code == 200, page.text[-2000:]
    notice = re.search(r'id="gpuhub-link-notice"[^>]*>([^<]*)<', page.text)
    assert notice, page.text[-4000:]
    assert html.unescape(notice[1]).startswith("Nothing has started yet: this link to start")
    assert "Error:" not in page.text  # a question to the user, not JupyterHub's red error
    assert (field_value(page.text, "gpus"), field_value(page.text, "cpu")) == ("2", "1.5")
    assert field_value(page.text, "memory") == "1G"
    assert "3 of 3 free now" in page.text  # nothing taken
    assert not hub.user_model("alice")["servers"]
    # Another user may take every GPU: the link holds none.
    assert spawn_json(hub, "bob", {"gpus": 1}).status_code in (201, 202)
    hub.wait_for_server("bob")
    assert server_state(hub, "bob")["gpus"] == [0]
    hub.stop_server("bob")

    # The user confirms: the form's submit (with JupyterHub's XSRF token) starts the server.
    confirmed = csrf_post(
        session,
        f"{hub.url}/hub/spawn",
        {"cpu": "1.5", "memory": "1G", "gpus": "2", "gpu_type": "gpu"},
    )
    assert confirmed.status_code == 302, confirmed.text[-2000:]
    hub.wait_for_server("alice")
    assert server_state(hub, "alice")["gpus"] == [0, 1]
    log = hub.log()
    assert "from outside the hub (Sec-Fetch-Site:" in log
    assert "Traceback" not in log and "Failed to spawn single-user server" not in log


@pytest.mark.parametrize("query", [LINK, "opt-gpus=0"], ids=["gpus", "cpu-only"])
def test_a_spawn_link_with_the_hubs_own_referer_starts_at_once(hub: Hub, query: str) -> None:
    """A browser too old to send ``Sec-Fetch-Site`` still sends the page the link was on:
    one of the hub's own pages starts the server as a link on the hub always did (CPU-only
    links go by the same rule as GPU ones)."""
    session = hub.login("alice")
    response = session.get(
        f"{hub.url}/hub/spawn?{query}",
        headers={"Referer": f"{hub.url}/hub/home"},
        allow_redirects=False,
        timeout=60,
    )
    assert response.status_code == 302, response.text[-2000:]
    hub.wait_for_server("alice")


def test_a_refused_rest_spawn_is_never_offered_by_the_form(hub: Hub) -> None:
    """The options the form offers are those a server last started with: a spawn the REST
    API refused (JupyterHub stores its options before any check) is not, not even at once."""
    session = hub.login("carol")
    refused = spawn_json(hub, "carol", {"memory": "16 GB", "cpu": "3"})
    assert refused.status_code == 400, refused.text
    form = session.get(f"{hub.url}/hub/spawn", timeout=30).text
    assert (field_value(form, "memory"), field_value(form, "cpu")) == ("1G", "1")  # defaults
    assert "16 GB" not in form and 'aria-invalid="true"' not in form

    started = spawn_json(hub, "carol", {"memory": "2G", "cpu": 2})
    assert started.status_code in (201, 202), started.text
    hub.wait_for_server("carol")
    hub.stop_server("carol")
    for body in ({"memory": "16 GB"}, {"gpus": 2, "gpu_type": "gpu", "memory": "3G"}):
        assert spawn_json(hub, "carol", body).status_code == 400
        form = session.get(f"{hub.url}/hub/spawn", timeout=30).text
        assert (field_value(form, "memory"), field_value(form, "cpu")) == ("2G", "2")
        assert field_value(form, "gpus") == "0"
    # JupyterHub 6 starts a server with the stored options when the body is null: the
    # accepted ones, not the refused.
    again = hub.api("POST", "/users/carol/server", data="null")
    assert again.status_code in (201, 202), again.text
    hub.wait_for_server("carol")
    assert hub.user_model("carol")["servers"][""]["user_options"] == {"memory": "2G", "cpu": 2}


@pytest.mark.parametrize(
    ("query", "rest_body", "typed"),
    [
        # Over the students' limit: the sentence the form and the REST API give.
        ("opt-gpus=2&opt-gpu_type=gpu", {"gpus": 2, "gpu_type": "gpu"}, ("gpus", "2")),
        # A misspelt option is refused by name, not dropped (a server without GPUs).
        ("opt-gpu=1", {"gpu": 1}, None),
        ("opt-cpu=lots", {"cpu": "lots"}, ("cpu", "lots")),
    ],
    ids=["over-limit", "misspelt", "bad-cpu"],
)
@pytest.mark.parametrize("headers", [FROM_THE_HUB, FROM_ELSEWHERE], ids=["hub", "elsewhere"])
def test_a_refused_spawn_link_renders_the_form_with_the_rest_apis_sentence(
    hub: Hub,
    query: str,
    rest_body: dict[str, Any],
    typed: tuple[str, str] | None,
    headers: dict[str, str],
) -> None:
    """Wherever the link came from, options no submit could start get the same sentence."""
    rest = spawn_json(hub, "bob", rest_body)
    assert rest.status_code == 400, rest.text
    sentence = rest.json()["message"]

    session = hub.login("bob")
    page = session.get(
        f"{hub.url}/hub/spawn?{query}",
        headers=sent(headers, hub),
        allow_redirects=False,
        timeout=60,
    )
    assert page.status_code == 400, page.text
    assert sentence in html.unescape(page.text)
    if typed:  # the form comes back with what the link asked for, to correct
        assert re.search(rf'name="{typed[0]}"[^>]*value="{re.escape(typed[1])}"', page.text)
    assert not hub.user_model("bob")["servers"]
    assert "Traceback" not in hub.log_path.read_text()


BAD_OPTIONS = [
    ({"cpu": 64}, "cpu"),
    ({"cpu": "two"}, "cpu"),
    ({"memory": "1T"}, "memory"),
    ({"memory": ["8G"]}, "memory"),
    ({"gpus": 2}, "gpus"),
    ({"gpus": "1; rm -rf /"}, "gpus"),
    ({"gpus": 1, "gpu_type": "h100"}, "gpu_type"),
    ({"image": "x:1; rm -rf /"}, "image"),
    ({"image": "docker.io/evil/miner:latest"}, "image"),
    ({"gpu": 1}, "gpu"),
]


@pytest.mark.parametrize(("options", "field"), BAD_OPTIONS)
def test_rest_refusals_are_400_naming_the_field(
    hub: Hub, options: dict[str, Any], field: str
) -> None:
    response = spawn_json(hub, "bob", options)
    assert response.status_code == 400, response.text
    message = response.json()["message"]
    assert field.split("_")[0] in message.lower() and "." in message
    assert not hub.user_model("bob")["servers"]


def test_users_get_disjoint_gpus_and_a_third_waits_for_one(hub: Hub) -> None:
    assert spawn_json(hub, "alice", {"gpus": 2}).status_code in (201, 202)
    assert spawn_json(hub, "bob", {"gpus": 1}).status_code in (201, 202)
    hub.wait_for_server("alice")
    hub.wait_for_server("bob")
    alice = set(server_state(hub, "alice")["gpus"])
    bob = set(server_state(hub, "bob")["gpus"])
    assert len(alice) == 2 and len(bob) == 1 and not alice & bob
    assert server_env(hub, "bob")["CUDA_VISIBLE_DEVICES"] == str(next(iter(bob)))

    refused = spawn_json(hub, "carol", {"gpus": 1})
    assert refused.status_code == 409
    assert "0 of 3 are free now" in refused.json()["message"]
    assert not hub.user_model("carol")["servers"]

    # A CPU-only server still starts, and sees no GPU.
    assert spawn_json(hub, "dave", {"gpus": 0}).status_code in (201, 202)
    hub.wait_for_server("dave")
    assert server_env(hub, "dave")["CUDA_VISIBLE_DEVICES"] == ""

    hub.stop_server("bob")
    assert spawn_json(hub, "carol", {"gpus": 1}).status_code in (201, 202)
    hub.wait_for_server("carol")
    assert set(server_state(hub, "carol")["gpus"]) == bob


def test_allocations_survive_a_hub_restart(tmp_path: Path) -> None:
    config = CONFIG + "\nc.JupyterHub.cleanup_servers = False\n"
    first = start_hub(tmp_path, config)
    try:
        assert spawn_json(first, "alice", {"gpus": 2}).status_code in (201, 202)
        first.wait_for_server("alice")
        held = server_state(first, "alice")["gpus"]
    finally:
        first.stop()
    # Same database, same proxy port: the hub finds alice's server still running.
    second = start_hub(tmp_path, config, port=first.port)
    try:
        model = second.wait_for_server("alice")
        assert model["servers"][""]["state"]["gpus"] == held
        refused = spawn_json(second, "bob", {"gpus": 1})
        assert refused.status_code in (201, 202), refused.text
        second.wait_for_server("bob")
        assert server_state(second, "bob")["gpus"] == [2]  # not one of alice's
        assert spawn_json(second, "carol", {"gpus": 1}).status_code == 409
    finally:
        for name in ("alice", "bob"):
            second.api("DELETE", f"/users/{name}/server")
            second.wait_for_server(name, ready=False)
        second.stop()
        shutil.rmtree(tmp_path / "gpuhub-users", ignore_errors=True)
