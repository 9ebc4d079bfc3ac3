"""The jobs service reads exactly what the Helm chart writes (``service.yaml``), and says what
is wrong with a bad configuration in one sentence before it starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuhub.service.config import ServiceConfig, ServiceConfigError
from harness.helm import CHART, make_chart, render, service_config
from tests.support.policies import DESIGN_CONFIG


@pytest.mark.parametrize("example", [None, *sorted((CHART / "examples").glob("*.yaml"))])
def test_the_charts_service_yaml_loads(tmp_path: Path, example: Path | None) -> None:
    chart = make_chart(tmp_path)
    files = [example] if example else []
    objects = render(
        chart,
        *files,
        values={
            "kfp": {"endpoint": "http://ml-pipeline.kubeflow:8888", "uiUrl": "https://kf/p"},
            "jobs": {"homeVolume": {"shared": True}},
            "gpuQuota": {"default": 1, "groups": {"staff": 6}},
        },
    )
    config = ServiceConfig.from_dict(service_config(objects))
    assert config.namespace == "jhub"
    assert config.jobs.job_image
    assert config.jobs.home_volume.shared is True
    assert config.jobs.home_volume.claim_name("alice") == "claim-alice"
    assert config.kfp.run_url("r1") == "https://kf/p/#/runs/details/r1"
    assert config.quota.limit_for(["staff"]) == 6 and config.quota.limit_for([]) == 1
    if example is not None:
        assert config.policy.gpu_types  # the examples configure GPU types


BASE = {
    "namespace": "default",
    "policy": DESIGN_CONFIG,
    "job_image": "img:1",
}


@pytest.mark.parametrize(
    ("change", "sentence"),
    [
        ({"gpu_quota": {"default": -1}}, "gpu_quota.default must be a GPU count"),
        ({"gpu_quota": {"groups": {"staff": "8"}}}, "gpu_quota.groups must map group names"),
        ({"job_image": ""}, "job_image must name the image"),
        ({"home_volume": {"claim_name_template": "claim"}}, "must contain {username}"),
        ({"home_volume": {"shared": "yes"}}, "home_volume.shared must be true or false"),
        ({"max_notebook_bytes": 0}, "max_notebook_bytes must be a positive number"),
        ({"policy": {"gpu_type": {}}}, "policy.gpu_type is not a policy setting"),
        ({"polcy": {}}, "unknown key 'polcy'"),
        ({"policy": {"cpu_range": {"min": 4, "max": 1}}}, "policy:"),
        ({"max_output_bytes": 2**40}, "max_output_bytes must be a number of bytes between"),
        ({"max_output_bytes": "64Mi"}, "max_output_bytes must be a number of bytes between"),
        ({"kfp": {"service_acount": "x"}}, "kfp.service_acount is not a kfp setting"),
        ({"kfp": {"service_account": 3}}, "kfp.service_account must be a string"),
        # Pipeline steps would run as KFP's own account, with its token mounted.
        (
            {"kfp": {"endpoint": "http://ml-pipeline.kubeflow:8888"}},
            "kfp.service_account is empty while pipeline steps are offered (kfp.endpoint is "
            "set), so steps would run as Kubeflow Pipelines' own account with its token "
            "mounted; name a ServiceAccount that mounts no token and has no role, such as "
            "the chart's gpuhub-pipeline-steps",
        ),
    ],
)
def test_bad_configuration_is_named(change, sentence) -> None:
    with pytest.raises(ServiceConfigError) as caught:
        ServiceConfig.from_dict({**BASE, **change})
    assert sentence in str(caught.value)


def test_service_refuses_to_start_with_a_bad_file(tmp_path: Path) -> None:
    path = tmp_path / "service.yaml"
    path.write_text(yaml.safe_dump({**BASE, "job_image": 3}))
    proc = subprocess.run(
        [sys.executable, "-m", "gpuhub.service", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"gpuhub service: {path}: job_image must be a string"


def test_output_bound_and_pipeline_account_are_read() -> None:
    config = ServiceConfig.from_dict(BASE)
    assert config.jobs.max_output_bytes == 64 * 1024 * 1024  # the default bound
    assert config.kfp.service_account == ""  # KFP's own account unless the chart names one
    config = ServiceConfig.from_dict(
        {**BASE, "max_output_bytes": 8 * 1024 * 1024, "kfp": {"service_account": "steps"}}
    )
    assert (config.jobs.max_output_bytes, config.kfp.service_account) == (8 * 1024 * 1024, "steps")
    # No account is needed where no step can run: no endpoint, or pipelines not offered.
    endpoint = {"kfp": {"endpoint": "http://ml-pipeline.kubeflow:8888"}}
    assert ServiceConfig.from_dict({**BASE, **endpoint, "kinds": ["job"]}).kfp.endpoint
