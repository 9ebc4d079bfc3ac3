"""Fakes and harnesses that tests, benchmarks and the demo all use: the NVML stand-in, the
Kubernetes test cluster, a real hub and Jupyter server as child processes, the chart renderer.

It lives beside ``tests/`` rather than inside it so that ``benchmarks`` and ``localk8s`` never
reach into the test tree; it imports nothing of ``tests`` itself (.importlinter).
"""
