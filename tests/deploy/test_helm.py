"""The Helm chart (helm/gpuhub): lint, render, validate, and the values-to-traits path.

Helm is the real one from npm (helm 3.10.1). The zero-to-jupyterhub dependency cannot be
downloaded here, so :func:`make_chart` copies the chart and puts a small stand-in `jupyterhub`
chart into its `charts/`. The stand-in reproduces the parts of z2jh 4.x gpuhub relies on: the
hub Secret named `hub` holding the chart values (`values.yaml`, which z2jh's hub turns into
traitlets config) and the generated `hub.services.<name>.apiToken`, and the hub ServiceAccount.
Every object the chart renders goes to the test cluster's real kube-apiserver: a strict
server-side dry run (Kueue's CRDs and webhooks included), or created for real where the test
needs what the cluster then does (admission, quota, RBAC).
"""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import V1Container, V1ObjectMeta, V1Pod, V1PodSpec
from traitlets.config import Config

from gpuhub.core.options import parse_launch_options
from gpuhub.core.policy import Policy
from gpuhub.service.config import ServiceConfig
from harness.cluster import Kube
from harness.helm import (
    CHART,
    EXAMPLES,
    HELM,
    KUBE_VERSION,
    NAMESPACE,
    by_kind,
    can_i,
    exec_extra_config,
    gpuhub_objects,
    helm,
    hub_traitlets_config,
    hub_values,
    hub_yaml,
    install,
    make_chart,
    make_spawner,
    render,
    served_api_versions,
    service_config,
    validate_all,
)
from harness.paths import REPO

ROOT = REPO

pytestmark = pytest.mark.skipif(not HELM.exists(), reason="helm from npm is not installed")


@pytest.fixture(scope="module")
def chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_chart(tmp_path_factory.mktemp("chart"))


# -- lint and render --------------------------------------------------------------------------


def test_helm_lint_passes(chart: Path) -> None:
    result = helm("lint", "--strict", chart, "--kube-version", KUBE_VERSION)
    if result.returncode != 0 and "unknown flag: --kube-version" in result.stderr:
        result = helm("lint", "--strict", chart)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_chart_declares_z2jh_dependency() -> None:
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    (dependency,) = meta["dependencies"]
    assert dependency["name"] == "jupyterhub"
    assert dependency["repository"] == "https://hub.jupyter.org/helm-chart/"
    assert dependency["version"].split(".")[0] == "4"


@pytest.mark.parametrize("example", [None, *EXAMPLES], ids=lambda p: p.name if p else "default")
@pytest.mark.e2e
def test_renders_valid_kubernetes_objects(
    chart: Path, example: Path | None, module_kube: Kube
) -> None:
    objects = render(chart, *([example] if example else []))
    ours = gpuhub_objects(objects)
    kinds = sorted(o["kind"] for o in ours)
    for kind in ("ConfigMap", "Deployment", "Service", "ServiceAccount", "NetworkPolicy"):
        assert kind in kinds
    for kind in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
        assert kind in kinds
    validate_all(module_kube, objects)
    # The jobs service's policy is the hub's policy, key for key.
    hub = hub_values(objects)
    assert service_config(objects)["policy"] == {
        "custom_image_pattern": "",
        "group_limits": {},
        "default_limits": {"max_gpus": 1},
        "cpu_range": {},
        "memory_range": {},
        **hub["hub"]["config"]["GPUSpawner"],
    }


def test_service_yaml_contract(chart: Path) -> None:
    """The exact shape the jobs service reads (documented in values.yaml)."""
    objects = render(
        chart,
        values={
            "gpuQuota": {"default": 2, "groups": {"staff": 8}},
            "kfp": {"endpoint": "http://ml-pipeline.kubeflow:8888", "uiUrl": "https://kf/x"},
            "jobs": {"maxNotebookBytes": 500000},
        },
    )
    config = service_config(objects)
    assert set(config) == {
        "namespace",
        "policy",
        "gpu_quota",
        "job_image",
        "home_volume",
        "kfp",
        "max_notebook_bytes",
        "max_output_bytes",
        "kueue",
        "kinds",
        "trainer",
    }
    assert config["namespace"] == NAMESPACE
    # Every kind is offered by default, TrainJobs through Trainer's standard torch runtime,
    # their pods under the chart's token-less account.
    assert config["kinds"] == ["job", "pytorchjob", "tfjob", "trainjob", "pipeline"]
    assert config["trainer"] == {
        "runtimes": ["torch-distributed"],
        "service_account": "gpuhub-jobs",
    }
    ServiceConfig.from_dict(config)  # the service takes what the chart writes
    assert set(config["policy"]) == {
        "images",
        "custom_image_pattern",
        "gpu_types",
        "cpu_range",
        "memory_range",
        "group_limits",
        "default_limits",
    }
    assert config["gpu_quota"] == {"default": 2, "groups": {"staff": 8}}
    assert config["job_image"] == "ghcr.io/gpuhub/gpuhub-notebook:0.1.0"  # the singleuser image
    assert config["home_volume"] == {
        "claim_name_template": "claim-{username}",
        "mount_path": "/home/jovyan",
        "shared": False,
    }
    assert config["kfp"] == {
        "endpoint": "http://ml-pipeline.kubeflow:8888",
        "ui_url": "https://kf/x",
        "namespace": "kubeflow",
        "service_account": "gpuhub-pipeline-steps",
    }
    assert config["max_notebook_bytes"] == 500000
    assert config["max_output_bytes"] == 64 * 1024 * 1024  # the default bound on inflating
    # Jobs do not go through Kueue by default; the hub's line_order comes along.
    assert config["kueue"] == {"queue_name": "", "line_order": "fifo"}
    # The service's policy is loadable by gpuhub's one policy parser.
    Policy.from_config(**config["policy"])


def test_jobs_service_deployment(chart: Path) -> None:
    objects = render(chart)
    deployment = by_kind(objects, "Deployment", "gpuhub-service")
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["command"] == [
        "python",
        "-m",
        "gpuhub.service",
        "--config",
        "/etc/gpuhub/service.yaml",
    ]
    assert container["image"] == "ghcr.io/gpuhub/gpuhub-hub:0.1.0"  # hub image has gpuhub[hub]
    assert container["ports"][0]["containerPort"] == 10101
    env = {e["name"]: e for e in container["env"]}
    token = env["JUPYTERHUB_API_TOKEN"]["valueFrom"]["secretKeyRef"]
    # z2jh generates and keeps the service's token in its hub Secret under this key.
    hub_secret = by_kind(objects, "Secret", token["name"])
    assert token["key"] in hub_secret["data"]
    assert env["JUPYTERHUB_API_URL"]["value"] == "http://hub:8081/hub/api"
    assert env["JUPYTERHUB_SERVICE_PREFIX"]["value"] == "/services/gpuhub/"
    assert env["JUPYTERHUB_SERVICE_NAME"]["value"] == "gpuhub"
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/etc/gpuhub")
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == "gpuhub-config"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    # The hub's NetworkPolicy admits pods with this label (the service calls the hub API).
    assert pod["metadata"]["labels"]["hub.jupyter.org/network-access-hub"] == "true"
    # The Service selects the Deployment's pods and is what the hub registers.
    service = by_kind(objects, "Service", "gpuhub-service")
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["port"] == 10101
    hub = hub_values(objects)["hub"]
    assert hub["services"]["gpuhub"]["url"] == "http://gpuhub-service:10101"


def test_hub_registration_and_token_scope(chart: Path) -> None:
    hub = hub_values(render(chart))["hub"]
    assert hub["config"]["JupyterHub"]["spawner_class"] == "gpu"
    assert "access:services!service=gpuhub" in hub["config"]["Spawner"]["server_token_scopes"]
    assert hub["loadRoles"]["user"]["scopes"] == ["self", "access:services!service=gpuhub"]
    role = hub["loadRoles"]["gpuhub-service"]
    assert role["services"] == ["gpuhub"]
    assert set(role["scopes"]) == {"read:users:name", "read:users:groups", "custom:gpuhub:grants"}


def z2jh_hub_config(
    hub: dict[str, Any], service_url: str, service_timeout: int | None = None
) -> str:
    """What z2jh's jupyterhub_config.py makes of hub.services/loadRoles/config, as Python;
    ``service_timeout``: how long the hub waits for the services when it starts."""
    services = []
    for name, service in hub["services"].items():
        services.append(
            {**service, "name": name, "url": service_url, "api_token": "gpuhub-svc-" + "x" * 32}
        )
        if service_timeout is not None:
            services[-1]["timeout"] = service_timeout
    roles = [{**role, "name": name} for name, role in hub["loadRoles"].items()]
    return "\n".join(
        [
            "from gpuhub.hub.web.api import configure_hub",
            "configure_hub(c)",
            f"c.JupyterHub.services.extend({services!r})",
            f"c.JupyterHub.load_roles.extend({roles!r})",
            f"c.Spawner.server_token_scopes = {hub['config']['Spawner']['server_token_scopes']!r}",
            "c.JupyterHub.load_groups = {'staff': {'users': ['alice']}}",
        ]
    )


@pytest.mark.e2e
def test_real_hub_gives_user_servers_access_to_the_service(chart: Path, tmp_path: Path) -> None:
    """Start JupyterHub with the rendered registration and roles: a token with the server
    scopes can be made for a user (JupyterHub would silently drop scopes the user lacks), it
    reaches the service's scope, and the service learns the user's groups."""
    import requests

    from harness.hub.process import free_port, running_hub

    hub_config = hub_values(render(chart))["hub"]
    scopes = hub_config["config"]["Spawner"]["server_token_scopes"]
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: only the scopes are tested
    # ...so the hub need not wait for it (JupyterHub 6 waits up to a service's timeout, 30 s).
    config = z2jh_hub_config(hub_config, url, service_timeout=1)
    with running_hub(tmp_path / "hub", config) as hub:
        # alice exists: load_groups made her, in group staff.
        made = hub.api("POST", "/users/alice/tokens", json={"scopes": scopes})
        assert made.status_code == 201, made.text
        token = made.json()["token"]
        assert "access:services!service=gpuhub" in made.json()["scopes"]
        # Control: a service the user may not access is refused, not silently granted.
        refused = hub.api(
            "POST", "/users/alice/tokens", json={"scopes": ["access:services!service=other"]}
        )
        assert refused.status_code == 400
        # What the jobs service's HubAuth does with the token a request carries.
        who = requests.get(
            f"{hub.api_url}/user", headers={"Authorization": f"token {token}"}, timeout=30
        )
        assert who.status_code == 200, who.text
        assert who.json()["name"] == "alice"
        assert who.json()["groups"] == ["staff"]
        assert "access:services!service=gpuhub" in who.json()["scopes"]
        # And with its own token (role gpuhub-service) it may read users' groups.
        service = requests.get(
            f"{hub.api_url}/users/alice",
            headers={"Authorization": "token gpuhub-svc-" + "x" * 32},
            timeout=30,
        )
        assert service.status_code == 200, service.text
        assert service.json()["groups"] == ["staff"]


CAPACITY = f"{NAMESPACE}-gpuhub-gpuhub-capacity"
RUNTIMES = f"{NAMESPACE}-gpuhub-gpuhub-training-runtimes"


def test_rbac_is_exactly_what_gpuhub_needs(chart: Path) -> None:
    objects = render(chart)
    cluster_role = by_kind(objects, "ClusterRole", CAPACITY)
    assert cluster_role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
    ]
    binding = by_kind(objects, "ClusterRoleBinding", CAPACITY)
    subjects = {(s["name"], s["namespace"]) for s in binding["subjects"]}
    # Only the hub reads cluster-wide; the jobs service stays in the user namespace.
    assert subjects == {("hub", NAMESPACE)}
    assert by_kind(objects, "ServiceAccount", "hub")  # the stand-in's, as z2jh names it
    rules = {
        (group, resource): sorted(rule["verbs"])
        for rule in by_kind(objects, "Role", "gpuhub-service")["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    crud = sorted(["create", "get", "list", "watch", "delete"])
    assert rules == {
        ("batch", "jobs"): crud,
        ("kubeflow.org", "pytorchjobs"): crud,
        ("kubeflow.org", "tfjobs"): crud,
        ("trainer.kubeflow.org", "trainjobs"): crud,
        ("", "pods"): ["get", "list", "watch"],
        ("", "pods/log"): ["get"],
        ("", "events"): ["list"],
        ("", "configmaps"): sorted(["create", "get", "list", "patch", "delete"]),
        # The per-job policy letting a distributed job's replicas reach each other.
        ("networking.k8s.io", "networkpolicies"): ["create"],
    }
    role_binding = by_kind(objects, "RoleBinding", "gpuhub-service")
    assert role_binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpuhub-service", "namespace": NAMESPACE}
    ]
    # TrainJobs: the service reads the offered ClusterTrainingRuntimes (cluster-scoped), no more.
    assert by_kind(objects, "ClusterRole", RUNTIMES)["rules"] == [
        {
            "apiGroups": ["trainer.kubeflow.org"],
            "resources": ["clustertrainingruntimes"],
            "verbs": ["get"],
        }
    ]
    assert by_kind(objects, "ClusterRoleBinding", RUNTIMES)["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpuhub-service", "namespace": NAMESPACE}
    ]
    no_trainjobs = render(chart, values={"jobs": {"kinds": ["job", "pytorchjob"]}})
    assert not [o for o in no_trainjobs if o["metadata"]["name"] == RUNTIMES]
    # A TrainJob's pods run as an account with no token (Trainer cannot turn it off per pod).
    assert (
        by_kind(objects, "ServiceAccount", "gpuhub-jobs")["automountServiceAccountToken"] is False
    )
    # The hub cancels GPU jobs from the fleet page (gpuhub.hub.monitor.cancel): find, annotate, delete.
    hub_cancel = by_kind(objects, "Role", f"{NAMESPACE}-gpuhub-gpuhub-hub-cancel")
    find_note_delete = sorted(["list", "patch", "delete"])
    assert {
        (group, resource): sorted(rule["verbs"])
        for rule in hub_cancel["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    } == {
        ("batch", "jobs"): find_note_delete,
        ("kubeflow.org", "pytorchjobs"): find_note_delete,
        ("kubeflow.org", "tfjobs"): find_note_delete,
        ("trainer.kubeflow.org", "trainjobs"): find_note_delete,
        # The ledger follows a TrainJob's pods to it through their JobSet (gpuhub.hub.ledger.capacity).
        ("jobset.x-k8s.io", "jobsets"): ["get"],
    }
    hub_binding = by_kind(objects, "RoleBinding", f"{NAMESPACE}-gpuhub-gpuhub-hub-cancel")
    assert hub_binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "hub", "namespace": NAMESPACE}
    ]
    # The capacity view watches active pods in every namespace (gpuhub.hub.ledger.capacity), so the
    # default grants it; an admin may turn it off and lose the form's figures.
    pods = {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}
    assert pods in by_kind(objects, "ClusterRole", CAPACITY)["rules"]
    narrow_objects = render(chart, values={"rbac": {"readPodsClusterWide": False}})
    narrow = by_kind(narrow_objects, "ClusterRole", CAPACITY)
    assert pods not in narrow["rules"]


@pytest.mark.e2e
def test_rbac_and_netpol_follow_a_separate_user_namespace(chart: Path, module_kube: Kube) -> None:
    objects = render(chart, values={"jobs": {"namespace": "jupyter-users"}})
    validate_all(module_kube, objects)
    assert by_kind(objects, "Role", "gpuhub-service")["metadata"]["namespace"] == "jupyter-users"
    assert {
        o["metadata"]["namespace"] for o in objects if o["kind"] in ("Role", "RoleBinding")
    } == {"jupyter-users"}
    assert service_config(objects)["namespace"] == "jupyter-users"
    peer = by_kind(objects, "NetworkPolicy", "gpuhub-service")["spec"]["ingress"][0]["from"][0]
    assert peer["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "jupyter-users"
    }
    # The fence around job pods is where the jobs run.
    assert by_kind(objects, "NetworkPolicy", "gpuhub-jobs")["metadata"]["namespace"] == (
        "jupyter-users"
    )


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def test_network_paths_between_user_servers_and_the_service(chart: Path) -> None:
    objects = render(chart)
    pod_labels = by_kind(objects, "Deployment", "gpuhub-service")["spec"]["template"]["metadata"][
        "labels"
    ]
    policy = by_kind(objects, "NetworkPolicy", "gpuhub-service")
    assert _matches(policy["spec"]["podSelector"]["matchLabels"], pod_labels)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    peers = [p["podSelector"]["matchLabels"] for p in policy["spec"]["ingress"][0]["from"]]
    # z2jh's pod labels: user servers, the proxy (for /services/gpuhub/) and the hub.
    assert {"component": "singleuser-server"} in peers
    assert {"component": "proxy"} in peers
    assert {"component": "hub"} in peers
    # z2jh blocks egress to cluster IPs from user servers and the proxy; gpuhub's values
    # open exactly the way to the service pods.
    hub = hub_values(objects)
    for egress in (
        hub["singleuser"]["networkPolicy"]["egress"],
        hub["proxy"]["chp"]["networkPolicy"]["egress"],
    ):
        (rule,) = egress
        assert _matches(rule["to"][0]["podSelector"]["matchLabels"], pod_labels)
        assert rule["ports"] == [{"port": 10101, "protocol": "TCP"}]
    assert not any(
        o["kind"] == "NetworkPolicy"
        for o in render(chart, values={"networkPolicy": {"enabled": False}})
    )


@pytest.mark.e2e
def test_optional_quota_and_priority_class(chart: Path, module_kube: Kube) -> None:
    assert not any(o["kind"] in ("ResourceQuota", "PriorityClass") for o in render(chart))
    objects = render(
        chart,
        values={
            "resourceQuota": {
                "enabled": True,
                "gpus": {"nvidia.com/gpu": 12, "nvidia.com/mig-1g.10gb": 7},
            },
            "priorityClass": {"enabled": True, "value": 500},
        },
    )
    validate_all(module_kube, objects)
    quota = by_kind(objects, "ResourceQuota", "gpuhub-gpus")
    assert quota["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "12",
        "requests.nvidia.com/mig-1g.10gb": "7",
    }
    priority = by_kind(objects, "PriorityClass")
    assert priority["value"] == 500
    assert priority["preemptionPolicy"] == "Never"
    assert priority["globalDefault"] is False
    assert hub_yaml(objects)["gpu_priority_class_name"] == priority["metadata"]["name"]


def test_config_change_restarts_the_service(chart: Path) -> None:
    def checksum(values: dict[str, Any]) -> str:
        deployment = by_kind(render(chart, values=values), "Deployment", "gpuhub-service")
        return deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    assert checksum({"gpuQuota": {"default": 1}}) != checksum({"gpuQuota": {"default": 3}})


def test_base_url_reaches_urls(chart: Path) -> None:
    objects = render(chart, values={"jupyterhub": {"hub": {"baseUrl": "/jupyter"}}})
    env = {
        e["name"]: e.get("value")
        for e in by_kind(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["JUPYTERHUB_SERVICE_PREFIX"] == "/jupyter/services/gpuhub/"
    assert env["JUPYTERHUB_API_URL"] == "http://hub:8081/jupyter/hub/api"
    assert hub_yaml(objects)["jobs_url"] == "http://gpuhub-service:10101/jupyter/services/gpuhub/"


def test_z2jh_name_overrides_are_followed(chart: Path) -> None:
    objects = render(chart, values={"jupyterhub": {"fullnameOverride": "lab"}})
    container = by_kind(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["JUPYTERHUB_API_URL"]["value"] == "http://lab-hub:8081/hub/api"
    assert env["JUPYTERHUB_API_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "lab-hub"
    subjects = {s["name"] for s in by_kind(objects, "ClusterRoleBinding", CAPACITY)["subjects"]}
    assert "lab-hub" in subjects


# -- values -> traits ---------------------------------------------------------------------------


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
async def test_rendered_hub_config_loads_into_gpuspawner(
    chart: Path, example: Path, no_cluster: None
) -> None:
    objects = render(chart, example)
    values = hub_values(objects)
    config = hub_traitlets_config(values)
    spawner = make_spawner(config, groups=[])
    policy = spawner.gpu_policy
    # The hub and the jobs service hold the same policy.
    assert policy == Policy.from_config(**service_config(objects)["policy"])
    assert "access:services!service=gpuhub" in spawner.server_token_scopes
    # The spawner class resolves through the entry point, as JupyterHub does it.
    from jupyterhub.app import JupyterHub

    from gpuhub import GPUSpawner

    # (Only that trait: the example's authenticator, oauthenticator, is in the hub image.)
    spawner_class = Config({"JupyterHub": {"spawner_class": config.JupyterHub.spawner_class}})
    assert JupyterHub(config=spawner_class).spawner_class is GPUSpawner
    expected = yaml.safe_load(example.read_text())["jupyterhub"]["hub"]["config"]["GPUSpawner"]
    # Helm hands maps over with their keys sorted; the examples choose keys accordingly.
    assert list(policy.gpu_types) == sorted(expected["gpu_types"])
    assert list(policy.images) == sorted(expected["images"])
    assert policy.default_image is not None and policy.default_image.key == "pytorch"
    # The examples say their default GPU type; the hub and the service pick it alike.
    (said,) = [key for key, entry in expected["gpu_types"].items() if entry.get("default")]
    service = Policy.from_config(**service_config(objects)["policy"])
    assert service.gpu_types[said].default
    for groups in ([], *([group] for group in expected.get("group_limits") or {})):
        hub_pick = parse_launch_options({"gpus": 1}, policy, groups).gpu_type
        service_pick = parse_launch_options({"gpus": 1}, service, groups).gpu_type
        assert hub_pick == service_pick and hub_pick is not None
        if policy.limits_for(groups).allows_gpu_type(said):
            assert hub_pick.key == said


async def test_mig_cluster_policy_from_values(chart: Path, no_cluster: None) -> None:
    example = CHART / "examples" / "values-a100-h100-mig.yaml"
    config = hub_traitlets_config(hub_values(render(chart, example)))
    student = make_spawner(config, groups=["students"]).gpu_policy
    limits = student.limits_for(["students"])
    assert [t.key for t in student.allowed_gpu_types(limits)] == ["a100-1g"]
    assert student.gpu_types["a100-1g"].is_mig
    assert student.gpu_types["a100-1g"].resource_name == "nvidia.com/mig-1g.10gb"
    assert not student.gpu_types["h100"].is_mig
    assert student.gpu_types["h100"].node_selector == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"
    }
    both = student.limits_for(["students", "phd"])
    assert both.max_gpus == 2
    assert student.limits_for(["staff"]).max_gpus == 8
    assert student.custom_image_pattern is not None
    assert student.custom_image_pattern.fullmatch("registry.example.org/me/train:v1")
    assert not student.custom_image_pattern.fullmatch("docker.io/evil:latest")


async def test_hub_extra_config_sets_jobs_url_and_gpu_priority(
    chart: Path, tmp_path: Path, no_cluster: None
) -> None:
    objects = render(chart, values={"priorityClass": {"enabled": True}})
    data = by_kind(objects, "ConfigMap", "gpuhub-config")["data"]["hub.yaml"]
    config = exec_extra_config(hub_values(objects), data, tmp_path)
    assert config.KubeSpawner.environment == {
        "EXISTING": "1",
        "GPUHUB_JOBS_URL": "http://gpuhub-service:10101/services/gpuhub/",
    }
    spawner = make_spawner(config, groups=[])
    assert spawner.environment["GPUHUB_JOBS_URL"].endswith("/services/gpuhub/")
    hook = config.KubeSpawner.modify_pod_hook
    name = by_kind(objects, "PriorityClass")["metadata"]["name"]

    def pod() -> V1Pod:
        return V1Pod(
            metadata=V1ObjectMeta(name="p"), spec=V1PodSpec(containers=[V1Container(name="c")])
        )

    gpu = SimpleNamespace(launch_options=SimpleNamespace(gpu_type=object()))
    cpu = SimpleNamespace(launch_options=SimpleNamespace(gpu_type=None))
    assert hook(gpu, pod()).spec.priority_class_name == name
    assert hook(cpu, pod()).spec.priority_class_name is None
    # The hub reads the same file the chart mounts into it.
    hub = hub_values(objects)["hub"]
    (volume,) = [v for v in hub["extraVolumes"] if v["name"] == "gpuhub-config"]
    assert volume["configMap"]["name"] == "gpuhub-config"
    assert {"name": "gpuhub-config", "mountPath": "/etc/gpuhub", "readOnly": True} in hub[
        "extraVolumeMounts"
    ]


@pytest.mark.e2e
def test_chart_objects_are_accepted_and_its_priority_class_admits_gpu_servers(
    chart: Path, kube: Kube
) -> None:
    """The chart installed for real in the test's namespace: the cluster serves every kind it
    renders (discovery) and creates each object as is (strict fields, admission); a pod that
    names the chart's priority class (as the hub's pod hook does) is admitted with its value,
    while the namespace quota refuses GPUs beyond it; and the RBAC, evaluated by the
    apiserver's own authorizer, lets the hub and the jobs service do what gpuhub does there
    and not more."""
    from localk8s.kubeapi import KubeError

    objects = render(
        chart,
        values={
            "resourceQuota": {"enabled": True, "gpus": {"nvidia.com/gpu": 2}},
            "priorityClass": {"enabled": True, "value": 500},
        },
        namespace=kube.namespace,
        api_versions=served_api_versions(kube),
    )
    install(kube, objects)
    assert {"ConfigMap", "ResourceQuota", "PriorityClass", "RoleBinding"} <= {
        o["kind"] for o in objects
    }
    # Quota admission refuses every pod until the quota controller has counted the namespace.
    kube.wait_for(lambda: (kube.get("ResourceQuota", "gpuhub-gpus") or {}).get("status") or {})
    name = hub_yaml(objects)["gpu_priority_class_name"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "jupyter-alice"},
        "spec": {
            "priorityClassName": name,
            # Pending on purpose: a pending pod holds its GPUs against the quota all the same.
            "nodeSelector": {"gpuhub.io/test": "no-such-node"},
            "containers": [
                {
                    "name": "notebook",
                    "image": "img:1",
                    "resources": {"limits": {"nvidia.com/gpu": "2"}},
                }
            ],
        },
    }
    admitted = kube.create(copy.deepcopy(pod))
    assert admitted["spec"]["priority"] == 500
    pod["metadata"]["name"] = "jupyter-bob"
    with pytest.raises(KubeError) as refused:
        kube.create(pod)
    assert refused.value.status == 403 and "exceeded quota: gpuhub-gpus" in str(refused.value)
    # RBAC: the hub's capacity reads cluster-wide (shared nodes); the jobs service and the
    # hub's cancel act only in the user namespace.
    ns = kube.namespace
    hub, service = (f"system:serviceaccount:{ns}:{sa}" for sa in ("hub", "gpuhub-service"))
    assert can_i(kube, "watch", "nodes", None, hub)
    assert can_i(kube, "watch", "pods", None, hub)  # every namespace: shared nodes
    assert not can_i(kube, "watch", "nodes", None, service)
    assert not can_i(kube, "watch", "pods", None, service)
    assert can_i(kube, "watch", "pods", ns, service)
    assert can_i(kube, "delete", "pytorchjobs.kubeflow.org", ns, hub)
    assert not can_i(kube, "delete", "jobs.batch", "default", hub)
    assert can_i(kube, "create", "jobs.batch", ns, service)
    assert can_i(kube, "get", "pods/log", ns, service)
    assert not can_i(kube, "create", "jobs.batch", "default", service)
    assert not can_i(kube, "create", "pods", ns, service)
    assert not can_i(kube, "get", "secrets", ns, service)  # the hub's Secret holds tokens


@pytest.mark.e2e
def test_servers_queue_lets_the_hub_read_the_line_and_nothing_more(chart: Path, kube: Kube) -> None:
    """With GPUSpawner.kueue_queue_name, the hub may read its queue's line (Kueue's visibility
    API) and its LocalQueue in the servers' namespace, and ClusterQueues (what of the queue's
    GPUs is in use), as the apiserver's authorizer says; without it, not."""
    hub = f"system:serviceaccount:{kube.namespace}:hub"

    def may_read_line(namespace: str) -> bool:
        line = "localqueues.visibility.kueue.x-k8s.io/pendingworkloads"
        return can_i(kube, "get", line, namespace, hub)

    queued = {"jupyterhub": {"hub": {"config": {"GPUSpawner": {"kueue_queue_name": "gpus"}}}}}
    objects = render(
        chart, values=queued, namespace=kube.namespace, api_versions=served_api_versions(kube)
    )
    assert not may_read_line(kube.namespace)
    install(kube, [o for o in objects if o["metadata"]["name"].endswith("hub-kueue")])
    kube.wait_for(lambda: may_read_line(kube.namespace))
    assert not may_read_line("default")
    assert can_i(kube, "get", "localqueues.kueue.x-k8s.io", kube.namespace, hub)
    assert not can_i(kube, "get", "localqueues.kueue.x-k8s.io", "default", hub)
    assert can_i(kube, "get", "clusterqueues.kueue.x-k8s.io", None, hub)
    assert not can_i(kube, "update", "clusterqueues.kueue.x-k8s.io", None, hub)
    assert not [o for o in render(chart) if o["metadata"]["name"].endswith("hub-kueue")]


def test_hub_extra_config_without_priority_class(chart: Path, tmp_path: Path) -> None:
    objects = render(chart)
    data = by_kind(objects, "ConfigMap", "gpuhub-config")["data"]["hub.yaml"]
    config = exec_extra_config(hub_values(objects), data, tmp_path)
    assert "modify_pod_hook" not in config.KubeSpawner


# -- bad values ------------------------------------------------------------------------------


BAD_VALUES = [
    (
        {"jupyterhub": {"hub": {"config": {"GPUSpawner": {"gpu_types": {"a": {"max_gpus": 0}}}}}}},
        "jupyterhub.hub.config.GPUSpawner.gpu_types.a.max_gpus: Must be greater than or equal to 1",
    ),
    (
        {"jupyterhub": {"hub": {"config": {"GPUSpawner": {"memory_range": {"max": "lots"}}}}}},
        "jupyterhub.hub.config.GPUSpawner.memory_range.max",
    ),
    (
        {"jupyterhub": {"hub": {"config": {"GPUSpawner": {"gpu_types": {"a": {"gpus": 1}}}}}}},
        "Additional property gpus is not allowed",
    ),
    (
        {
            "jupyterhub": {
                "hub": {"config": {"GPUSpawner": {"gpu_types": {"a": {"resource_name": "GPU!"}}}}}
            }
        },
        "jupyterhub.hub.config.GPUSpawner.gpu_types.a.resource_name: Does not match pattern",
    ),
    (
        {
            "jupyterhub": {
                "hub": {"config": {"GPUSpawner": {"group_limits": {"students": {"max_gpus": -1}}}}}
            }
        },
        "group_limits.students.max_gpus: Must be greater than or equal to 0",
    ),
    (
        {
            "jupyterhub": {
                "hub": {
                    "config": {
                        "GPUSpawner": {"group_limits": {"students": {"gpu_types": ["v100"]}}}
                    }
                }
            }
        },
        'group_limits.students.gpu_types names "v100", which is not in GPUSpawner.gpu_types',
    ),
    (
        {"jupyterhub": {"hub": {"config": {"GPUSpawner": {"default_limits": {"images": ["x"]}}}}}},
        'default_limits.images names "x", which is not in GPUSpawner.images',
    ),
    (
        {"jupyterhub": {"hub": {"config": {"JupyterHub": {"spawner_class": "kubespawner"}}}}},
        'spawner_class must be "gpu"',
    ),
    (
        {"jupyterhub": {"hub": {"services": {"gpuhub": {"url": "http://elsewhere:1"}}}}},
        'jupyterhub.hub.services.gpuhub.url must be "http://gpuhub-service:10101"',
    ),
    ({"gpuQuota": {"default": -1}}, "gpuQuota.default: Must be greater than or equal to 0"),
    ({"gpuQuota": {"groups": {"staff": "eight"}}}, "gpuQuota.groups.staff: Invalid type"),
    ({"service": {"logLevel": "LOUD"}}, "service.logLevel"),
    ({"service": {"replicas": 3}}, "Additional property replicas is not allowed"),
    ({"jobs": {"maxNotebookBytes": 5000000}}, "jobs.maxNotebookBytes: Must be less than"),
    ({"jobs": {"namespace": "Not_A_Namespace"}}, "jobs.namespace: Does not match pattern"),
    ({"kfp": {"endpoint": "ml-pipeline:8888"}}, "kfp.endpoint: Does not match pattern"),
    (
        {"resourceQuota": {"enabled": True, "gpus": {"nvidia.com/gpu": "many"}}},
        "resourceQuota.gpus.nvidia.com/gpu: Invalid type",
    ),
    ({"priorityClass": {"preemptionPolicy": "Always"}}, "priorityClass.preemptionPolicy"),
    (
        {"jobs": {"kueue": {"createLocalQueue": True, "clusterQueue": "gpus"}}},
        "jobs.kueue.createLocalQueue needs jobs.kueue.queueName",
    ),
    (
        {"jobs": {"kueue": {"createLocalQueue": True, "queueName": "gpu-jobs"}}},
        "jobs.kueue.createLocalQueue needs jobs.kueue.clusterQueue",
    ),
    ({"jobs": {"kueue": {"queueName": "GPU Jobs"}}}, "jobs.kueue.queueName"),
    (
        {"jupyterhub": {"hub": {"config": {"GPUSpawner": {"kueue_queue_name": "GPU Servers"}}}}},
        "jupyterhub.hub.config.GPUSpawner.kueue_queue_name: Does not match pattern",
    ),
]


@pytest.mark.parametrize(("values", "message"), BAD_VALUES, ids=[m for _, m in BAD_VALUES])
def test_bad_values_fail_with_a_clear_message(
    chart: Path, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(AssertionError) as failure:
        render(chart, values=values)
    assert message in str(failure.value)


def test_bad_values_also_fail_lint(chart: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"gpuQuota": {"default": -1}}))
    result = helm("lint", chart, "-f", bad)
    assert result.returncode != 0
    assert "gpuQuota.default: Must be greater than or equal to 0" in result.stdout + result.stderr


def test_gpu_quota_is_set_once_for_the_hub_and_the_jobs_service(
    chart: Path, tmp_path: Path
) -> None:
    """gpuQuota reaches the hub's ledger (GPUSpawner.gpu_quota, grants endpoint registered)
    and the service's config alike; null means no quota."""
    values = {"gpuQuota": {"default": 1, "groups": {"staff": 6}}}
    objects = render(chart, values=values)
    data = by_kind(objects, "ConfigMap", "gpuhub-config")["data"]
    config = exec_extra_config(hub_values(objects), data["hub.yaml"], tmp_path)
    assert config.GPUSpawner.gpu_quota == {"default": 1, "groups": {"staff": 6}}
    assert yaml.safe_load(data["service.yaml"])["gpu_quota"] == config.GPUSpawner.gpu_quota
    assert "custom:gpuhub:grants" in config.JupyterHub.custom_scopes
    assert any("gpuhub/grants" in path for path, _ in config.JupyterHub.extra_handlers)
    unlimited = render(chart, values={"gpuQuota": {"default": None}})
    hub = yaml.safe_load(by_kind(unlimited, "ConfigMap", "gpuhub-config")["data"]["hub.yaml"])
    assert hub["gpu_quota"] == {"default": None, "groups": {}}
    # A quota may be a fraction of a GPU (shares of GPUs, issue 24): not rounded down to 0.
    half = render(chart, values={"gpuQuota": {"default": 0.5, "groups": {"staff": 1.5}}})
    data = by_kind(half, "ConfigMap", "gpuhub-config")["data"]
    for name in ("hub.yaml", "service.yaml"):
        assert yaml.safe_load(data[name])["gpu_quota"] == {"default": 0.5, "groups": {"staff": 1.5}}


@pytest.mark.e2e
def test_kueue_queue_reaches_the_service_with_its_rights_and_local_queue(
    chart: Path, module_kube: Kube
) -> None:
    """jobs.kueue: the queue name in the service's config, the Role's read access to Kueue's
    Workloads and visibility API (only then), and optionally the LocalQueue itself, in the
    Kueue API version the cluster serves, accepted by the real Kueue's CRD and webhook."""
    plain = render(chart)
    assert not any(o["kind"] == "LocalQueue" for o in plain)
    groups = {
        g for rule in by_kind(plain, "Role", "gpuhub-service")["rules"] for g in rule["apiGroups"]
    }
    assert not groups & {"kueue.x-k8s.io", "visibility.kueue.x-k8s.io"}
    values = {
        "jobs": {
            "namespace": "jupyter-users",
            "kueue": {"queueName": "gpu-jobs", "createLocalQueue": True, "clusterQueue": "gpus"},
        }
    }
    objects = render(chart, values=values, api_versions=served_api_versions(module_kube))
    validate_all(module_kube, objects)  # v1beta1 would fail here: deprecated since Kueue 0.15
    assert service_config(objects)["kueue"] == {"queue_name": "gpu-jobs", "line_order": "fifo"}
    local = by_kind(objects, "LocalQueue", "gpu-jobs")
    assert local["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert local["metadata"]["namespace"] == "jupyter-users"
    assert local["spec"] == {"clusterQueue": "gpus"}
    # Offline, the chart cannot ask and writes the current version; a cluster with an older
    # Kueue (0.9 to 0.14) serves only v1beta1 and gets that.
    offline = by_kind(render(chart, values=values), "LocalQueue", "gpu-jobs")
    assert offline["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    old_kueue = render(chart, values=values, api_versions=["v1", "kueue.x-k8s.io/v1beta1"])
    assert by_kind(old_kueue, "LocalQueue", "gpu-jobs")["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    rules = {
        (group, resource): sorted(rule["verbs"])
        for rule in by_kind(objects, "Role", "gpuhub-service")["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert rules[("kueue.x-k8s.io", "workloads")] == ["get", "list"]
    assert rules[("kueue.x-k8s.io", "localqueues")] == ["get"]
    assert rules[("visibility.kueue.x-k8s.io", "localqueues/pendingworkloads")] == ["get"]
    # What of the queue's GPUs is in use: its ClusterQueue (cluster-scoped), read only.
    quota = [o for o in objects if o["metadata"]["name"].endswith("-service-kueue")]
    assert sorted(o["kind"] for o in quota) == ["ClusterRole", "ClusterRoleBinding"]
    role, binding = sorted(quota, key=lambda o: o["kind"])
    assert role["rules"] == [
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues"], "verbs": ["get"]}
    ]
    assert binding["subjects"][0]["name"] == "gpuhub-service"
    assert not [o for o in plain if o["metadata"]["name"].endswith("-service-kueue")]
    # Queue without the chart's LocalQueue (the admin made one): the name alone.
    only_name = render(chart, values={"jobs": {"kueue": {"queueName": "team-a"}}})
    assert not any(o["kind"] == "LocalQueue" for o in only_name)
    assert service_config(only_name)["kueue"] == {"queue_name": "team-a", "line_order": "fifo"}
