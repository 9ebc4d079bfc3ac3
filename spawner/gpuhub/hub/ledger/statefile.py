"""The files the hub keeps beside its database (``ledger_file``, ``gpu_usage_file``).

One home for how they are written and read, so that a crash, a full disk or a damaged file
never costs the hub what it knows (docs/architecture.md, "Files the hub keeps"):

* :func:`write_json` writes atomically: a temporary file in the same folder, flushed and
  fsynced, renamed over the old one, then the folder fsynced, so that after a crash the file
  is the old version or the new one, never a mix or nothing.
* :func:`read_json` reads one; a file that cannot be understood is moved aside under a new
  name (``<name>.damaged-<UTC time>``), never overwritten, and the caller says in one log
  line what it did about it (:func:`set_aside` names both files).
* :class:`JsonStore` is the load, prune and save that the stores written every few ticks
  (GPU usage, budget usage) share: each says only what it holds.
"""

from __future__ import annotations

import abc
import contextlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def write_json(path: Path, data: Any) -> None:
    """Replace ``path`` by ``data`` as JSON, atomically and durably. Raises ``OSError``
    (and leaves the old file as it was) when the disk refuses."""
    text = json.dumps(data, separators=(",", ":"))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (POSIX keeps it in the folder's entry)."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Damage:
    """A file that could not be understood, and where it now lies."""

    path: Path
    reason: str
    kept_as: Path | None  # None: it could not be moved either (then it is left in place)

    def sentence(self, what: str, then: str) -> str:
        """One log line naming both files: what was wrong, where it is, what the hub did."""
        where = (
            f"kept it as {self.kept_as}"
            if self.kept_as is not None
            else "could not move it aside (it stays where it is)"
        )
        return f"gpuhub: {what} {self.path} is damaged ({self.reason}); {where} and {then}"


class Damaged(ValueError):
    """Raised by a file's reader for content of the wrong shape (one sentence saying what)."""


def read_json(path: Path) -> tuple[Any, Damage | None]:
    """``(data, None)``; ``(None, None)`` when there is no file yet; ``(None, damage)`` when
    it cannot be read as JSON: then it has been moved aside already."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, Damage(path, f"cannot read it: {exc.strerror or exc}", None)
    try:
        return json.loads(raw.decode("utf-8")), None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        reason = "it is empty" if not raw.strip() else f"not JSON: {_short(exc)}"
        return None, set_aside(path, reason)


def restore_json(path: Path, restore: Callable[[Any], list[str]]) -> Damage | None:
    """Read ``path`` and hand its data to ``restore``, which keeps every part that is what it
    should be and returns what was not; the damage (the file then moved aside), or None."""
    data, damage = read_json(path)
    if data is not None:
        problems = restore(data)
        if problems:
            damage = set_aside(path, "; ".join(problems[:3]))
    return damage


def set_aside(path: Path, reason: str) -> Damage:
    """Move a damaged ``path`` to a new name beside it, so nothing overwrites what it held."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
    try:
        os.replace(path, target)
    except OSError:
        return Damage(path, reason, None)
    with contextlib.suppress(OSError):
        _fsync_folder(path.parent)
    return Damage(path, reason, target)


class JsonStore(abc.ABC):
    """A state file held in memory and written when it changed (``path`` None: memory only).

    A subclass sets :attr:`WHAT` (its name in log lines), reads a file back in
    :meth:`_restore`, drops what is too old to keep in :meth:`_prune` and says what it writes
    in :meth:`_data`; it calls :meth:`_load` once its own tables exist. A damaged file is set
    aside and what could be read is written at once, so nothing it held is overwritten.
    """

    WHAT = "state"

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = Path(path).resolve() if path is not None else None
        self._dirty = False

    @abc.abstractmethod
    def _restore(self, data: Any) -> list[str]:
        """Take every entry of ``data`` that is what it should be; return what was not."""

    @abc.abstractmethod
    def _kept(self) -> str:
        """What was read of a damaged file, for the log line ("3 totals, 2 notices")."""

    @abc.abstractmethod
    def _prune(self, now: float) -> None:
        """Drop what is too old to keep, just before a save."""

    @abc.abstractmethod
    def _data(self) -> Any:
        """The file's content, as JSON data."""

    @property
    def _log(self) -> logging.Logger:
        """The logger of the store's own module, as its log lines always came from."""
        return logging.getLogger(type(self).__module__)

    def _load(self) -> None:
        assert self.path is not None
        damage = restore_json(self.path, self._restore)
        if damage is None:
            return
        self._log.error(damage.sentence(self.WHAT, f"kept what could be read ({self._kept()})"))
        self._dirty = True
        self.save()

    def save(self, now: float | None = None) -> None:
        """Write the store if it changed (the monitor calls this every few ticks)."""
        if self.path is None or not self._dirty:
            return
        self._prune(time.time() if now is None else now)
        try:
            write_json(self.path, self._data())
            self._dirty = False
        except OSError as exc:
            self._log.error("gpuhub: cannot write %s %s: %s", self.WHAT, self.path, exc)


def rows(data: dict[str, Any], name: str, width: int, problems: list[str]) -> list[list[Any]]:
    """The list ``name`` of a file's ``data``, only its rows of ``width`` items; what is not
    a list or not a row is added to ``problems``."""
    value = data.get(name, [])
    if not isinstance(value, list):
        problems.append(f"{name} is not a list")
        return []
    good = [r for r in value if isinstance(r, list) and len(r) == width]
    if len(good) < len(value):
        problems.append(f"{len(value) - len(good)} of the {name} rows are not rows")
    return good


def kind_of(value: Any) -> str:
    """What a JSON value is, for a sentence ("found a list")."""
    names = {list: "a list", dict: "an object", str: "a string", bool: "true or false"}
    if value is None:
        return "null"
    return names.get(
        type(value), "a number" if isinstance(value, int | float) else "something else"
    )


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 120 else text[:117] + "..."
