"""Harnesses the tests share: a real hub, Jupyter server and Chromium, policies, stand-ins."""
