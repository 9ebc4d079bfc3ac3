"""Writing core/v1 Events the way each component records them."""

from __future__ import annotations

import time
from typing import Any

from .store import Obj, Store, now, now_micro


def involved(obj: Obj, field_path: str | None = None) -> dict[str, Any]:
    meta = obj["metadata"]
    ref = {
        "kind": obj["kind"],
        "namespace": meta.get("namespace", ""),
        "name": meta["name"],
        "uid": meta["uid"],
        "apiVersion": obj["apiVersion"],
        "resourceVersion": meta["resourceVersion"],
    }
    if field_path:
        ref["fieldPath"] = field_path
    return ref


class Recorder:
    """An event recorder for one component (``default-scheduler``, ``kubelet``, ``job-controller``)."""

    def __init__(self, store: Store, component: str, host: str | None = None) -> None:
        self.store = store
        self.component = component
        self.host = host

    def _event_rt(self):  # type: ignore[no-untyped-def]
        return self.store.by_kind("Event")

    def emit(
        self,
        obj: Obj,
        type_: str,
        reason: str,
        message: str,
        *,
        field_path: str | None = None,
        host: str | None = None,
    ) -> Obj:
        meta = obj["metadata"]
        namespace = meta.get("namespace") or "default"
        if self.component == "default-scheduler":
            # The scheduler records through events.k8s.io/v1: eventTime, no timestamps, no source.
            event = {
                "metadata": {"name": f"{meta['name']}.{time.time_ns():x}", "namespace": namespace},
                "involvedObject": involved(obj),
                "reason": reason,
                "message": message,
                "source": {},
                "firstTimestamp": None,
                "lastTimestamp": None,
                "count": None,
                "type": type_,
                "eventTime": now_micro(),
                "action": "Scheduling",
                "reportingComponent": "default-scheduler",
                "reportingInstance": "default-scheduler-kubesim",
            }
        else:
            stamp = now()
            source: dict[str, str] = {"component": self.component}
            if host or self.host:
                source["host"] = host or self.host or ""
            event = {
                "metadata": {"name": f"{meta['name']}.{time.time_ns():x}", "namespace": namespace},
                "involvedObject": involved(obj, field_path),
                "reason": reason,
                "message": message,
                "source": source,
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
                "type": type_,
                "eventTime": None,
                "reportingComponent": self.component,
                "reportingInstance": host or self.host or "",
            }
        if self.store.peek(self.store.by_kind("Namespace"), "", namespace) is None:
            return event
        return self.store.create(self._event_rt(), event, namespace)

    def repeat(self, event: Obj) -> Obj:
        """The same event again: the recorder's aggregation bumps count / series."""
        rt = self._event_rt()

        def bump(o: Obj) -> None:
            if o.get("eventTime"):
                series = o.get("series") or {"count": 1}
                o["series"] = {"count": series["count"] + 1, "lastObservedTime": now_micro()}
            else:
                o["count"] = (o.get("count") or 1) + 1
                o["lastTimestamp"] = now()

        meta = event["metadata"]
        if self.store.peek(rt, meta["namespace"], meta["name"]) is None:
            return event
        return self.store.mutate(rt, meta["namespace"], meta["name"], bump)
