"""Tests of what deploys gpuhub: the Helm chart, images, Jupyter config and the demo."""
