"""A real Jupyter server as a child process, and the extension that counts its NVML calls."""
