"""Reading GPUs: NVML through the stand-in (devices, MIG, errors, visibility) and DCGM text."""

from __future__ import annotations

import http.server
import threading
import types
from collections.abc import Iterator

import pytest

from gpuhub_lab.metrics.dcgm import DCGMSource, parse
from gpuhub_lab.metrics.nvml import NVMLSource
from harness import fake_nvml as fake

GIB = 2**30
FAKE = "harness.fake_nvml"


def read(scenario: fake.Scenario, visible: str | None = None) -> tuple[list[dict], str | None]:
    fake.install(scenario)
    source = NVMLSource(FAKE, visible=visible)
    try:
        return source.read()
    finally:
        source.close()


def test_devices_figures_and_processes_in_api_units():
    scenario = fake.a100s(2, utilization=37, memory_used=12 * GIB, temperature=61)
    scenario.gpus[0].power_mw = 251_400
    scenario.gpus[0].processes = [fake.FakeProcess(4242, 3 * GIB), fake.FakeProcess(77, None)]
    gpus, reason = read(scenario)
    assert reason is None
    assert [g["index"] for g in gpus] == [0, 1]
    g0 = gpus[0]
    assert g0["name"] == "NVIDIA A100-SXM4-80GB"
    assert g0["uuid"] == scenario.gpus[0].uuid
    assert (g0["utilization"], g0["memory_used"], g0["memory_total"]) == (37, 12 * GIB, 80 * GIB)
    assert (g0["temperature"], g0["power"], g0["mig"], g0["error"]) == (61, 251.4, False, None)
    assert g0["processes"] == [
        {"pid": 77, "memory_used": None, "kernel_id": None, "path": None},
        {"pid": 4242, "memory_used": 3 * GIB, "kernel_id": None, "path": None},
    ]
    assert gpus[1]["processes"] == []


def test_one_failing_gpu_is_reported_and_the_others_still_read():
    scenario = fake.a100s(3, utilization=10)
    scenario.gpus[1].fail = {"nvmlDeviceGetMemoryInfo": fake.NVML_ERROR_GPU_IS_LOST}
    gpus, reason = read(scenario)
    assert reason is None
    assert [g["error"] is None for g in gpus] == [True, False, True]
    lost = gpus[1]
    assert lost["name"] == "NVIDIA A100-SXM4-80GB"  # still named, so the person knows which
    assert "GPU is lost" in lost["error"]
    assert lost["memory_used"] is None and lost["processes"] == []
    assert gpus[2]["utilization"] == 10


def test_unsupported_figures_are_null_not_errors():
    scenario = fake.a100s(1)
    scenario.gpus[0].fail = {
        "nvmlDeviceGetPowerUsage": fake.NVML_ERROR_NOT_SUPPORTED,
        "nvmlDeviceGetMigMode": fake.NVML_ERROR_NOT_SUPPORTED,  # a consumer GPU
    }
    (gpu,), _ = read(scenario)
    assert gpu["power"] is None and gpu["error"] is None and gpu["temperature"] == 35


def test_mig_slices_are_shown_as_mig_with_their_own_memory_and_processes():
    scenario = fake.a100s(1)
    scenario.gpus[0].mig = [
        fake.FakeMig("MIG-1111", "3g.40gb", 40 * GIB, 5 * GIB, [fake.FakeProcess(10, 5 * GIB)]),
        fake.FakeMig("MIG-2222", "1g.10gb", 10 * GIB),
    ]
    gpus, reason = read(scenario)
    assert reason is None
    assert [(g["uuid"], g["mig"], g["memory_total"]) for g in gpus] == [
        ("MIG-1111", True, 40 * GIB),
        ("MIG-2222", True, 10 * GIB),
    ]
    assert gpus[0]["name"] == "NVIDIA A100-SXM4-80GB MIG 3g.40gb"
    assert gpus[0]["utilization"] is None  # NVML has no counter for a slice
    assert gpus[0]["temperature"] == 35  # the parent's
    assert gpus[0]["parent_uuid"] == scenario.gpus[0].uuid
    assert gpus[0]["processes"][0]["pid"] == 10


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, [0, 1, 2]),
        ("2,0", [0, 2]),
        ("GPU-00000001", [1]),  # a UUID prefix, as CUDA accepts
    ],
)
def test_only_gpus_in_cuda_visible_devices_are_this_servers(visible, expected):
    gpus, _ = read(fake.a100s(3), visible=visible)
    assert [g["index"] for g in gpus] == expected


def test_a_mig_uuid_in_cuda_visible_devices_selects_that_slice_only():
    scenario = fake.a100s(2)
    scenario.gpus[1].mig = [
        fake.FakeMig("MIG-aaaa", "1g.10gb", 10 * GIB),
        fake.FakeMig("MIG-bbbb", "1g.10gb", 10 * GIB),
    ]
    gpus, _ = read(scenario, visible="MIG-bbbb")
    assert [g["uuid"] for g in gpus] == ["MIG-bbbb"]


@pytest.mark.parametrize("visible", ["", "-1", "NoDevFiles"])
def test_a_cpu_only_server_sees_no_gpu_even_on_a_gpu_machine(visible):
    gpus, reason = read(fake.a100s(4), visible=visible)
    assert gpus == []
    assert "without a GPU" in reason
    assert "nvmlDeviceGetCount" not in fake.calls  # does not even ask NVML


def test_missing_driver_library_is_a_reason_and_retried_later():
    gpus, reason = read(fake.Scenario(init_error=fake.NVML_ERROR_LIBRARY_NOT_FOUND))
    assert gpus == []
    assert "No NVIDIA driver" in reason


def test_driver_not_loaded_and_no_gpus_have_their_own_reasons():
    _, reason = read(fake.Scenario(init_error=fake.NVML_ERROR_DRIVER_NOT_LOADED))
    assert "not loaded" in reason
    _, reason = read(fake.Scenario())
    assert "reports no GPU" in reason


def test_init_failure_is_not_retried_on_every_sample():
    fake.install(fake.Scenario(init_error=fake.NVML_ERROR_DRIVER_NOT_LOADED))
    source = NVMLSource(FAKE)
    for _ in range(5):
        source.read()
    assert fake.calls["nvmlInit"] == 1


def test_missing_binding_is_a_reason():
    _gpus, reason = NVMLSource("gpuhub_no_such_nvml_module").read()
    assert reason == "The nvidia-ml-py package is not installed on this server."


def _partial_binding(*, memory: bool = True) -> types.ModuleType:
    """A binding with only what jupyterlab-nvdashboard calls (no UUIDs, names, temperature,
    power, MIG or processes, no NVMLError): the kind of stand-in written for another tool."""
    binding = types.ModuleType("partial_nvml")

    class NVMLError_NotSupported(Exception):
        pass

    def figures(used: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(gpu=40 + used, memory=5, used=used * GIB, total=80 * GIB)

    binding.NVMLError_NotSupported = NVMLError_NotSupported  # type: ignore[attr-defined]
    binding.nvmlInit = lambda: None  # type: ignore[attr-defined]
    binding.nvmlDeviceGetCount = lambda: 2  # type: ignore[attr-defined]
    binding.nvmlDeviceGetHandleByIndex = lambda index: index  # type: ignore[attr-defined]
    binding.nvmlDeviceGetUtilizationRates = figures  # type: ignore[attr-defined]
    if memory:
        binding.nvmlDeviceGetMemoryInfo = figures  # type: ignore[attr-defined]
    return binding


def test_a_binding_with_only_utilization_and_memory_still_charts_them():
    source = NVMLSource(_partial_binding())
    gpus, reason = source.read()
    assert reason is None
    assert [(g["uuid"], g["name"], g["utilization"], g["memory_used"]) for g in gpus] == [
        ("GPU-0", "GPU 0", 40, 0),
        ("GPU-1", "GPU 1", 41, GIB),
    ]
    assert all(
        g["temperature"] is None and g["power"] is None and g["processes"] == []
        and g["mig"] is False and g["error"] is None
        for g in gpus
    )  # fmt: skip
    assert source.read_figures(gpus) == gpus  # the sampler's quick reads work on it too
    source.close()  # without nvmlShutdown


def test_a_binding_that_cannot_count_memory_is_a_reason_naming_what_it_lacks():
    gpus, reason = NVMLSource(_partial_binding(memory=False)).read()
    assert gpus == []
    assert reason == (
        "The NVML binding 'partial_nvml' cannot read GPUs: it has no nvmlDeviceGetMemoryInfo."
    )


def _gpu_present() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return count > 0
    except Exception:
        return False


HAS_GPU = _gpu_present()


@pytest.mark.skipif(HAS_GPU, reason="this machine has an NVIDIA GPU")
def test_real_pynvml_without_a_gpu_says_why():
    gpus, reason = NVMLSource("pynvml").read()
    assert gpus == []
    assert reason and reason.endswith(".")


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU and driver")
def test_real_pynvml_reads_every_gpu():
    source = NVMLSource("pynvml")
    gpus, reason = source.read()
    source.close()
    assert reason is None and gpus
    for g in gpus:
        assert g["error"] is None, g
        assert g["name"] and g["uuid"].startswith(("GPU-", "MIG-"))
        assert g["memory_total"] > 0 and 0 <= g["memory_used"] <= g["memory_total"]
        assert g["mig"] or 0 <= g["utilization"] <= 100


# --- DCGM exporter ---------------------------------------------------------------------------
DCGM_TEXT = """\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-aaa",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",Hostname="n1",container="notebook",namespace="jhub",pod="jupyter-alice"} 42
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-bbb",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",Hostname="n1",container="notebook",namespace="jhub",pod="jupyter-bob"} 99
DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-ccc",device="nvidia2",modelName="NVIDIA A100-SXM4-80GB",GPU_I_PROFILE="1g.10gb",GPU_I_ID="3",Hostname="n1",container="notebook",namespace="jhub",pod="jupyter-alice"} 7
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-aaa",modelName="NVIDIA A100-SXM4-80GB",namespace="jhub",pod="jupyter-alice"} 1024
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-bbb",modelName="NVIDIA A100-SXM4-80GB",namespace="jhub",pod="jupyter-bob"} 2048
# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-aaa",modelName="NVIDIA A100-SXM4-80GB",namespace="jhub",pod="jupyter-alice"} 80896
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-aaa",modelName="NVIDIA A100-SXM4-80GB",namespace="jhub",pod="jupyter-alice"} 55
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-aaa",modelName="NVIDIA A100-SXM4-80GB",namespace="jhub",pod="jupyter-alice"} 187.254
"""


def test_dcgm_text_becomes_the_same_shape_filtered_to_this_pod():
    gpus = parse(DCGM_TEXT, pod="jupyter-alice")
    assert [g["uuid"] for g in gpus] == ["GPU-aaa", "GPU-ccc/3"]
    a = gpus[0]
    assert a["utilization"] == 42 and a["temperature"] == 55 and a["power"] == 187.3
    assert a["memory_used"] == 1024 * 2**20 and a["memory_total"] == 81920 * 2**20
    assert a["mig"] is False and a["processes"] == []
    mig = gpus[1]
    assert mig["mig"] is True and mig["name"].endswith("MIG 1g.10gb")
    assert mig["utilization"] == 7  # DCGM has utilization for slices
    assert len(parse(DCGM_TEXT)) == 3  # no pod filter: the whole node


@pytest.fixture
def exporter() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = DCGM_TEXT.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


def test_dcgm_source_scrapes_a_real_http_exporter(exporter):
    gpus, reason = DCGMSource(exporter, pod="jupyter-bob").read()
    assert reason is None
    assert [(g["uuid"], g["utilization"]) for g in gpus] == [("GPU-bbb", 99)]


def test_dcgm_source_unreachable_or_empty_is_a_reason(exporter):
    gpus, reason = DCGMSource("http://127.0.0.1:9/metrics", timeout=0.5).read()
    assert gpus == [] and "did not answer" in reason
    gpus, reason = DCGMSource(exporter, pod="jupyter-carol").read()
    assert gpus == [] and reason == "The DCGM exporter reports no GPU for pod jupyter-carol."
