"""Kind ``job``: the notebook run once, in the one pod of a batch/v1 Job."""

from __future__ import annotations

from gpuhub.jobs.kinds.base import Access, Obj, Parts, Resource, Rule, WorkloadKind
from gpuhub.jobs.kinds.phase import (
    FINISHING,
    Phase,
    ended_phase,
    first_start,
    in_phase,
    its_pod,
    pod_waiting,
)

# What the jobs service does with Jobs, and the fleet page's cancel (it notes who and why).
SERVICE_VERBS = ("create", "get", "list", "watch", "delete")
HUB_VERBS = ("list", "patch", "delete")


class Job(WorkloadKind):
    name = "job"
    display_name = "training job"
    resource = Resource("Job", "batch", "v1", "jobs")
    rbac = Access(
        service=(Rule("batch", ("jobs",), SERVICE_VERBS),),
        hub=(Rule("batch", ("jobs",), HUB_VERBS),),
    )

    def manifest(self, parts: Parts) -> Obj:
        return {
            "apiVersion": self.resource.api_version,
            "kind": self.resource.kind,
            "metadata": parts.metadata,
            "spec": {
                # A notebook that failed would fail again: no retries.
                "backoffLimit": 0,
                "template": {
                    "metadata": parts.pod_metadata(),
                    "spec": parts.pod_spec("notebook", primary=True),
                },
            },
        }

    def pod_templates(self, obj: Obj) -> list[tuple[Obj, int]]:
        parallelism = int(obj.get("spec", {}).get("parallelism") or 1)
        return [(obj["spec"]["template"], parallelism)]

    def replicas(self, obj: Obj) -> int:
        return 1

    def primary_container(self, obj: Obj) -> Obj:
        return obj["spec"]["template"]["spec"]["containers"][0]

    def phase(self, obj: Obj, pods: list[Obj], gpu: str, refused: str | None = None) -> Phase:
        status = obj.get("status") or {}
        done = ended_phase(
            obj, pods, done="Complete", what="job", who=its_pod, started=status.get("startTime")
        )
        if done is not None:
            return done
        # One start in every phase, the Job's own (as once it succeeds or fails), so that its
        # run time never jumps as it ends; its first pod's only before the Job has one.
        running = in_phase(pods, "Running")
        if running:
            return Phase(
                "running", "Running.", started=status.get("startTime") or first_start(running)
            )
        ended = in_phase(pods, "Succeeded", "Failed")
        if ended and len(ended) == len(pods):
            # The Job controller batches pod updates: for about a second after its pod ends,
            # a Job has neither Complete nor Failed. It is not waiting for a pod again.
            return Phase(
                "running", FINISHING, started=status.get("startTime") or first_start(ended)
            )
        if refused and not pods:
            return Phase("pending", f"Kubernetes refused to create the job's pod: {refused}")
        waiting = pod_waiting(pods, gpu)
        return Phase("pending", waiting or "Waiting for Kubernetes to create the job's pod.")


JOB = Job()
