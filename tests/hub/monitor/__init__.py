"""Tests of the hub's monitor (spawner/gpuhub/hub/monitor): utilization, usage, reclaim,
over-shares, metrics."""
