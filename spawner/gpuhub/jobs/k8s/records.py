"""The Kubernetes backend's records: what a job is, said from its workload, its pods, its
finished log and Kueue; and the interface that reads them (list, get, logs, output)."""

from __future__ import annotations

import asyncio
import json
import time

from kubernetes_asyncio.client.exceptions import ApiException

from gpuhub.core.quantity import format_memory
from gpuhub.jobs.k8s.queue import Queued, QueueReading
from gpuhub.jobs.k8s.resources import workload_resources
from gpuhub.jobs.k8s.status import LOST_OUTPUT, Obj, PodLog, parse_pod_log, parse_time, queue_of
from gpuhub.jobs.kinds import of_object
from gpuhub.jobs.kinds.phase import Phase
from gpuhub.jobs.model import JobError, JobNotFound, JobRecord, utcnow, without_noise
from gpuhub.k8s.labels import JOB_ID_LABEL, KIND_LABEL, RECORD_ANNOTATION, USERNAME_ANNOTATION
from gpuhub.k8s.rawapi import request_body as _body

MAX_LOG_BYTES = 1024 * 1024
_FINAL_CACHE = 2048  # result lines of finished jobs kept (they never change; a few KB each)
_TOMBSTONE_SECONDS = 24 * 3600


class Records(QueueReading):
    """A job's record from its workload, pods, final log and Kueue's words; the reading half
    of the interface (list, get, logs, output)."""

    def _record(
        self,
        obj: Obj,
        pods: list[Obj],
        pod_log: PodLog | None = None,
        refused: str | None = None,
        queued: Queued | None = None,
    ) -> JobRecord:
        meta = obj["metadata"]
        saved = json.loads((meta.get("annotations") or {}).get(RECORD_ANNOTATION) or "{}")
        res = workload_resources(obj)
        queued = queued or Queued({}, {})
        uid = meta.get("uid", "")
        use = queued.uses.get(queue_of(obj) or "")
        workload, place = queued.workloads.get(uid), queued.positions.get(uid)
        phase = self._phase(obj, pods, refused, workload, use, place)
        kind = meta.get("labels", {}).get(KIND_LABEL, "job")
        workers = of_object(obj).replicas(obj)
        summary = self._gpu_summary(obj)
        record = JobRecord(
            id=meta["name"],
            name=saved.get("name") or meta["name"],
            kind=kind,
            backend=self.name,
            status=phase.status,
            owner=meta["annotations"][USERNAME_ANNOTATION],
            notebook=saved.get("notebook") or "",
            created=parse_time(saved.get("created") or meta.get("creationTimestamp")) or utcnow(),
            started=parse_time(phase.started),
            finished=parse_time(phase.finished),
            image=res["image"],
            cpu=res["cpu"],
            memory=res["memory"],
            gpu_type=res["gpu_type"],
            gpus=res["gpus"],
            gpu_memory=format_memory(res["gpu_memory"]) if res["gpu_memory"] else None,
            workers=workers,
            gpu=f"{workers} workers, {summary} each" if workers > 1 else summary,
            parameters=saved.get("parameters") or {},
            runtime=saved.get("runtime") or None,
            message=phase.message,
            error=phase.error,
            queue_position=queued.positions.get(uid) if phase.status == "queued" else None,
        )
        if phase.status == "succeeded":
            record.output = saved.get("output")
        if pod_log is not None and pod_log.result:
            if phase.status == "failed" and pod_log.result.get("error"):
                record.error = pod_log.result["error"]
            record.failed_cell = pod_log.failed_cell
        if phase.status in ("succeeded", "failed"):
            record.message = None
            if pod_log is not None and not self.settings.home_volume.shared:
                record.message = self._output_verdict(pod_log, phase.status)
        return record

    @staticmethod
    def _output_verdict(pod_log: PodLog, status: str) -> str | None:
        """Why a finished job's executed notebook cannot come back, if it cannot."""
        if pod_log.output_problem is not None:
            return pod_log.output_problem
        if status == "succeeded" and pod_log.result is not None and not pod_log.has_output:
            return LOST_OUTPUT  # papermill always writes it; the log lost the block
        return None

    async def _final_log(self, obj: Obj, pods: list[Obj], *, full: bool = False) -> PodLog | None:
        """The parsed log of a finished job's primary pod, and the verdict on its output.

        Only the result line (status, error, failing cell) and the verdict are kept, per job
        uid: they never change. Listing and status read a log's structure only (is the
        notebook block there, whole?); the notebook is inflated, bounded, only for ``full``
        (GET output, once per user server), and a verdict against it (over the bound,
        corrupt) is cached, so it is said from then on and never inflated again.
        """
        job_id = obj["metadata"]["name"]
        cache_key = f"{job_id}/{obj['metadata'].get('uid')}"
        cached = self._final_logs.get(cache_key)
        if cached is not None and (not full or cached.output_problem is not None):
            self._final_logs.move_to_end(cache_key)
            return cached
        pod = self._primary_pod(obj, pods)
        if pod is None:
            return None
        text = await self._read_log(pod)
        inflate = full and not self.settings.home_volume.shared
        bound = self.settings.max_output_bytes
        # Counting first, keeping nothing: a bomb is judged without holding its inflation.
        parsed = await asyncio.to_thread(
            parse_pod_log, text, inflate=inflate, max_output_bytes=bound
        )
        if inflate and parsed.output_problem is None:
            parsed = await asyncio.to_thread(
                parse_pod_log, text, inflate=True, keep_notebook=True, max_output_bytes=bound
            )
        del text
        self._final_logs[cache_key] = PodLog(
            "", parsed.result, None, parsed.output_problem, parsed.has_output
        )
        while len(self._final_logs) > _FINAL_CACHE:
            self._final_logs.popitem(last=False)
        return parsed

    @staticmethod
    def _primary_pod(obj: Obj, pods: list[Obj]) -> Obj | None:
        mine = [
            p
            for p in pods
            if p["metadata"].get("labels", {}).get(JOB_ID_LABEL) == obj["metadata"]["name"]
        ]
        mine = of_object(obj).primary_pods(mine)
        if not mine:
            return None
        return max(mine, key=lambda p: p["metadata"].get("creationTimestamp") or "")

    async def _read_log(self, pod: Obj, tail: int | None = None) -> str:
        try:
            data = await _body(
                self.core.read_namespaced_pod_log(
                    pod["metadata"]["name"],
                    self.namespace,
                    container=pod["spec"]["containers"][0]["name"],
                    tail_lines=tail,
                    _preload_content=False,
                )
            )
        except ApiException as exc:
            if exc.status in (400, 404):  # not started yet, or gone
                return ""
            raise
        return data.decode("utf-8", errors="replace")

    def _tombstone(self, owner: str, job_id: str) -> JobRecord | None:
        now = time.monotonic()
        for key, (when, _) in list(self._tombstones.items()):
            if now - when > _TOMBSTONE_SECONDS:
                del self._tombstones[key]
        entry = self._tombstones.get(job_id)
        if entry is not None and entry[1].owner == owner:
            return entry[1]
        return None

    async def list(self, owner: str) -> list[JobRecord]:
        objects = await self._workloads(owner)
        pods = await self._pods(owner) if objects else []
        queued = await self._queued(objects)
        records = []
        seen = set()
        for obj in objects:
            name = obj["metadata"]["name"]
            seen.add(name)
            mine = [p for p in pods if p["metadata"].get("labels", {}).get(JOB_ID_LABEL) == name]
            phase = self._phase(obj, mine)
            pod_log = await self._final_log(obj, mine) if self._wants_log(phase) else None
            refused = await self._refused(obj, mine)
            records.append(self._record(obj, mine, pod_log, refused, queued))
        for _when, record in self._tombstones.values():
            if record.owner == owner and record.id not in seen:
                records.append(record)
        records.sort(key=lambda r: r.created, reverse=True)
        return records

    async def _owned_or_cancelled(self, owner: str, job_id: str) -> Obj | JobRecord:
        """The live workload, or else the record of a job cancelled lately (else JobNotFound)."""
        try:
            return await self._get_owned(owner, job_id)
        except JobNotFound:
            tomb = self._tombstone(owner, job_id)
            if tomb is None:
                raise
            return tomb

    async def get(self, owner: str, job_id: str) -> JobRecord:
        obj = await self._owned_or_cancelled(owner, job_id)
        if isinstance(obj, JobRecord):
            return obj  # cancelled lately
        pods = await self._pods(owner, job_id)
        phase = self._phase(obj, pods)
        pod_log = await self._final_log(obj, pods) if self._wants_log(phase) else None
        queued = await self._queued([obj])
        return self._record(obj, pods, pod_log, await self._refused(obj, pods), queued)

    def _wants_log(self, phase: Phase) -> bool:
        """A failed job's error is in its log; so is, without a shared home, its output."""
        if phase.status == "failed":
            return True
        return phase.status == "succeeded" and not self.settings.home_volume.shared

    async def logs(self, owner: str, job_id: str, *, tail: int | None = None) -> str:
        obj = await self._owned_or_cancelled(owner, job_id)
        if isinstance(obj, JobRecord):
            return ""  # cancelled lately: its pods are gone
        pods = await self._pods(owner, job_id)
        pod = self._primary_pod(obj, pods)
        if pod is None:
            return ""
        # Only the tail is read (tailLines); the notebook block is skipped, never inflated.
        raw = await self._read_log(pod, tail=tail)
        text = without_noise(parse_pod_log(raw, tail=tail is not None).text)
        if tail is not None:
            text = "".join(text.splitlines(keepends=True)[-tail:])
        return text[-MAX_LOG_BYTES:]

    async def output(self, owner: str, job_id: str) -> bytes:
        """The executed notebook of a finished job that ran without a shared home."""
        obj = await self._get_owned(owner, job_id)
        pods = await self._pods(owner, job_id)
        phase = self._phase(obj, pods)
        if phase.status not in ("succeeded", "failed"):
            raise JobError("id", "The job has not finished; its output is not ready yet.", 409)
        pod_log = await self._final_log(obj, pods, full=True)
        if pod_log is not None and pod_log.output_problem is not None:
            raise JobError("id", pod_log.output_problem, 422)
        if pod_log is None or pod_log.notebook is None:
            where = "in your home directory" if self.settings.home_volume.shared else "in its log"
            raise JobError("id", f"The job left no executed notebook {where}.", 404)
        return pod_log.notebook
