"""GPU servers wait in Kueue's queue: a real JupyterHub with ``GPUSpawner.kueue_queue_name`` on
the test cluster with the real Kueue (its pod integration, localk8s/addons.py).

The ClusterQueue has one simulated GPU of quota on the process node, so the first GPU server
starts and the next ones wait: Kueue gates their pods, the spawn page's progress says what of
the queue's GPUs is in use (its ClusterQueue) and the place in line and what is in front
(Kueue's visibility API), leaving the line deletes the pod, and a stopped server lets the
next one in.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from harness.cluster import PROCESS_NODE_SELECTOR, Kube
from harness.hub.kube import hub_config
from harness.hub.process import Hub, spawn, start_hub, stop, wait_ready
from tests.support.browser.chromium import artifact, chromium
from tests.support.kueue import KUEUE, kueue_queues

pytestmark = pytest.mark.e2e

QUEUE = "servers"
GATE = "kueue.x-k8s.io/admission"
ONE_GPU = {"gpu_type": "local", "gpus": 1, "cpu": 0.5, "memory": "512M"}


@pytest.fixture(scope="module")
def queue(module_kube: Kube) -> str:
    """The LocalQueue servers wait in: one simulated GPU of quota on the process node."""
    kueue_queues(module_kube, gpus=1, local_queue=QUEUE, gpu_nodes=PROCESS_NODE_SELECTOR)
    return QUEUE


@pytest.fixture(scope="module")
def kubeconfig(module_kube: Kube) -> Iterator[None]:
    """KUBECONFIG for the hubs this module starts (read by their processes)."""
    previous = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(module_kube.kubeconfig)
    yield
    if previous is None:
        os.environ.pop("KUBECONFIG", None)
    else:
        os.environ["KUBECONFIG"] = previous


@pytest.fixture(scope="module")
def hub(
    module_kube: Kube, queue: str, kubeconfig: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Hub]:
    extra = f"""
        from gpuhub.hub.web.api import configure_hub
        configure_hub(c)  # gpuhub's pages, the spawn page's "Leave the line" among them
        c.GPUSpawner.kueue_queue_name = {QUEUE!r}
        c.GPUSpawner.gpu_queue_timeout = 600
    """
    running = start_hub(tmp_path_factory.mktemp("hub"), hub_config(module_kube.namespace, extra))
    for user in ("ada", "bob", "cy", "dee"):
        assert running.api("POST", f"/users/{user}").status_code == 201
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def kube(module_kube: Kube) -> Kube:
    return module_kube


def pod_of(kube: Kube, user: str) -> dict[str, Any] | None:
    return kube.get("Pod", f"jupyter-{user}")


def gated(pod: dict[str, Any] | None) -> bool:
    return pod is not None and any(
        g["name"] == GATE for g in pod["spec"].get("schedulingGates") or []
    )


class Progress:
    """A user's spawn progress stream, read event by event."""

    def __init__(self, hub: Hub, user: str) -> None:
        self.response = hub.api("GET", f"/users/{user}/server/progress", stream=True)
        assert self.response.status_code == 200, self.response.text
        self.lines = self.response.iter_lines(decode_unicode=True)
        self.said: list[str] = []  # every event's message, in order

    def until(self, test: Any, timeout: float = 60) -> dict[str, Any]:
        """The first event for which ``test(event)`` holds (the stream sends every change)."""
        deadline = time.monotonic() + timeout
        seen = []
        for line in self.lines:
            if line and line.startswith("data:"):
                event = json.loads(line[5:])
                seen.append(event.get("message"))
                self.said.append(str(event.get("message") or ""))
                if test(event):
                    return event
                assert not event.get("failed"), event
            assert time.monotonic() < deadline, f"no such event in {seen}"
        raise AssertionError(f"the stream ended; events: {seen}")

    def close(self) -> None:
        self.response.close()


def place(event: dict[str, Any]) -> int | None:
    return (event.get("gpuhub_line") or {}).get("place")


def test_servers_wait_in_kueue_show_their_place_and_leave(hub: Hub, kube: Kube) -> None:
    # The first GPU server takes the queue's one GPU: Kueue admits it, and it runs.
    assert spawn(hub, "ada", ONE_GPU).status_code in (201, 202)
    wait_ready(hub, "ada")
    pod = pod_of(kube, "ada")
    assert pod is not None
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == QUEUE
    assert not gated(pod)

    # The next two wait: Kueue holds their pods back, and the page says where they stand.
    assert spawn(hub, "bob", ONE_GPU).status_code == 202
    kube.wait_for(lambda: gated(pod_of(kube, "bob")), timeout=30)
    bob = Progress(hub, "bob")
    first = bob.until(lambda e: place(e) == 1)
    # What is in use of the queue's GPUs and by how many (its ClusterQueue), and the place:
    # in the words queued jobs use (gpuhub.k8s.kueue.waiting_words), never Kueue's own.
    assert first["message"].startswith(
        f'Waiting in queue "{QUEUE}" for 1 Simulated GPU: 1 of 1 Simulated GPU in use by 1 '
        "job or server; you are 1st in line."
    ), first
    assert "gpuhub waits until" in first["message"]
    # Kueue's own words ("couldn't assign flavors to pod set main: insufficient unused
    # quota ...") are the admin's: no event of the page says them.
    kueue_words = ("flavor", "pod set", "insufficient", "Workload")
    assert not [m for m in bob.said if any(w in m for w in kueue_words)], bob.said
    assert first["gpuhub_line"]["deadline"] > time.time() + 500
    # Gated by Kueue, bob's pod holds no GPU: it counts against his quota, as waiting.
    mine = hub.api("GET", "/gpuhub/holdings/bob").json()
    assert (mine["held"], mine["waiting"]) == (0, 1), mine
    assert mine["holdings"][0]["waiting"] == "waiting in Kueue's queue", mine
    ada = hub.api("GET", "/gpuhub/holdings/ada").json()
    assert (ada["held"], ada["waiting"]) == (1, 0), ada

    assert spawn(hub, "cy", ONE_GPU).status_code == 202
    kube.wait_for(lambda: gated(pod_of(kube, "cy")), timeout=30)
    cy = Progress(hub, "cy")
    second = cy.until(lambda e: place(e) == 2)
    assert (
        "in use by 1 job or server; you are 2nd in line, behind 1 server." in (second["message"])
    ), second
    assert 10 <= second["progress"] < 30

    # A server without GPUs never queues.
    assert spawn(hub, "dee", {"cpu": 0.5, "memory": "512M"}).status_code in (201, 202)
    wait_ready(hub, "dee")
    assert "kueue.x-k8s.io/queue-name" not in pod_of(kube, "dee")["metadata"].get("labels", {})

    # cy leaves the line from her spawn page: the pod and its Workload go, and nothing waits
    # in her name any more.
    uid = pod_of(kube, "cy")["metadata"]["uid"]
    cy.close()
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        hub.log_in_browser(page, "cy")
        page.goto(f"{hub.url}/hub/spawn-pending/cy")
        page.wait_for_function(  # the deadline is said once, under it, in the reader's clock
            "(t => t.includes('2nd in line') && !t.includes('gpuhub waits until'))"
            "(document.querySelector('#progress-message').textContent)"
        )
        text = page.locator("#progress-message").inner_text()
        assert 'in queue "servers" for 1 Simulated GPU: 1 of 1 Simulated GPU in use' in text
        assert "you are 2nd in line, behind 1 server" in text
        assert page.locator("#gpuhub-waiting").is_visible()
        assert "keeps your place until" in page.locator("#gpuhub-line-deadline").inner_text()
        page.screenshot(path=str(artifact("kueue-waiting-page.png")), full_page=True)
        page.get_by_role("button", name="Leave the line").click()
        left = page.locator("#gpuhub-left-line")
        left.wait_for()
        assert "You left the line" in left.inner_text()
    hub.wait_for_server("cy", ready=False, timeout=60)
    kube.wait_for(lambda: pod_of(kube, "cy") is None, timeout=60)

    def workload_gone() -> bool:
        items = kube.list("Workload", api_version=KUEUE)
        return not any(
            r.get("uid") == uid for w in items for r in w["metadata"].get("ownerReferences") or []
        )

    kube.wait_for(workload_gone, timeout=60)

    # ada stops: Kueue admits bob, whose server starts and whose page moves past the line.
    stop(hub, "ada")
    after = bob.until(lambda e: "gpuhub_line" not in e, timeout=90)
    assert "queue" not in after["message"], after
    assert not [m for m in bob.said if any(w in m for w in kueue_words)], bob.said
    bob.close()
    wait_ready(hub, "bob")
    assert not gated(pod_of(kube, "bob"))
    for user in ("bob", "dee"):
        stop(hub, user)


def test_a_server_that_waits_too_long_in_kueue_gives_up_and_says_why(
    kube: Kube, queue: str, kubeconfig: None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Past ``gpu_queue_timeout`` in Kueue's line, the spawn ends with a sentence that says
    where it waited and for what, and its pod (and its place in line) goes."""
    # The queue's one GPU, held by a pod of someone else's that Kueue admitted.
    holder = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "holder", "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "nodeSelector": PROCESS_NODE_SELECTOR,
            "containers": [
                {
                    "name": "train",
                    "image": "busybox:1.36",
                    "command": ["sleep", "3600"],
                    "resources": {
                        "limits": {"nvidia.com/gpu": "1", "cpu": "100m", "memory": "64Mi"}
                    },
                }
            ],
        },
    }
    kube.create(holder)
    try:
        kube.wait_for(lambda: not gated(kube.get("Pod", "holder")), timeout=60)
        extra = f"""
            c.GPUSpawner.kueue_queue_name = {QUEUE!r}
            c.GPUSpawner.gpu_queue_timeout = 4
        """
        hub = start_hub(tmp_path_factory.mktemp("hub"), hub_config(kube.namespace, extra))
        try:
            assert hub.api("POST", "/users/eve").status_code == 201
            # Under JupyterHub's slow_spawn_timeout (10 s), the answer itself says why.
            answer = spawn(hub, "eve", ONE_GPU)
            assert answer.status_code == 503, answer.text
            assert answer.json()["message"] == (
                'Your server waited 4 seconds in the queue "servers" for 1 Simulated GPU and '
                "Kueue did not admit it; try again later, or ask for fewer GPUs or another type."
            )
            hub.wait_for_server("eve", ready=False, timeout=60)
            kube.wait_for(lambda: pod_of(kube, "eve") is None, timeout=60)
        finally:
            hub.stop()
    finally:
        kube.delete("Pod", "holder", gracePeriodSeconds=0)


async def test_one_read_of_a_queues_line_serves_every_waiting_page(
    kube: Kube, queue: str, kube_faults: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fifty spawn pages polling one queue's line at once cost the apiserver one read of
    Kueue's visibility API (gpuhub.k8s.kueue.LINE_TTL), and a later poll reads it afresh."""
    from kubernetes_asyncio import config as kube_config

    import gpuhub.k8s.kueue
    from gpuhub.k8s.kueue import LINE_TTL, KueueAPI

    def reads() -> int:
        return sum("/pendingworkloads" in path for path in kube_faults.paths)

    api = await kube_config.new_client_from_config(config_file=str(kube_faults.kubeconfig))
    try:
        kueue = KueueAPI(api)
        lines = await asyncio.gather(*(kueue.line(kube.namespace, queue) for _ in range(50)))
        assert lines[0] is not None and all(line == lines[0] for line in lines)
        assert reads() == 1
        await kueue.line(kube.namespace, queue)
        assert reads() == 1  # still fresh
        now = time.monotonic()  # the cache's clock moves past its lifetime
        monkeypatch.setattr(gpuhub.k8s.kueue, "_clock", lambda: now + LINE_TTL + 1)
        await kueue.line(kube.namespace, queue)
        assert reads() == 2
    finally:
        await api.close()
