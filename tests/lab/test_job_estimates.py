"""A job waiting for GPUs says when it likely starts: the lab's jobs API matches it to its
waiting holding by job id (gpuhub_lab.holdings.with_job_estimates), and ``%jobs`` and
``%job status`` say the hub's sentence under its row (gpuhub_lab.jobs_magics.JobTable)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuhub_lab.holdings import job_estimates, with_job_estimates
from gpuhub_lab.jobs_magics import JobMagics, JobTable

ESTIMATE = {
    "likely": "2026-11-29T14:30:00Z",
    "by": "2026-11-29T15:10:00Z",
    "latest": None,
    "because": ["You are 2nd in line."],
}
SAID = "Likely to start around 14:30 UTC, 4 times in 5 by 15:10 UTC."


def waiting(name: str, jobs: list[str] | None = None, kind: str = "job") -> dict[str, Any]:
    return {
        "kind": kind,
        "name": name,
        "jobs": jobs or [],
        "waiting": "waiting in Kueue's queue",
        "estimate": ESTIMATE,
        "estimate_text": SAID,
    }


def job(job_id: str, status: str = "queued", **more: Any) -> dict[str, Any]:
    return {"id": job_id, "kind": "job", "status": status, "gpu": "1 x A100", **more}


def test_a_waiting_job_is_matched_by_its_id_and_a_job_hold_by_its_jobs() -> None:
    answer = {
        "holdings": [
            waiting("train-1"),
            waiting("jobs of server 'b'", jobs=["local-2", "local-3"]),
            waiting("train-9", kind="server"),  # a server named like a job is not it
            {**waiting("train-4"), "waiting": None},  # held: no estimate
            "junk",
        ]
    }
    assert set(job_estimates(answer)) == {"train-1", "jobs of server 'b'", "local-2", "local-3"}
    assert job_estimates(answer)["local-3"] == {"estimate": ESTIMATE, "estimate_text": SAID}


def test_only_jobs_still_to_start_get_an_estimate() -> None:
    answer = {"holdings": [waiting("train-1"), waiting("train-2")]}
    jobs = [job("train-1"), job("train-2", "running"), job("train-3", "pending")]
    said = with_job_estimates(jobs, answer)
    assert said[0]["estimate_text"] == SAID and said[0]["estimate"] == ESTIMATE
    assert "estimate_text" not in said[1]  # running: its wait is over
    assert said[2]["estimate_text"] is None and said[2]["estimate"] is None
    assert with_job_estimates(jobs, {"available": False, "holdings": []})[0]["estimate"] is None


def test_jobs_says_the_estimate_under_the_waiting_row() -> None:
    table = JobTable(
        [
            job("train-1", queue_position=2, estimate_text=SAID),
            job("train-2", "running", elapsed=30, estimate_text="stale"),
        ]
    )
    lines = repr(table).splitlines()
    assert lines[1].startswith("train-1") and "queued, 2nd in line" in lines[1]
    assert lines[2] == f"  ↳ {SAID}"
    assert lines[3].startswith("train-2") and len(lines) == 4


def test_the_html_table_escapes_the_estimate() -> None:
    table = JobTable([job("train-1", estimate_text="Likely <b>soon</b> & then.")])
    out = table._repr_html_()
    assert "gpuhub-jobs-estimate" in out
    assert "Likely &lt;b&gt;soon&lt;/b&gt; &amp; then." in out and "<b>" not in out


def test_job_status_prints_the_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    JobMagics._report(job("train-1", queue_position=1, estimate_text=SAID))
    assert capsys.readouterr().out.splitlines() == ["train-1 queued, 1st in line.", SAID]
