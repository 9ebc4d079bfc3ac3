"""kubesim's API machinery, pinned to the Kubernetes API documentation.

References: https://kubernetes.io/docs/reference/using-api/api-concepts/ (resource versions,
watch, bookmarks, 410 Gone, pagination), .../overview/working-with-objects/ (names, labels,
field selectors), kubectl patch docs (merge / strategic / JSON patch), and the apiserver's
``Status`` type (meta/v1).
"""

from __future__ import annotations

import asyncio
import json
import re

import aiohttp
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client import ApiException

from tests.support.paths import REPO


def pod(name: str | None = None, *, labels: dict[str, str] | None = None, **spec: object) -> dict:
    meta: dict = {"labels": labels or {}}
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = "p-"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}], **spec},
    }


def status_of(exc: ApiException) -> dict:
    return json.loads(exc.body)


async def test_discovery_lists_core_batch_crds_and_kubeflow(kube_api):
    versions = await client.CoreApi(kube_api).get_api_versions()
    assert versions.versions == ["v1"]
    core = await client.CoreV1Api(kube_api).get_api_resources()
    names = {r.name for r in core.resources}
    assert {
        "pods",
        "pods/log",
        "pods/status",
        "events",
        "nodes",
        "namespaces",
        "secrets",
        "services",
        "persistentvolumeclaims",
        "configmaps",
    } <= names
    groups = await client.ApisApi(kube_api).get_api_versions()
    group_names = {g.name for g in groups.groups}
    assert {"batch", "apiextensions.k8s.io", "kubeflow.org"} <= group_names
    kubeflow = await client.CustomObjectsApi(kube_api).get_api_resources("kubeflow.org", "v1")
    assert {"pytorchjobs", "tfjobs", "pytorchjobs/status"} <= {r.name for r in kubeflow.resources}
    code = await client.VersionApi(kube_api).get_code()
    assert (code.major, code.minor) == ("1", "30")


async def test_create_sets_uid_generate_name_timestamp_and_defaults(kube_api):
    v1 = client.CoreV1Api(kube_api)
    created = await v1.create_namespaced_pod("default", pod())
    meta = created.metadata
    assert re.fullmatch(r"p-[bcdfghjklmnpqrstvwxz2456789]{5}", meta.name)
    assert re.fullmatch(r"[0-9a-f-]{36}", meta.uid)
    assert meta.creation_timestamp is not None and int(meta.resource_version) > 0
    assert created.spec.restart_policy == "Always"
    assert created.spec.scheduler_name == "default-scheduler"
    assert created.spec.termination_grace_period_seconds == 30
    assert created.spec.containers[0].image_pull_policy == "IfNotPresent"
    assert created.status.phase == "Pending" and created.status.qos_class == "BestEffort"
    keys = {(t.key, t.effect) for t in created.spec.tolerations}
    assert ("node.kubernetes.io/not-ready", "NoExecute") in keys


async def test_requests_default_to_limits_and_qos_guaranteed(kube_api):
    body = pod("gpu")
    body["spec"]["containers"][0]["resources"] = {
        "limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}
    }
    created = await client.CoreV1Api(kube_api).create_namespaced_pod("default", body)
    assert created.spec.containers[0].resources.requests == {
        "cpu": "2",
        "memory": "4Gi",
        "nvidia.com/gpu": "1",
    }
    assert created.status.qos_class == "Guaranteed"


async def test_errors_are_status_bodies(kube_api):
    v1 = client.CoreV1Api(kube_api)
    with pytest.raises(ApiException) as missing:
        await v1.read_namespaced_pod("nope", "default")
    assert missing.value.status == 404
    assert status_of(missing.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "nope" not found',
        "reason": "NotFound",
        "code": 404,
        "details": {"name": "nope", "kind": "pods"},
    }
    await v1.create_namespaced_pod("default", pod("twice"))
    with pytest.raises(ApiException) as twice:
        await v1.create_namespaced_pod("default", pod("twice"))
    assert twice.value.status == 409 and status_of(twice.value)["reason"] == "AlreadyExists"
    assert status_of(twice.value)["message"] == 'pods "twice" already exists'
    with pytest.raises(ApiException) as no_ns:
        await v1.create_namespaced_pod("missing", pod("x"))
    assert (
        no_ns.value.status == 404
        and status_of(no_ns.value)["message"] == 'namespaces "missing" not found'
    )


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (
            lambda p: p["spec"]["containers"][0].pop("image"),
            "spec.containers[0].image",
            "Required value",
        ),
        (lambda p: p["spec"].update(containers=[]), "spec.containers", "Required value"),
        (
            lambda p: p["metadata"].update(name="Bad_Name"),
            "metadata.name",
            "a lowercase RFC 1123 subdomain",
        ),
        (
            lambda p: p["spec"]["containers"][0].update(
                resources={"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "2"}}
            ),
            "spec.containers[0].resources.requests[nvidia.com/gpu]",
            "must be equal to nvidia.com/gpu limit",
        ),
        (
            lambda p: p["spec"]["containers"][0].update(
                resources={"limits": {"nvidia.com/gpu": "0.5"}}
            ),
            "spec.containers[0].resources.limits[nvidia.com/gpu]",
            "must be an integer",
        ),
        (
            lambda p: p["spec"]["containers"][0].update(
                volumeMounts=[{"name": "shm", "mountPath": "/dev/shm"}]
            ),
            "spec.containers[0].volumeMounts[0].name",
            'Not found: "shm"',
        ),
        (
            lambda p: p["spec"].update(
                tolerations=[{"key": "k", "operator": "Exists", "value": "v"}]
            ),
            "spec.tolerations[0].operator",
            "value must be empty",
        ),
        (
            lambda p: p["spec"].update(restartPolicy="Sometimes"),
            "spec.restartPolicy",
            'Unsupported value: "Sometimes"',
        ),
    ],
)
async def test_invalid_pods_are_422_with_causes(kube_api, change, field, message):
    body = pod("valid")
    change(body)
    with pytest.raises(ApiException) as exc:
        await client.CoreV1Api(kube_api).create_namespaced_pod("default", body)
    assert exc.value.status == 422
    status = status_of(exc.value)
    assert status["reason"] == "Invalid" and status["details"]["kind"] == "Pod"
    assert any(
        c["field"] == field and message in c["message"] for c in status["details"]["causes"]
    ), status
    assert status["message"].startswith(f'Pod "{body["metadata"]["name"]}" is invalid: ')


async def test_type_errors_and_strict_unknown_fields_are_400(kubesim):
    async with aiohttp.ClientSession() as http:
        bad = pod("typed")
        bad["spec"]["containers"][0]["image"] = 5
        async with http.post(f"{kubesim.url}/api/v1/namespaces/default/pods", json=bad) as response:
            assert response.status == 400
            assert "cannot unmarshal" in (await response.json())["message"]
        unknown = pod("unknown")
        unknown["spec"]["bogus"] = True
        async with http.post(
            f"{kubesim.url}/api/v1/namespaces/default/pods?fieldValidation=Strict", json=unknown
        ) as response:
            assert response.status == 400
            assert 'unknown field "spec.bogus"' in (await response.json())["message"]


async def test_update_conflict_and_pod_spec_immutable(kube_api):
    v1 = client.CoreV1Api(kube_api)
    # Unschedulable, so nothing but this test writes it once the scheduler has given up.
    await v1.create_namespaced_pod("default", pod("u", nodeSelector={"no": "such"}))
    await asyncio.sleep(0.2)
    created = await v1.read_namespaced_pod("u", "default")
    created.metadata.labels = {"a": "1"}
    updated = await v1.replace_namespaced_pod("u", "default", created)
    assert int(updated.metadata.resource_version) > int(created.metadata.resource_version)
    with pytest.raises(ApiException) as stale:
        await v1.replace_namespaced_pod("u", "default", created)  # old resourceVersion
    assert stale.value.status == 409 and status_of(stale.value)["reason"] == "Conflict"
    with pytest.raises(ApiException) as immutable:
        await v1.patch_namespaced_pod("u", "default", {"spec": {"restartPolicy": "Never"}})
    assert (
        immutable.value.status == 422
        and "pod updates may not change fields" in status_of(immutable.value)["message"]
    )


async def test_patch_flavours(kube_api):
    v1 = client.CoreV1Api(kube_api)
    body = pod("patched", labels={"keep": "1", "drop": "1"})
    body["spec"]["containers"].append({"name": "side", "image": "busybox:1.36"})
    await v1.create_namespaced_pod("default", body)
    # Strategic merge (the client's default for dicts): containers merge by name.
    patched = await v1.patch_namespaced_pod(
        "patched",
        "default",
        {
            "metadata": {"labels": {"drop": None, "new": "2"}},
            "spec": {"containers": [{"name": "side", "image": "busybox:1.37"}]},
        },
    )
    assert patched.metadata.labels == {"keep": "1", "new": "2"}
    assert [(c.name, c.image) for c in patched.spec.containers] == [
        ("main", "busybox:1.36"),
        ("side", "busybox:1.37"),
    ]
    # JSON patch (the client's choice for lists).
    patched = await v1.patch_namespaced_pod(
        "patched",
        "default",
        [
            {"op": "add", "path": "/metadata/annotations", "value": {"x": "y"}},
            {"op": "test", "path": "/metadata/labels/keep", "value": "1"},
        ],
    )
    assert patched.metadata.annotations == {"x": "y"}
    # JSON merge patch: lists replace.
    patched = await v1.patch_namespaced_pod(
        "patched",
        "default",
        {"metadata": {"finalizers": ["a/b"]}},
        _content_type="application/merge-patch+json",
    )
    assert patched.metadata.finalizers == ["a/b"]


async def test_status_subresource_is_separate(kube_api):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_namespaced_pod("default", pod("st"))
    patched = await v1.patch_namespaced_pod(
        "st", "default", {"status": {"phase": "Failed"}, "metadata": {"labels": {"x": "1"}}}
    )
    assert patched.status.phase == "Pending" and patched.metadata.labels == {"x": "1"}
    patched = await v1.patch_namespaced_pod_status(
        "st", "default", {"status": {"message": "from status"}}
    )
    assert patched.status.message == "from status"


async def test_label_and_field_selectors(kube_api):
    v1 = client.CoreV1Api(kube_api)
    for name, labels in (
        ("a", {"app": "x", "tier": "1"}),
        ("b", {"app": "y"}),
        ("c", {"tier": "2"}),
    ):
        # Another scheduler's pods stay Pending: status.phase is stable for the selectors.
        await v1.create_namespaced_pod("default", pod(name, labels=labels, schedulerName="other"))

    async def names(**kw):
        return sorted(
            p.metadata.name for p in (await v1.list_namespaced_pod("default", **kw)).items
        )

    assert await names(label_selector="app=x") == ["a"]
    assert await names(label_selector="app!=x") == ["b", "c"]
    assert await names(label_selector="app in (x,y)") == ["a", "b"]
    assert await names(label_selector="app notin (x),tier") == ["c"]
    assert await names(label_selector="!app") == ["c"]
    assert await names(field_selector="metadata.name=b") == ["b"]
    assert await names(field_selector="status.phase=Pending,metadata.name!=a") == ["b", "c"]
    with pytest.raises(ApiException) as exc:
        await v1.list_namespaced_pod("default", field_selector="spec.bogus=1")
    assert exc.value.status == 400 and "field label not supported: spec.bogus" in exc.value.body


async def test_pagination(kube_api):
    v1 = client.CoreV1Api(kube_api)
    for n in range(5):
        await v1.create_namespaced_config_map(
            "default", {"metadata": {"name": f"cm{n}"}, "data": {"n": str(n)}}
        )
    first = await v1.list_namespaced_config_map("default", limit=2)
    assert [c.metadata.name for c in first.items] == ["cm0", "cm1"]
    assert first.metadata.remaining_item_count == 3
    rest = await v1.list_namespaced_config_map(
        "default", limit=10, _continue=first.metadata._continue
    )
    assert [c.metadata.name for c in rest.items] == ["cm2", "cm3", "cm4"]


async def test_watch_from_resource_version_and_selector_transitions(kube_api):
    v1 = client.CoreV1Api(kube_api)
    listed = await v1.list_namespaced_pod("default", label_selector="watched=yes")
    # Another scheduler's pods: nothing in kubesim touches them but this test.
    await v1.create_namespaced_pod(
        "default", pod("w1", labels={"watched": "yes"}, schedulerName="other")
    )
    await v1.create_namespaced_pod(
        "default", pod("w2", labels={"watched": "no"}, schedulerName="other")
    )
    await v1.patch_namespaced_pod("w1", "default", {"metadata": {"labels": {"watched": "no"}}})
    await v1.patch_namespaced_pod("w2", "default", {"metadata": {"labels": {"watched": "yes"}}})
    seen = []
    async with watch.Watch() as w:
        async for event in w.stream(
            v1.list_namespaced_pod,
            "default",
            label_selector="watched=yes",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=1,
        ):
            seen.append((event["type"], event["object"].metadata.name))
    assert seen == [("ADDED", "w1"), ("DELETED", "w1"), ("ADDED", "w2")]


async def test_watch_too_old_resource_version_is_410(kubesim, kube_api):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_namespaced_pod("default", pod("old"))
    listed = await v1.list_namespaced_pod("default")
    await v1.create_namespaced_pod("default", pod("new"))
    kubesim.compact()
    async with watch.Watch() as w:
        with pytest.raises(ApiException) as exc:
            async for _ in w.stream(
                v1.list_namespaced_pod,
                "default",
                resource_version=listed.metadata.resource_version,
                timeout_seconds=1,
            ):
                pass
    assert exc.value.status == 410 and "too old resource version" in exc.value.reason
    with pytest.raises(ApiException) as exact:
        await v1.list_namespaced_pod(
            "default",
            resource_version=listed.metadata.resource_version,
            resource_version_match="Exact",
        )
    assert exact.value.status == 410 and status_of(exact.value)["reason"] == "Expired"


async def test_watch_bookmarks(kubesim, kube_api):
    kubesim.set_bookmark_interval(0.1)
    v1 = client.CoreV1Api(kube_api)
    listed = await v1.list_namespaced_pod("default")
    types = []
    async with watch.Watch() as w:
        async for event in w.stream(
            v1.list_namespaced_pod,
            "default",
            resource_version=listed.metadata.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=1,
        ):
            types.append(event["type"])
            if event["type"] == "BOOKMARK":
                assert int(event["raw_object"]["metadata"]["resourceVersion"]) >= int(
                    listed.metadata.resource_version
                )
                break
    assert types == ["BOOKMARK"]


async def test_delete_with_grace_then_gone(kubesim, kube_api):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_namespaced_pod("default", pod("graceful"))
    kubesim.wait_for(
        lambda: (kubesim.get("Pod", "graceful") or {}).get("status", {}).get("phase") == "Running"
    )
    kubesim.call(lambda: setattr(kubesim.sim.kubelet, "termination_seconds", 0.5))
    deleted = await v1.delete_namespaced_pod("graceful", "default", grace_period_seconds=5)
    assert (
        deleted.metadata.deletion_timestamp is not None
        and deleted.metadata.deletion_grace_period_seconds == 5
    )
    kubesim.wait_for(lambda: kubesim.get("Pod", "graceful") is None, timeout=5)
    reasons = [e["reason"] for e in kubesim.events(involved="graceful")]
    assert reasons[-1] == "Killing"


async def test_unscheduled_pod_is_deleted_at_once(kube_api):
    v1 = client.CoreV1Api(kube_api)
    body = pod("nowhere", nodeSelector={"no": "such"})
    await v1.create_namespaced_pod("default", body)
    await v1.delete_namespaced_pod("nowhere", "default")
    with pytest.raises(ApiException):
        await v1.read_namespaced_pod("nowhere", "default")


async def test_namespace_deletion_terminates_and_empties(kubesim, kube_api):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_namespace({"metadata": {"name": "team"}})
    # The service account controller adds "default" shortly after (see test_kubesim_admission).
    assert kubesim.wait_for(lambda: kubesim.get("ServiceAccount", "default", "team"), timeout=5)
    await v1.create_namespaced_secret("team", {"metadata": {"name": "s"}, "stringData": {"a": "b"}})
    await v1.delete_namespace("team")
    kubesim.wait_for(lambda: kubesim.get("Namespace", "team", "") is None, timeout=5)
    assert kubesim.list("Secret", "team") == []


async def test_fault_injection(kubesim, kube_api):
    v1 = client.CoreV1Api(kube_api)
    kubesim.fail_requests(503, nth=2, path="/api/v1/namespaces/default/pods")
    await v1.list_namespaced_pod("default")
    with pytest.raises(ApiException) as exc:
        await v1.list_namespaced_pod("default")
    assert exc.value.status == 503 and status_of(exc.value)["reason"] == "ServiceUnavailable"
    await v1.list_namespaced_pod("default")  # only the one
    kubesim.slow_requests(0.3, count=1)
    loop = asyncio.get_running_loop()
    start = loop.time()
    await v1.list_namespaced_pod("default")
    assert loop.time() - start >= 0.3


async def test_dropped_watch_ends_the_stream(kubesim, kube_api):
    v1 = client.CoreV1Api(kube_api)
    listed = await v1.list_namespaced_pod("default")

    async def consume():
        async with watch.Watch() as w:
            async for _ in w.stream(
                v1.list_namespaced_pod,
                "default",
                resource_version=listed.metadata.resource_version,
                timeout_seconds=30,
            ):
                pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.2)
    assert await asyncio.to_thread(kubesim.drop_watches) == 1
    await asyncio.wait_for(task, 5)


async def test_crd_custom_resources_validated_and_pruned(kube_api):
    custom = client.CustomObjectsApi(kube_api)
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "train"},
        "spec": {
            "unknownField": 1,
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "spec": {"containers": [{"name": "pytorch", "image": "pytorch:2"}]}
                    },
                },
            },
        },
    }
    created = await custom.create_namespaced_custom_object(
        "kubeflow.org", "v1", "default", "pytorchjobs", job
    )
    assert "unknownField" not in created["spec"] and created["metadata"]["generation"] == 1
    bad = json.loads(json.dumps(job))
    bad["metadata"]["name"] = "bad"
    bad["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicy"] = "Sometimes"
    bad["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = "one"
    with pytest.raises(ApiException) as exc:
        await custom.create_namespaced_custom_object(
            "kubeflow.org", "v1", "default", "pytorchjobs", bad
        )
    assert exc.value.status == 422
    fields = {c["field"] for c in status_of(exc.value)["details"]["causes"]}
    assert fields == {
        "spec.pytorchReplicaSpecs.Master.replicas",
        "spec.pytorchReplicaSpecs.Master.restartPolicy",
    }
    missing = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "tf"},
        "spec": {},
    }
    with pytest.raises(ApiException) as exc:
        await custom.create_namespaced_custom_object(
            "kubeflow.org", "v1", "default", "tfjobs", missing
        )
    assert (
        exc.value.status == 422
        and "spec.tfReplicaSpecs: Required value" in status_of(exc.value)["message"]
    )
    # status only through /status (the simulated training operator writes status too, and
    # keeps conditions it did not write)
    marker = {"type": "Marker", "status": "True"}
    status = {"status": {"conditions": [marker]}}
    merge = "application/merge-patch+json"  # the client would send a dict as JSON patch
    with pytest.raises(ApiException) as wrong:
        await custom.patch_namespaced_custom_object(
            "kubeflow.org", "v1", "default", "pytorchjobs", "train", status
        )
    assert wrong.value.status == 400

    async def conditions() -> list[str]:
        got = await custom.get_namespaced_custom_object(
            "kubeflow.org", "v1", "default", "pytorchjobs", "train"
        )
        return [c["type"] for c in got.get("status", {}).get("conditions", [])]

    await custom.patch_namespaced_custom_object(
        "kubeflow.org", "v1", "default", "pytorchjobs", "train", status, _content_type=merge
    )
    assert "Marker" not in await conditions()
    await custom.patch_namespaced_custom_object_status(
        "kubeflow.org", "v1", "default", "pytorchjobs", "train", status, _content_type=merge
    )
    assert "Marker" in await conditions()


async def test_new_crd_is_served_and_removed(kube_api):
    ext = client.ApiextensionsV1Api(kube_api)
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.org"},
        "spec": {
            "group": "example.org",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer"}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    await ext.create_custom_resource_definition(crd)
    established = await ext.read_custom_resource_definition("widgets.example.org")
    assert "Established" in {c.type for c in established.status.conditions}
    custom = client.CustomObjectsApi(kube_api)
    await custom.create_namespaced_custom_object(
        "example.org",
        "v1",
        "default",
        "widgets",
        {
            "apiVersion": "example.org/v1",
            "kind": "Widget",
            "metadata": {"name": "w"},
            "spec": {"size": 3},
        },
    )
    await ext.delete_custom_resource_definition("widgets.example.org")
    with pytest.raises(ApiException) as exc:
        await custom.list_namespaced_custom_object("example.org", "v1", "default", "widgets")
    assert exc.value.status == 404


def test_runs_standalone(tmp_path):
    """``python -m tests.kubesim --port --kubeconfig --nodes`` serves until stopped."""
    import subprocess
    import sys

    import yaml

    from tests.support.hub.process import free_port

    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "a100-0",
                    "labels": {"gpu": "a100"},
                    "allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 4},
                }
            ]
        )
    )
    kubeconfig = tmp_path / "kubeconfig"
    port = free_port()
    root = REPO
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.kubesim",
            "--port",
            str(port),
            "--kubeconfig",
            str(kubeconfig),
            "--nodes",
            str(nodes),
        ],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith(f"kubesim serving on http://127.0.0.1:{port}"), line
        config = yaml.safe_load(kubeconfig.read_text())
        assert config["clusters"][0]["cluster"]["server"] == f"http://127.0.0.1:{port}"

        async def read_nodes():
            from kubernetes_asyncio import config as kconfig

            api_client = await kconfig.new_client_from_config(config_file=str(kubeconfig))
            try:
                return (await client.CoreV1Api(api_client).list_node()).items
            finally:
                await api_client.close()

        (node,) = asyncio.run(read_nodes())
        assert node.metadata.name == "a100-0" and node.status.allocatable["nvidia.com/gpu"] == "4"
        assert node.metadata.labels["gpu"] == "a100"
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
