"""Tests of the JupyterHub process (spawner/gpuhub/hub): both spawners, the form, progress."""
