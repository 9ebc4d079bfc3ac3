"""Tests of the job backends and the jobs service (spawner/gpuhub/jobs, spawner/gpuhub/service)."""
