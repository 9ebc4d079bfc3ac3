"""Live GPU metrics for the JupyterLab sidebar, the status bar and ``%gpu``.

* :mod:`.nvml` / :mod:`.dcgm`: read the GPUs (NVML on this machine, or a DCGM exporter);
* :mod:`.sampler`: the one background sampler per server, with its ring buffer;
* :mod:`.kernels`: GPU process -> kernel -> notebook;
* :mod:`.service`: the answer, serialized once per sample for every client;
* :mod:`.handlers`: ``GET /gpuhub/api/metrics``, and the routes of it and its stream;
* :mod:`.stream`: ``/gpuhub/api/metrics/stream``, the same pushed over a WebSocket.

Import the submodules directly; this package imports nothing heavy on purpose.
"""
