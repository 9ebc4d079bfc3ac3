"""kubesim refuses what a real apiserver refuses, and drops what it drops.

References: kubernetes/kubernetes ``pkg/apis/core/validation/validation.go`` (ValidatePod,
validateContainerPorts, ValidateEnv / validateEnvVarValueFrom, validateVolumeMounts,
ValidateSecurityContext, validateLifecycle, ValidateSecret, ValidateConfigMap,
ValidateService), ``apimachinery/pkg/api/validation/objectmeta.go`` (annotation keys),
``apimachinery/pkg/util/validation`` (IsValidPortName, IsEnvVarName, IsConfigMapKey),
Go's ``encoding/json`` for ``[]byte`` (base64), and the field validation KEP-2885
(https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation): unknown fields
of built-in kinds are dropped with a ``Warning: 299`` header by default, 400 under ``Strict``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiException


def pod(name: str = "valid") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "main", "image": "busybox:1.36"}],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
    }


def main(p: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = p["spec"]["containers"][0]
    return container


def _set_security(**context: Any) -> Callable[[dict[str, Any]], None]:
    return lambda p: main(p).update(securityContext=context)


INVALID_PODS = [
    # KubeSpawner's privileged=True writes exactly this pair.
    (
        _set_security(privileged=True, allowPrivilegeEscalation=False),
        "spec.containers[0].securityContext",
        "cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
    ),
    (
        _set_security(allowPrivilegeEscalation=False, capabilities={"add": ["CAP_SYS_ADMIN"]}),
        "spec.containers[0].securityContext",
        "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN",
    ),
    (
        lambda p: p["spec"]["volumes"].append({"name": "data", "emptyDir": {}}),
        "spec.volumes[1].name",
        'Duplicate value: "data"',
    ),
    (
        lambda p: main(p).update(
            volumeMounts=[
                {"name": "data", "mountPath": "/data"},
                {"name": "data", "mountPath": "/data"},
            ]
        ),
        "spec.containers[0].volumeMounts[1].mountPath",
        'Invalid value: "/data": must be unique',
    ),
    (
        lambda p: main(p).update(
            volumeMounts=[{"name": "data", "mountPath": "/data", "subPath": "/abs"}]
        ),
        "spec.containers[0].volumeMounts[0].subPath",
        'Invalid value: "/abs": must be a relative path',
    ),
    (
        lambda p: main(p).update(ports=[{"name": "a-very-long-port-name", "containerPort": 80}]),
        "spec.containers[0].ports[0].name",
        "must be no more than 15 characters",
    ),
    (
        lambda p: main(p).update(
            ports=[{"name": "http", "containerPort": 80}, {"name": "http", "containerPort": 81}]
        ),
        "spec.containers[0].ports[1].name",
        'Duplicate value: "http"',
    ),
    (
        lambda p: main(p).update(ports=[{"containerPort": 0}]),
        "spec.containers[0].ports[0].containerPort",
        "Required value",
    ),
    (
        lambda p: main(p).update(env=[{"name": "1FOO", "value": "x"}]),
        "spec.containers[0].env[0].name",
        "a valid environment variable name must consist of",
    ),
    (
        lambda p: main(p).update(env=[{"name": "A=B", "value": "x"}]),
        "spec.containers[0].env[0].name",
        'Invalid value: "A=B"',
    ),
    (
        lambda p: p["spec"].update(securityContext={"runAsUser": -1}),
        "spec.securityContext.runAsUser",
        "Invalid value: -1: must be between 0 and 2147483647, inclusive",
    ),
    (
        _set_security(runAsUser=-1),
        "spec.containers[0].securityContext.runAsUser",
        "must be between 0 and 2147483647",
    ),
    (
        lambda p: main(p).update(lifecycle={"preStop": {}}),
        "spec.containers[0].lifecycle.preStop",
        "Required value: must specify a handler type",
    ),
    (
        lambda p: p["metadata"].update(annotations={"bad key!": "v"}),
        "metadata.annotations",
        'Invalid value: "bad key!"',
    ),
    (
        lambda p: main(p).update(
            env=[{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.bogus"}}}]
        ),
        "spec.containers[0].env[0].valueFrom.fieldRef.fieldPath",
        'Unsupported value: "spec.bogus"',
    ),
]


@pytest.mark.parametrize(("change", "field", "message"), INVALID_PODS)
async def test_semantic_pod_validation_is_422(kube_api, change, field, message):
    """ValidatePod answers 422 Invalid with one cause per error, as the apiserver writes them."""
    body = pod()
    change(body)
    with pytest.raises(ApiException) as exc:
        await client.CoreV1Api(kube_api).create_namespaced_pod("default", body)
    assert exc.value.status == 422
    status = json.loads(exc.value.body)
    assert status["reason"] == "Invalid"
    assert any(
        c["field"] == field and message in c["message"] for c in status["details"]["causes"]
    ), status


async def test_valid_neighbours_of_the_refused_pods_pass(kube_api):
    """The checks are not over-eager: what Kubernetes accepts is still created."""
    body = pod("fine")
    main(body).update(
        securityContext={"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}},
        ports=[{"name": "http", "containerPort": 8888}],
        env=[
            {"name": "my.env-name", "value": "x"},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        ],
        volumeMounts=[{"name": "data", "mountPath": "/data", "subPath": "sub/dir"}],
        lifecycle={"preStop": {"exec": {"command": ["true"]}}},
    )
    body["metadata"]["annotations"] = {"example.com/ok": "1"}
    created = await client.CoreV1Api(kube_api).create_namespaced_pod("default", body)
    assert created.metadata.name == "fine"


async def test_secret_and_configmap_keys_and_base64(kubesim, kube_api):
    """ValidateSecret/ValidateConfigMap: keys are config keys (422); Secret data that is not
    base64 fails JSON decoding, a 400 BadRequest."""
    v1 = client.CoreV1Api(kube_api)
    with pytest.raises(ApiException) as bad_key:
        await v1.create_namespaced_secret(
            "default", {"metadata": {"name": "s"}, "stringData": {"bad key": "v"}}
        )
    assert bad_key.value.status == 422
    assert "a valid config key must consist of" in json.loads(bad_key.value.body)["message"]
    with pytest.raises(ApiException) as cm_key:
        await v1.create_namespaced_config_map(
            "default", {"metadata": {"name": "c"}, "data": {"a/b": "v"}}
        )
    assert cm_key.value.status == 422
    assert json.loads(cm_key.value.body)["details"]["causes"][0]["field"] == "data[a/b]"
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{kubesim.url}/api/v1/namespaces/default/secrets",
            json={"metadata": {"name": "s"}, "data": {"k": "not base64!"}},
        ) as response,
    ):
        assert response.status == 400
        message = (await response.json())["message"]
        assert message.startswith('Secret in version "v1" cannot be handled as a Secret: ')
        assert "illegal base64 data at input byte" in message


async def test_unknown_fields_dropped_with_warning(kubesim):
    """fieldValidation=Warn (the default): the object is created without the unknown fields
    and the response carries ``Warning: 299 - "unknown field \\"spec.foo\\""``; Ignore drops
    silently; Strict refuses with 400."""
    body = pod("typo")
    body["spec"]["foo"] = 1
    main(body)["imagePullPolicyy"] = "Always"
    url = f"{kubesim.url}/api/v1/namespaces/default/pods"
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=body) as response:
            assert response.status == 201
            warnings = response.headers.getall("Warning")
            created = await response.json()
        assert sorted(warnings) == [
            '299 - "unknown field \\"spec.containers[0].imagePullPolicyy\\""',
            '299 - "unknown field \\"spec.foo\\""',
        ]
        assert "foo" not in created["spec"]
        assert "imagePullPolicyy" not in created["spec"]["containers"][0]
        assert "foo" not in kubesim.get("Pod", "typo")["spec"]
        body["metadata"]["name"] = "quiet"
        async with http.post(f"{url}?fieldValidation=Ignore", json=body) as response:
            assert response.status == 201 and "Warning" not in response.headers
        body["metadata"]["name"] = "strict"
        async with http.post(f"{url}?fieldValidation=Strict", json=body) as response:
            assert response.status == 400
            assert "strict decoding error: unknown field" in (await response.json())["message"]
        patch = {"metadata": {"labels": {"a": "b"}}, "spec": {"bar": 1}}
        async with http.patch(
            f"{url}/typo",
            json=patch,
            headers={"Content-Type": "application/strategic-merge-patch+json"},
        ) as response:
            assert response.status == 200
            assert response.headers.getall("Warning") == ['299 - "unknown field \\"spec.bar\\""']
            assert "bar" not in (await response.json())["spec"]


async def test_service_defaulting_and_port_validation(kube_api):
    """Service defaulting (core/v1 defaults + the ClusterIP allocator): type ClusterIP, a
    cluster IP, protocol TCP, targetPort = port; ValidateService refuses bad ports."""
    v1 = client.CoreV1Api(kube_api)
    svc = await v1.create_namespaced_service(
        "default", {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}
    )
    assert svc.spec.type == "ClusterIP" and svc.spec.cluster_ip.startswith("10.")
    assert svc.spec.cluster_ips == [svc.spec.cluster_ip]
    assert svc.spec.session_affinity == "None"
    assert (svc.spec.ports[0].protocol, svc.spec.ports[0].target_port) == ("TCP", 80)
    replaced = await v1.patch_namespaced_service(
        "web", "default", {"metadata": {"labels": {"a": "b"}}}
    )
    assert replaced.spec.cluster_ip == svc.spec.cluster_ip
    for ports, field, message in (
        ([{"port": 0}], "spec.ports[0].port", "must be between 1 and 65535"),
        ([{"port": 70000}], "spec.ports[0].port", "must be between 1 and 65535"),
        ([{"port": 80}, {"port": 81}], "spec.ports[0].name", "Required value"),
    ):
        with pytest.raises(ApiException) as exc:
            await v1.create_namespaced_service(
                "default", {"metadata": {"name": "bad"}, "spec": {"ports": ports}}
            )
        assert exc.value.status == 422
        causes = json.loads(exc.value.body)["details"]["causes"]
        assert any(c["field"] == field and message in c["message"] for c in causes), causes


async def test_configmap_over_one_mebibyte_is_refused(kube_api):
    """ValidateConfigMap: data and binaryData together hold at most 1 MiB (core.MaxSecretSize)."""
    v1 = client.CoreV1Api(kube_api)
    big = {"metadata": {"name": "big"}, "data": {"a": "x" * (1024 * 1024 - 10), "b": "y" * 11}}
    with pytest.raises(ApiException) as exc:
        await v1.create_namespaced_config_map("default", big)
    assert exc.value.status == 422
    assert json.loads(exc.value.body)["message"] == (
        'ConfigMap "big" is invalid: []: Too long: must have at most 1048576 bytes'
    )
    big["data"]["b"] = "y" * 10
    await v1.create_namespaced_config_map("default", big)
