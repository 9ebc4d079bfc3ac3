"""Tests of the hub's pages and endpoints (spawner/gpuhub/hub/web): the fleet page and
/hub/api/gpuhub."""
