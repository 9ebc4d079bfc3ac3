"""The fleet page's devices of types claimed through DRA: per node, what each has free and
who holds it (gpuhub.hub.web.fleet), from the monitor's capacity figures; escaped."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

from jinja2 import ChoiceLoader, DictLoader

from gpuhub.hub.ledger.device_book import GPUAllocator
from gpuhub.hub.ledger.gpu_capacity import DeviceFree, GPUCapacity
from gpuhub.hub.ledger.ledger import Ledger
from gpuhub.hub.monitor.gpu_monitor import GPUMonitor
from gpuhub.hub.monitor.usage import UsageStore
from gpuhub.hub.monitor.utilization import UtilizationSource
from gpuhub.hub.web.fleet import FleetCache
from tests.support.hub.templates import hub_templates

GI = 2**30
HOSTILE = "<img src=x onerror=alert(1)>"
DEVICES = (
    DeviceFree("GPU 10", "a100-7", True, 80 * GI, 80 * GI),
    DeviceFree(
        "GPU 2",
        "a100-7",
        False,
        24 * GI,
        80 * GI,
        ("ana: server 'default'", f"bob: job '{HOSTILE}'"),
    ),
    DeviceFree("GPU 0", "a100-1", False, 0, 80 * GI, ("pod lab/x",)),
)


def monitor() -> GPUMonitor:
    async def capacity() -> tuple[dict[str, GPUCapacity], str]:
        return {"a100": GPUCapacity(free=1, total=3, dra_devices=DEVICES)}, ""

    spawner = SimpleNamespace(
        user=SimpleNamespace(settings={}),
        gpu_capacity=capacity,
        gpu_policy=SimpleNamespace(
            gpu_types={"a100": SimpleNamespace(display_name="A100", resource_name="")}
        ),
    )
    return GPUMonitor(
        spawner, Ledger(GPUAllocator()), UtilizationSource(), None, UsageStore(None), 30.0
    )


def test_devices_per_node_with_what_they_have_free_and_their_holders() -> None:
    async def scenario() -> tuple[Any, str]:
        watched = monitor()
        await watched.tick(time.time())
        cache = FleetCache(watched, hub_templates(), "/hub/", dict)
        view, _ = cache.page(await cache.current(), "root", see_all=True)
        env = hub_templates()
        env.loader = ChoiceLoader(
            [
                DictLoader(
                    {
                        "page.html": "{% block stylesheet %}{% endblock %}{% block main %}{% endblock %}"
                    }
                ),
                env.loader,
            ]
        )
        html = await env.get_template("gpuhub_fleet.html").render_async(
            view=view,
            base_url="/hub/",
            xsrf="x",
            done="",
            error="",
            error_field="",
            reason="",
            target="",
            grant_user="",
            grant_hours="",
            grant_reason="",
            holders_html="",
            hours_html="",
            budgets_html="",
        )
        return view, html

    view, html = asyncio.run(scenario())
    ((name, lines),) = view.devices
    assert name == "A100"
    assert [(line.node, line.name, line.free, line.holders) for line in lines] == [
        ("a100-1", "GPU 0", "all 80 GiB in use", "pod lab/x"),
        (
            "a100-7",
            "GPU 2",
            "24 GiB of 80 GiB free",
            f"ana: server 'default'; bob: job '{HOSTILE}'",
        ),
        ("a100-7", "GPU 10", "free", ""),
    ]
    assert "<summary>A100: 3 devices, 1 free</summary>" in html
    assert HOSTILE not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
