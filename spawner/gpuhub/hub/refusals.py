"""How a refused spawn is said: one sentence, to the form and the REST API alike, logged once.

A refusal is an ``HTTPError`` whose sentence JupyterHub shows (:func:`refusal`). A refused
form submit or spawn link is remembered for the form JupyterHub renders next, with what the
user typed and each sentence next to its field (:func:`remember_refusal`,
:func:`refused_server`); a REST request renders no form, so its refusal is not kept. The
options a refused spawn brought are put back to the last accepted ones
(:func:`forget_refused_options`), and JupyterHub's own repeats of the refusal in its log are
dropped (:class:`QuietRefusals`).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Mapping
from copy import deepcopy
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from tornado import web

from gpuhub.hub.form import Refusal, said_in_place

# How long a refused submit is remembered for the form JupyterHub renders right after it.
REFUSAL_SECONDS = 5.0


def refusal(message: str, status: int = 400) -> web.HTTPError:
    """An HTTPError whose one sentence reaches the user in the form and the REST API alike."""
    error = web.HTTPError(status, "%s", message)
    error.jupyterhub_message = message  # type: ignore[attr-defined]  # read by JupyterHub's pages
    return error


class QuietRefusals(logging.Filter):
    """Keep a refused request to the one warning gpuhub logs.

    JupyterHub logs a spawn that ``apply_user_options`` refused up to four more times, three
    of them as ``[E]`` with a traceback (spawner, pages, user), though a refusal is the user's
    input, not the hub's error. Records at ERROR that carry a recent refusal's sentence, in
    their message or their exception, are dropped; everything else passes.
    """

    def __init__(self) -> None:
        super().__init__()
        self.recent: deque[str] = deque(maxlen=64)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR or not self.recent:
            return True
        exc = record.exc_info[1] if record.exc_info else None
        texts = [record.getMessage(), str(exc) if exc is not None else ""]
        return not any(refused in text for refused in self.recent for text in texts)


def quiet_refusals(log: Any) -> QuietRefusals:
    """The filter on JupyterHub's logger (the spawner's ``log``) and on tornado's application
    logger (JupyterHub's ``User`` logs there), added once."""
    for existing in getattr(log, "filters", []):
        if isinstance(existing, QuietRefusals):
            return existing
    quiet = QuietRefusals()
    for logger in (log, logging.getLogger("tornado.application")):
        if hasattr(logger, "addFilter"):
            logger.addFilter(quiet)
    return quiet


def log_name(spawner: Any) -> str:
    """``user`` or ``user:server``: how JupyterHub names a spawner in its log lines (as its
    private ``Spawner._log_name`` does), from public attributes only."""
    user = getattr(spawner, "user", None)
    user_name = user.name if user else "(no user)"
    name = getattr(spawner, "name", "")
    return f"{user_name}:{name}" if name else user_name


def log_refusal(spawner: Any, message: str) -> None:
    """The one warning a refusal is logged as; JupyterHub's repeats of it are dropped."""
    quiet_refusals(spawner.log).recent.append(message)
    spawner.log.warning("Refused options for %s: %s", log_name(spawner), message)


def from_hub_pages(spawner: Any) -> bool:
    """Whether this spawn comes from the hub's pages (the form, a spawn link), which render
    the form again after a refusal, rather than from the REST API, which does not."""
    handler = getattr(spawner, "handler", None)
    return handler is not None and not isinstance(handler, APIHandler)


def remember_refusal(
    spawner: Any,
    options: object,
    problems: tuple[tuple[str, str], ...],
    notice: str = "",
    *,
    pages: bool = False,
) -> bool:
    """Keep what a refused form submit (or spawn link) said and asked for, for the form
    JupyterHub renders next: it renders it with the *default* server's spawner
    (``user.spawner``) whichever server was refused, so the refused one is found among the
    user's spawners. A REST request renders no form: its refusal is not kept (``pages``:
    the caller knows it is the hub's pages, before JupyterHub hands the spawner its handler).
    True when kept."""
    if not pages and not from_hub_pages(spawner):
        return False
    typed = dict(options) if isinstance(options, Mapping) else {}
    spawner._gpuhub_refused = Refusal(typed, problems, time.monotonic(), notice)
    return True


def said_once(error: Any, kept: bool, problems: tuple[tuple[str, str], ...]) -> Any:
    """A refusal the next form says next to its fields is not said again in JupyterHub's
    red message above the form (its REST answer is unchanged): one sentence, once."""
    if kept and said_in_place(problems):
        error.jupyterhub_message = ""
    return error


def forget_refused_options(spawner: Any) -> None:
    """Put back the options the user last started a server with (or none), in the database
    and on the spawner: JupyterHub stored the refused ones as the next defaults before any
    check, and the next form would offer them again ("16 GB" refused through the REST API,
    then pre-filled). A refused form submit is still shown as typed, once (``Refusal``)."""
    if spawner._gpuhub_accepted is None:  # no handler ever set: JupyterHub stored nothing
        return
    accepted = deepcopy(spawner._gpuhub_accepted)
    orm = getattr(spawner, "orm_spawner", None)
    if orm is not None and orm.user_options != accepted:
        orm.user_options = accepted
        if spawner.db is not None:
            spawner.db.commit()
    spawner.user_options = accepted


def refused_server(spawner: Any) -> tuple[Any, Refusal | None]:
    """The user's spawner refused a moment ago (this one or a named sibling) and what it
    was told, taken once; else ``spawner`` itself and None."""
    user = getattr(spawner, "user", None)
    candidates = [spawner, *getattr(user, "spawners", {}).values()] if user else [spawner]
    now = time.monotonic()
    recent = [
        s
        for s in candidates
        if (r := getattr(s, "_gpuhub_refused", None)) is not None and now - r.when < REFUSAL_SECONDS
    ]
    if not recent:
        return spawner, None
    chosen = max(recent, key=lambda s: s._gpuhub_refused.when)
    refused = chosen._gpuhub_refused
    for s in recent:
        s._gpuhub_refused = None
    return chosen, refused
