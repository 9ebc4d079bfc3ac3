"""A RemoteBackend that records what Kubernetes mode would forward, for the seam's tests.

It stands in for the hub-service HTTP client (``gpuhub.jobs.remote``) so the user
server's side of the seam is tested on its own: which requests reach the remote backend,
with which body, URL and token. The hub service's own tests cover the other side.
"""

from __future__ import annotations

import json
import os
import secrets
from typing import Any

from gpuhub.jobs import JobNotFound, JobRecord, JobRequest, RemoteBackend


class RecordingBackend(RemoteBackend):
    name = "kubernetes"

    def __init__(self, jobs_url: str, api_token: str, **kwargs: Any) -> None:
        super().__init__(jobs_url, api_token, **kwargs)
        self.records: dict[str, JobRecord] = {}

    async def submit(self, request: JobRequest, owner: str) -> JobRecord:
        with open(os.environ["GPUHUB_TEST_FORWARD_LOG"], "a") as log:
            entry = {
                "url": self.jobs_url,
                "token": self.api_token,
                "owner": owner,
                "body": self.request_body(request),
            }
            log.write(json.dumps(entry) + "\n")
        job_id = f"{request.name}-{secrets.token_hex(3)}"
        record = JobRecord.new(job_id, request, backend=self.name, owner=owner)
        self.records[job_id] = record
        return record

    async def list(self, owner: str) -> list[JobRecord]:
        return [r for r in self.records.values() if r.owner == owner]

    async def get(self, owner: str, job_id: str) -> JobRecord:
        record = self.records.get(job_id)
        if record is None or record.owner != owner:
            raise JobNotFound(job_id)
        return record

    async def logs(self, owner: str, job_id: str, *, tail: int | None = None) -> str:
        await self.get(owner, job_id)
        return ""

    async def cancel(self, owner: str, job_id: str) -> JobRecord:
        record = await self.get(owner, job_id)
        record.status = "cancelled"
        return record
