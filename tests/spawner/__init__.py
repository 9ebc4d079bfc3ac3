"""Tests of the spawners, the form, the GPU ledger, reclaim and the fleet view (spawner/gpuhub)."""
