"""The jobs REST answers, written once for both places that serve them.

The user's Jupyter server (``/gpuhub/api/jobs``) and the ``gpuhub`` hub service speak the
same shapes (docs/architecture.md): JSON bodies, and refusals as ``{"message": one sentence,
"field": what was wrong, "errors": [{"field", "message"}, ...]}`` with a 4xx status, where
``errors`` lists everything wrong with the request (the first is ``message``), for a form to
show each next to its field. Mixed into a tornado ``RequestHandler``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from gpuhub.core.options import OptionsError, check_json_value
from gpuhub.jobs.model import JobError

log = logging.getLogger("gpuhub.jobs")

TAIL = re.compile(r"[0-9]{1,6}")
MAX_TAIL = 100_000


if TYPE_CHECKING:
    from tornado.web import RequestHandler as _Handler
else:
    _Handler = object  # a mixin: the RequestHandler comes later in the subclass's bases


class JobsJSONMixin(_Handler):
    """``reply``/``refuse``/``json_object``/``answering`` for a tornado RequestHandler, and
    a streamed request body capped before authentication."""

    def refusal_caller(self) -> str:
        """Who asked, for the admin's log line (the hub service knows the user)."""
        return ""

    def reply(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(data))

    def refuse(
        self,
        status: int,
        field: str,
        message: str,
        problems: tuple[tuple[str, str], ...] = (),
    ) -> None:
        caller = self.refusal_caller()
        log.info(
            "%s %s%s refused (%s %s): %s",
            self.request.method,
            self.request.path,
            f" by {caller}" if caller else "",
            status,
            field,
            message,
        )
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        errors = [{"field": f, "message": m} for f, m in problems or ((field, message),)]
        self.finish(json.dumps({"message": message, "field": field, "errors": errors}))

    # -- the body, streamed and capped before authentication ------------------------------
    # Subclasses are decorated with ``tornado.web.stream_request_body``: prepare() then runs
    # on the headers alone and calls :meth:`check_body_size`; :meth:`authenticate` runs when
    # the (capped) body is in.
    _body: bytearray | None = None

    def body_cap(self) -> int:
        """The largest body this handler reads."""
        raise NotImplementedError

    def data_received(self, chunk: bytes) -> None:
        if self._body is None:
            self._body = bytearray()
        self._body += chunk  # tornado stops at the cap set in check_body_size

    def request_body(self) -> bytes:
        return bytes(self._body or b"")

    def check_body_size(self) -> bool:
        """Refuse (413) a declared body over the cap, unread; cap an undeclared (chunked) one
        at the same size. False: refused, nothing more to do."""
        cap = self.body_cap()
        declared = self.request.headers.get("Content-Length")
        if declared is not None and (
            not (declared.isascii() and declared.isdigit()) or int(declared) > cap
        ):
            self.refuse(
                413,
                "body",
                f"The request body is over the {cap // 1024} KiB this API takes "
                f"({self.body_cap_reason()}).",
            )
            return False
        self.request.connection.set_max_body_size(cap)  # type: ignore[union-attr]
        return True

    def body_cap_reason(self) -> str:
        return "a job's parameters plus 64 KiB"

    def json_object(self) -> dict[str, Any]:
        """The request body, which must be a JSON object of plain values.

        Every value is checked once here (:func:`gpuhub.core.options.check_json_value`): no lone
        surrogates, no deep nesting, no huge numbers, so nothing later can fail on them.
        """
        try:
            body = json.loads(self.request_body() or b"{}")
        except RecursionError:
            raise JobError("body", "The request body is nested too deeply.") from None
        except (ValueError, UnicodeDecodeError):
            raise JobError("body", "The request body is not valid JSON.") from None
        if not isinstance(body, dict):
            raise JobError("body", "The request body must be a JSON object.")
        for key, value in body.items():
            check_json_value(key, "body")
            check_json_value(value, key[:40])
        return body

    def tail_argument(self) -> int | None:
        """``?tail=N``: ASCII digits only (``int("²")`` would fail), 1 to 100000."""
        text = self.get_argument("tail", "")
        if not text:
            return None
        if not TAIL.fullmatch(text) or not 0 < int(text) <= MAX_TAIL:
            raise JobError("tail", f"tail must be a number of lines between 1 and {MAX_TAIL}.")
        return int(text)

    async def authenticate(self) -> bool:
        """Who is asking; False when refused (answered). Runs once the capped body is in: a
        refusal before it would close the connection under a client still sending."""
        return True

    async def answering(self, action: Callable[[], Awaitable[None]]) -> None:
        """Authenticate, then run ``action``; a refusal from the one validation path becomes
        its 4xx answer."""
        if not await self.authenticate():
            return
        try:
            await action()
        except JobError as exc:
            self.refuse(exc.status, exc.field, exc.message, exc.problems)
        except OptionsError as exc:
            self.refuse(400, exc.field, exc.message, exc.problems)
