"""The environment contract: every variable gpuhub sets for the processes it starts, and reads
back, in one place.

Each name says who sets it and who reads it. The variables a GPU holder (a server or a job) is
given are built by one function, :func:`gpuhub.core.holder_env.holder_env`.

The job runner (:mod:`gpuhub.jobs.run_notebook`) runs in job pods without gpuhub, so it keeps
copies of the names it reads; ``tests/core/test_env.py`` checks that they agree with these.
"""

from __future__ import annotations

# -- what a GPU holder (a server or a job) is given: gpuhub.core.holder_env -----------------
# How many GPUs (or time-sliced units) it holds. Set by both spawners and the job backends;
# read by the lab (gpuhub_lab.metrics.assigned).
GPUS_ENV = "GPUHUB_GPUS"
# The GPU type's key. Set as GPUS_ENV; read from pods by the hub's ledger (gpuhub.k8s.inventory)
# and the jobs service, and by the lab for its local jobs (gpuhub_lab.jobs_config).
GPU_TYPE_ENV = "GPUHUB_GPU_TYPE"
# The GPU type's display name. Set as GPUS_ENV; read by the lab (gpuhub_lab.metrics.assigned).
GPU_TYPE_NAME_ENV = "GPUHUB_GPU_TYPE_NAME"
# Every GPU_* variable above and below starts so: the hub's ledger reads them from a pod's
# containers (gpuhub.k8s.inventory).
GPU_ENV_PREFIX = "GPUHUB_GPU"
# A share of one GPU (gpuhub.core.sharing): what it counts as ("1/2"). Set as GPUS_ENV; read
# from pods by the hub's ledger and the jobs service, and by the lab and the local jobs backend.
SHARE_ENV = "GPUHUB_GPU_SHARE"
# A share's GPU memory in bytes (shared by memory). Set and read as SHARE_ENV.
SHARE_MEMORY_ENV = "GPUHUB_GPU_MEMORY"
# Not gpuhub's own: the CUDA MPS daemon's cap on a client's device memory ("<ordinal>=<size>").
# Set on a workstation process given a share (servers, local jobs); read by the MPS daemon.
MPS_MEMORY_LIMIT_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"

# -- simulated GPUs (demos and tests): gpuhub.core.simulated ---------------------------------
# How many simulated GPUs the machine has (indices 0..N-1). Set by LocalGPUSpawner on a
# server with gpu_devices = "simulated:N"; read by gpuhub.core.simulated, the lab's NVML
# stand-in and the hub's utilization source.
SIMULATED_GPUS_ENV = "GPUHUB_SIMULATED_GPUS"
# "1" on a process that does no GPU work itself (a Jupyter server, the job runner): simulated
# GPUs do not count it. Set by LocalGPUSpawner and the local jobs backend; read by
# gpuhub.core.simulated; taken out of their own environment by the lab extension and the job
# runner (its copy: gpuhub.jobs.run_notebook.MACHINERY_ENV), so what they start counts again.
MACHINERY_ENV = "GPUHUB_SIMULATED_MACHINERY"

# -- a workstation's launches: gpuhub.hub.ledger.launches -----------------------------------
# A random id per server launch. Set by LocalGPUSpawner on the server (every process it starts
# inherits it); read by the hub to find the processes that outlive the server on its GPUs
# (a first filter: the launch's signed grant, LAUNCH_ENV, is the proof).
SERVER_ID_ENV = "GPUHUB_SERVER_ID"
# What the hub gave a launch, signed. Set by LocalGPUSpawner; read by the hub wherever it asks
# whose a process is (gpuhub.hub.ledger.launches.Proof): the device book's rebuild, a stopped
# server's survivors, the over-share watch. JupyterHub's JUPYTERHUB_USER is never proof.
LAUNCH_ENV = "GPUHUB_LAUNCH"
# The Jupyter server's pid. Set by the local jobs backend on a job's runner; read by the
# magics in the job's kernel to reach that server (gpuhub_lab.jobs_client).
SERVER_PID_ENV = "GPUHUB_SERVER_PID"
# A job's id. Set by the job backends (local and Kubernetes) on a job's processes; read by the
# hub's fleet-page cancel (to find a local job's processes), ``%gpu`` (a job's own GPUs) and
# the job runner.
JOB_ID_ENV = "GPUHUB_JOB_ID"

# -- the admin's policy in a user's server: gpuhub.jobs.policy_env ---------------------------
# The policy's settings as JSON (the keyword arguments of Policy.from_config). Set by both
# spawners; read by the lab's GPUHubJobs config.
POLICY_ENV = "GPUHUB_POLICY"
# The user's JupyterHub groups as a JSON list. Set and read as POLICY_ENV.
GROUPS_ENV = "GPUHUB_GROUPS"
# The jobs service's URL; set: Kubernetes mode. Set by the admin's spawner environment (the
# Helm chart's hub config); read by the lab's GPUHubJobs config.
JOBS_URL_ENV = "GPUHUB_JOBS_URL"

# -- overrides a user (or a test) sets for the magics: gpuhub_lab ---------------------------
# The Jupyter server the magics talk to, instead of finding it (with its token and root
# directory). Set by the user; read by gpuhub_lab.jobs_client.
SERVER_URL_ENV = "GPUHUB_SERVER_URL"
SERVER_TOKEN_ENV = "GPUHUB_SERVER_TOKEN"
SERVER_ROOT_ENV = "GPUHUB_SERVER_ROOT"
# The module ``%gpu`` reads NVML from instead of pynvml. Set by tests (a fake NVML); read by
# gpuhub_lab.gpu_magic.
NVML_MODULE_ENV = "GPUHUB_NVML_MODULE"

# -- a job's runner (gpuhub.jobs.run_notebook keeps its own copies) ---------------------------
# Set by the Kubernetes job manifests (a local job's runner reads a spec file instead); read by
# the job runner: the notebook to run, where to write the executed one, a JSON file of
# papermill parameters, the kernel's working directory, "1" to also print the executed
# notebook to stdout, and (a TrainJob's nodes) where a node other than the first writes.
INPUT_ENV = "GPUHUB_INPUT"
OUTPUT_ENV = "GPUHUB_OUTPUT"
PARAMETERS_ENV = "GPUHUB_PARAMETERS"
CWD_ENV = "GPUHUB_CWD"
PRINT_OUTPUT_ENV = "GPUHUB_PRINT_OUTPUT"
SECONDARY_OUTPUT_ENV = "GPUHUB_SECONDARY_OUTPUT"

# -- the jobs service (gpuhub.service) ---------------------------------------------------------
# Seconds between renewals of queued jobs' grants. Set by tests; read by gpuhub.service.holds.
HOLD_SECONDS_ENV = "GPUHUB_HOLD_SECONDS"
# The service's log level. Set by the Helm chart; read by gpuhub.service.__main__.
LOG_LEVEL_ENV = "GPUHUB_LOG_LEVEL"
