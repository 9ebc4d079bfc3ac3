"""What a user's quota leaves for a cluster job, and the sentence when it leaves none
(gpuhub_lab.holdings.quota_room, from the hub's holdings answer; the whole flow is in
tests/lab/test_jobs_quota_browser.py)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuhub_lab.holdings import quota_room
from tests.support.messages import problems


def answer(quota: float | None, *holdings: dict[str, Any], waiting: float = 0) -> dict[str, Any]:
    held = sum(h["gpus"] for h in holdings if not h.get("waiting")) if holdings else 0
    return {
        "available": True,
        "quota": quota,
        "held": held,
        "waiting": waiting,
        "holdings": list(holdings),
    }


SERVER = {"kind": "server", "name": "", "label": "server 'default'", "gpus": 1}
NAMED = {"kind": "server", "name": "big", "label": "server 'big'", "gpus": 2}
JOB = {"kind": "job", "name": "train-1", "label": "job 'train-1'", "gpus": 1}


@pytest.mark.parametrize(
    ("data", "room"),
    [
        ({"available": False, "quota": None, "held": 0, "holdings": []}, (None, None)),
        (answer(None, SERVER), (None, None)),
        (answer(2, SERVER), (1, None)),
        (answer(4), (4, None)),
        (
            answer(1, SERVER),
            (
                0,
                "Your server holds your 1 GPU: this job runs without one, or stop the server first.",
            ),
        ),
        (
            answer(2, NAMED),
            (
                0,
                'Your server "big" holds your 2 GPUs: this job runs without one, '
                "or stop the server first.",
            ),
        ),
        (
            answer(1, JOB),
            (
                0,
                'Your job "train-1" holds your 1 GPU: this job runs without one, or wait '
                "for it to end.",
            ),
        ),
        (
            answer(3, NAMED, JOB),
            (
                0,
                "Your servers and jobs hold your 3 GPUs: this job runs without one, "
                "or stop a server first.",
            ),
        ),
        # What waits in a queue counts against the quota too.
        (
            answer(2, SERVER, {**JOB, "waiting": "in Kueue's queue"}, waiting=1),
            (
                0,
                "Your servers and jobs hold your 2 GPUs: this job runs without one, "
                "or stop a server first.",
            ),
        ),
        (
            answer(1, {**SERVER, "gpus": 1, "share": 0.5}) | {"held": 0.5},
            (
                0,
                "Your server holds 0.5 of your 1 GPU, leaving less than one: this job runs "
                "without one, or stop the server first.",
            ),
        ),
        (answer(0), (0, "Your GPU quota allows no GPU: this job runs without one.")),
    ],
)
def test_what_the_quota_leaves_and_why_none(data: dict[str, Any], room: Any) -> None:
    assert quota_room(data) == room
    if room[1] is not None:
        assert not problems(room[1]), problems(room[1])
