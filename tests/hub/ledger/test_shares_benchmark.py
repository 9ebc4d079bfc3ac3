"""``python -m benchmarks shares`` at a small size: its layout gives the figures it asserts
(the capacity cache's shared types, the ledger's fractions, the form's lines, the
workstation's book), so the benchmark keeps measuring what it says it measures."""

from __future__ import annotations

import pytest

from benchmarks import bench_shares


def test_the_shares_benchmark_produces_the_figures_it_expects(
    capsys: pytest.CaptureFixture[str],
) -> None:
    small = ["--nodes", "20", "--pods-per-node", "12", "--rounds", "20", "--renders", "5"]
    bench_shares.main([*small, "--changes", "4", "--no-write"])
    out = capsys.readouterr().out
    want = bench_shares.expected(20, 12)
    # 20 T4 nodes of 80 slots: node n holds n mod 9 shares, one slot each.
    shares = sum(n % 9 for n in range(20))
    assert want["t4"][:3] == (1600 - shares, 1600, 160)
    assert f"figures right: yes (T4 {1600 - shares:,} of 1,600 slots" in out
    assert f"A10 {want['a10'][0]:,} of 640 replicas" in out
    assert "free on GPU 0" in out
