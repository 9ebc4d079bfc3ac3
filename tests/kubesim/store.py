"""The object store: etcd plus the watch cache, in memory.

One global resourceVersion counter (as etcd's revision) orders every write. Each resource type
keeps a bounded history of its recent changes, so a watch can resume from a resourceVersion it
has seen; older ones get ``410 Gone`` (``Expired``), exactly as after an etcd compaction.
"""

from __future__ import annotations

import asyncio
import copy
import random
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .errors import already_exists, conflict, expired, not_found
from .resources import ResourceType

Obj = dict[str, Any]
Key = tuple[str, str]  # (group, plural)
Listener = Callable[[ResourceType, str, Obj, Obj | None], None]


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# Kinds whose removal after deletionTimestamp is up to a component (kubelet, namespace
# controller), not just to metadata.finalizers being empty.
_GRACEFUL = ("Pod", "Namespace")
_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # the apiserver's generateName alphabet


@dataclass(eq=False)
class Watcher:
    rt: ResourceType
    namespace: str | None
    matches: Callable[[Obj], bool]
    queue: asyncio.Queue[tuple[str, Obj] | None] = field(default_factory=asyncio.Queue)
    abort: bool = False  # set when a fault drops the connection without a clean end


class Store:
    def __init__(self, history: int = 2000) -> None:
        self.rv = 1
        self.types: dict[Key, ResourceType] = {}
        self.objects: dict[Key, dict[tuple[str, str], Obj]] = {}
        self.history: dict[Key, deque[tuple[int, str, Obj, Obj | None]]] = {}
        self.compacted: dict[Key, int] = {}  # history before this rv is gone
        self.history_size = history
        self.watchers: dict[Key, set[Watcher]] = {}
        self.listeners: list[Listener] = []

    # -- types ------------------------------------------------------------------------------
    def register(self, rt: ResourceType) -> None:
        self.types[rt.key] = rt
        self.objects.setdefault(rt.key, {})
        self.history.setdefault(rt.key, deque(maxlen=self.history_size))
        self.compacted.setdefault(rt.key, self.rv)
        self.watchers.setdefault(rt.key, set())

    def unregister(self, key: Key) -> None:
        for watcher in list(self.watchers.get(key, ())):
            watcher.queue.put_nowait(None)
        for store in (self.types, self.objects, self.history, self.compacted, self.watchers):
            store.pop(key, None)  # type: ignore[attr-defined]

    def find(self, group: str, version: str, plural: str) -> ResourceType | None:
        rt = self.types.get((group, plural))
        return rt if rt is not None and rt.version == version else None

    def by_kind(self, kind: str, group: str | None = None) -> ResourceType:
        for rt in self.types.values():
            if rt.kind == kind and (group is None or rt.group == group):
                return rt
        raise KeyError(kind)

    # -- reads --------------------------------------------------------------------------------
    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.objects[rt.key].get((namespace if rt.namespaced else "", name))
        if obj is None:
            raise not_found(rt.group_resource, name)
        return obj

    def peek(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        return self.objects[rt.key].get((namespace if rt.namespaced else "", name))

    def list(self, rt: ResourceType, namespace: str | None = None) -> list[Obj]:
        items = self.objects[rt.key]
        if namespace is None or not rt.namespaced:
            return list(items.values())
        return [o for (ns, _), o in items.items() if ns == namespace]

    # -- writes -------------------------------------------------------------------------------
    def _next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def create(
        self, rt: ResourceType, obj: Obj, namespace: str | None = None, uid: str | None = None
    ) -> Obj:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        if rt.namespaced:
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        bucket = self.objects[rt.key]
        if not meta.get("name") and meta.get("generateName"):
            for _ in range(10):
                name = meta["generateName"] + "".join(random.choices(_SUFFIX_CHARS, k=5))
                if (meta.get("namespace", ""), name) not in bucket:
                    break
            meta["name"] = name
        ref = (meta.get("namespace", ""), meta["name"])
        if ref in bucket:
            raise already_exists(rt.group_resource, meta["name"])
        meta["uid"] = uid or str(uuid.uuid4())
        meta["creationTimestamp"] = now()
        for transient in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"):
            meta.pop(transient, None)
        if rt.kind not in (
            "Pod",
            "Event",
            "Namespace",
            "Node",
            "Secret",
            "ConfigMap",
            "ServiceAccount",
        ):
            meta["generation"] = 1
        meta["resourceVersion"] = str(self._next_rv())
        bucket[ref] = obj
        self._changed(rt, "ADDED", obj, None)
        return obj

    def replace(self, rt: ResourceType, obj: Obj, *, check_rv: bool = True) -> Obj:
        """Store a new version of an existing object (optimistic concurrency on resourceVersion)."""
        meta = obj["metadata"]
        old = self.get(rt, meta.get("namespace", ""), meta["name"])
        given = meta.get("resourceVersion")
        if check_rv and given and given != old["metadata"]["resourceVersion"]:
            raise conflict(rt.group_resource, meta["name"])
        obj = copy.deepcopy(obj)
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        meta = obj["metadata"]
        for fixed in (
            "uid",
            "creationTimestamp",
            "namespace",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ):
            if fixed in old["metadata"]:
                meta[fixed] = old["metadata"][fixed]
            else:
                meta.pop(fixed, None)
        if "generation" in old["metadata"]:
            changed_spec = {k: v for k, v in obj.items() if k not in ("metadata", "status")} != {
                k: v for k, v in old.items() if k not in ("metadata", "status")
            }
            meta["generation"] = old["metadata"]["generation"] + (1 if changed_spec else 0)
        if _without_rv(obj) == _without_rv(old):
            return old  # no-op updates do not bump resourceVersion
        meta["resourceVersion"] = str(self._next_rv())
        self.objects[rt.key][(meta.get("namespace", ""), meta["name"])] = obj
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and rt.kind not in _GRACEFUL
        ):
            return self.remove(rt, obj)
        self._changed(rt, "MODIFIED", obj, old)
        return obj

    def mutate(
        self, rt: ResourceType, namespace: str, name: str, change: Callable[[Obj], None]
    ) -> Obj:
        """Read-modify-write from inside kubesim (controllers, kubelet): never conflicts."""
        obj = copy.deepcopy(self.get(rt, namespace, name))
        change(obj)
        meta = obj["metadata"]
        old = self.get(rt, namespace, name)
        for fixed in ("uid", "creationTimestamp", "namespace", "name"):
            if fixed in old["metadata"]:
                meta[fixed] = old["metadata"][fixed]
        if obj == old:
            return old
        meta["resourceVersion"] = str(self._next_rv())
        self.objects[rt.key][(meta.get("namespace", ""), meta["name"])] = obj
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and rt.kind not in _GRACEFUL
        ):
            return self.remove(rt, obj)
        self._changed(rt, "MODIFIED", obj, old)
        return obj

    def remove(self, rt: ResourceType, obj: Obj) -> Obj:
        meta = obj["metadata"]
        ref = (meta.get("namespace", ""), meta["name"])
        current = self.objects[rt.key].pop(ref, None)
        if current is None:
            raise not_found(rt.group_resource, meta["name"])
        final = copy.deepcopy(obj)
        final["metadata"]["resourceVersion"] = str(self._next_rv())
        self._changed(rt, "DELETED", final, current)
        return final

    def compact(self) -> None:
        """Forget all history (as an etcd compaction does): older watches get 410 Gone."""
        for key, history in self.history.items():
            history.clear()
            self.compacted[key] = self.rv

    # -- change feed ------------------------------------------------------------------------------
    def _changed(self, rt: ResourceType, kind: str, obj: Obj, old: Obj | None) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        history = self.history[rt.key]
        if len(history) == history.maxlen:
            self.compacted[rt.key] = history[0][0]
        history.append((rv, kind, obj, old))
        for watcher in list(self.watchers[rt.key]):
            event = _filter_event(watcher, kind, obj, old)
            if event is not None:
                watcher.queue.put_nowait(event)
        for listener in list(self.listeners):
            listener(rt, kind, obj, old)

    def watch(
        self,
        rt: ResourceType,
        namespace: str | None,
        matches: Callable[[Obj], bool],
        since: int | None,
    ) -> Watcher:
        """Subscribe; replay history after ``since`` (None: synthetic ADDED for the current state)."""
        watcher = Watcher(rt, namespace, matches)
        if since is None:
            for obj in self.list(rt, namespace):
                if matches(obj):
                    watcher.queue.put_nowait(("ADDED", obj))
        else:
            if since < self.compacted[rt.key]:
                raise expired(since, self.rv)
            for rv, kind, obj, old in self.history[rt.key]:
                if rv > since:
                    event = _filter_event(watcher, kind, obj, old)
                    if event is not None:
                        watcher.queue.put_nowait(event)
        self.watchers[rt.key].add(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        self.watchers.get(watcher.rt.key, set()).discard(watcher)

    def all_watchers(self) -> Iterable[Watcher]:
        for watchers in self.watchers.values():
            yield from list(watchers)


def _without_rv(obj: Obj) -> Obj:
    meta = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
    return {**obj, "metadata": meta}


def _in_scope(watcher: Watcher, obj: Mapping[str, Any]) -> bool:
    return watcher.namespace is None or obj["metadata"].get("namespace") == watcher.namespace


def _filter_event(watcher: Watcher, kind: str, obj: Obj, old: Obj | None) -> tuple[str, Obj] | None:
    """Selectors apply to both versions: leaving the selection is DELETED, entering is ADDED."""
    if not _in_scope(watcher, obj):
        return None
    now_match = watcher.matches(obj)
    if kind == "MODIFIED" and old is not None:
        was = watcher.matches(old)
        if was and not now_match:
            return ("DELETED", obj)
        if now_match and not was:
            return ("ADDED", obj)
    if kind == "DELETED" and old is not None:
        return (kind, obj) if watcher.matches(old) or now_match else None
    return (kind, obj) if now_match else None
