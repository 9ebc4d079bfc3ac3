"""A real JupyterHub as a child process, and the hub configuration for the test cluster."""
