"""The jobs REST answers, written once for both places that serve them.

The user's Jupyter server (``/gpuhub/api/jobs``) and the ``gpuhub`` hub service speak the
same shapes (DESIGN.md): JSON bodies, and refusals as ``{"message": one sentence,
"field": what was wrong}`` with a 4xx status. Mixed into a tornado ``RequestHandler``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..options import OptionsError
from .model import JobError

log = logging.getLogger("gpuhub.jobs")


if TYPE_CHECKING:
    from tornado.web import RequestHandler as _Handler
else:
    _Handler = object  # a mixin: the RequestHandler comes later in the subclass's bases


class JobsJSONMixin(_Handler):
    """``reply``/``refuse``/``json_object``/``answering`` for a tornado RequestHandler."""

    def refusal_caller(self) -> str:
        """Who asked, for the admin's log line (the hub service knows the user)."""
        return ""

    def reply(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(data))

    def refuse(self, status: int, field: str, message: str) -> None:
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
        self.finish(json.dumps({"message": message, "field": field}))

    def json_object(self) -> dict[str, Any]:
        """The request body, which must be a JSON object."""
        try:
            body = json.loads(self.request.body or b"{}")
        except (ValueError, UnicodeDecodeError):
            raise JobError("body", "The request body is not valid JSON.") from None
        if not isinstance(body, dict):
            raise JobError("body", "The request body must be a JSON object.")
        return body

    async def answering(self, action: Callable[[], Awaitable[None]]) -> None:
        """Run ``action``; a refusal from the one validation path becomes its 4xx answer."""
        try:
            await action()
        except JobError as exc:
            self.refuse(exc.status, exc.field, exc.message)
        except OptionsError as exc:
            self.refuse(400, exc.field, exc.message)
