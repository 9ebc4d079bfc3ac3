"""GPU bookings over REST (docs/architecture.md, "Bookings"; the rules: :mod:`gpuhub.core.bookings`).

* ``POST /hub/api/gpuhub/bookings`` body ``{"gpu_type", "gpus", "start", "end", "for":
  {"user": name} | {"group": name}, "reason"}`` (``for`` may be left out: the sender;
  ``start``/``end`` ISO-8601 with a zone) -> ``201`` the booking with ``id``. A user books for
  themselves within the booking rule of a group they are in and their GPU quota; fleet admins
  (JupyterHub admins and holders of ``custom:gpuhub:fleet``) book for any user, or for a group
  when ``admins_book_for_groups``. Bad input: 400 with one sentence naming the field; what the
  sender may not book: 403; a conflict (no instant may have more GPUs of a type booked than
  exist, nor a user more than their quota): 409 naming what is in the way.
* ``GET /hub/api/gpuhub/bookings`` -> ``{"bookings": [...]}``: every booking not yet ended,
  soonest first, for everyone signed in (what is booked when); whom each is for, who booked
  it and why only for the one who booked it, whom it is for (the user, a member of the group)
  and fleet admins.
* ``DELETE /hub/api/gpuhub/bookings/<id>`` -> 204: cancelled, by the one who booked it or a
  fleet admin (another's: 403; no such booking: 404).

Not signed in: 403. Sending needs the sender's full access (their session with its XSRF
token, or a token with access to their servers), never a token that only identifies them.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Collection
from typing import Any

from jupyterhub import orm
from tornado import web

from gpuhub.core.bookings import (
    Booking,
    BookingRules,
    Caller,
    Refused,
    TypeFacts,
    check_room,
    parse_body,
)
from gpuhub.core.options import as_given
from gpuhub.hub.ledger.booking_book import BookingBook, attach
from gpuhub.hub.monitor import booking_watch, gpu_monitor
from gpuhub.hub.web.access import BoundedAPIHandler, may_see_all


class BookingsHandler(BoundedAPIHandler):
    """``GET`` and ``POST /hub/api/gpuhub/bookings`` (see the module docstring)."""

    SUPPORTED_METHODS: tuple[str, ...] = ("GET", "POST", "OPTIONS")

    # -- who asks -------------------------------------------------------------------------
    def _caller(self, what: str) -> Any:
        """The signed-in caller (403 otherwise)."""
        current = self.current_user
        if current is None:
            raise web.HTTPError(403, f"Sign in, or send a token, to {what}.")
        return current

    def _fleet_admin(self) -> bool:
        """Fleet admins: JupyterHub admins and holders of the fleet scope; a service, with
        JupyterHub's admin role (``admin:users`` on every user)."""
        if getattr(self.current_user, "kind", "") == "service":
            return may_see_all(self) or "admin:users" in self.parsed_scopes
        return may_see_all(self)

    def _groups(self) -> frozenset[str]:
        user = self.current_user
        return frozenset(g.name for g in getattr(user, "groups", ()) or ())

    def _may_see(self, booking: Booking) -> bool:
        """Whether the caller may read whom a booking is for, who booked it and why."""
        name = getattr(self.current_user, "name", "")
        return (
            self._fleet_admin()
            or booking.booked_by == name
            or booking.for_user == name
            or (bool(booking.for_group) and booking.for_group in self._groups())
        )

    def _book(self, user: Any) -> tuple[BookingBook, Any]:
        """The hub's book, with the rules of ``user``'s spawner (any hub user's: the same
        config), and that spawner."""
        found = self.find_user(user.name) if getattr(user, "kind", "") == "user" else None
        if found is None:  # a service: the spawner of the hub's monitor, or of any user
            monitor = gpu_monitor.current()
            if monitor is not None:
                return attach(monitor.spawner), monitor.spawner
            first = self.db.query(orm.User).first()
            found = self.find_user(first.name) if first is not None else None
        spawner = found.spawner if found is not None else None
        if spawner is None:
            from gpuhub.hub.ledger.booking_book import BOOKINGS

            return BOOKINGS, None
        return attach(spawner), spawner

    def _full_access(self, user: Any, what: str) -> None:
        """403 unless the caller is a user with their full access (a token that only
        identifies them does not book nor cancel)."""
        if getattr(user, "kind", "") != "user":
            if self._fleet_admin():
                return  # an admin service books and cancels for users and groups
            raise web.HTTPError(
                403, f"Only hub users and fleet admins {what}; this token is a service's."
            )
        found = self.find_user(user.name)
        if found is None or not self.reaches_servers_of(found):
            raise web.HTTPError(
                403,
                f"This token only identifies {user.name}; to {what} it needs access to their "
                f"servers (scope access:servers!user={user.name}).",
            )

    # -- the endpoints --------------------------------------------------------------------
    def get(self) -> None:
        user = self._caller("see what is booked")
        book, _ = self._book(user)
        self.finish(json.dumps({"bookings": [b.for_json(self._may_see(b)) for b in book.all()]}))

    async def post(self) -> None:
        user = self._caller("book GPUs")
        self._full_access(user, "book GPUs")
        book, spawner = self._book(user)
        rules = book.rules
        if rules is None or spawner is None:
            raise web.HTTPError(
                403, "This hub takes no bookings: its admin has not set GPUSpawner.bookings."
            )
        body = self._body()
        types = await _types(spawner)
        now = time.time()
        try:
            booking = parse_body(
                body,
                caller=Caller(user.name, self._groups(), self._fleet_admin()),
                rules=rules,
                types=types,
                now=now,
                groups_of=self._groups_of,
                group_exists=lambda name: orm.Group.find(self.db, name) is not None,
                new_id=_new_id(book),
            )
            check_room(
                booking,
                book.all(now),
                types[booking.gpu_type],
                self._quota(booking, spawner, rules),
                self._may_see,
            )
        except Refused as refused:
            raise web.HTTPError(refused.status, refused.sentence) from None
        book.add(booking)
        self.log.info(
            "gpuhub: %s booked %s GPUs of %s for %s %s (booking %s)",
            user.name,
            booking.gpus,
            booking.gpu_type,
            booking.whose,
            booking.window(),
            booking.id,
        )
        _watch_now(self)
        self.set_status(201)
        self.finish(json.dumps(booking.for_json(names=True)))

    def _body(self) -> Any:
        try:
            return json.loads(self.request.body or b"null")
        except ValueError:
            text = (self.request.body or b"").decode("utf-8", "replace")
            raise web.HTTPError(
                400, f"Send a JSON object with the booking's fields, not {as_given(text)}."
            ) from None

    def _groups_of(self, name: str) -> Collection[str] | None:
        found = orm.User.find(self.db, name)
        return None if found is None else [g.name for g in found.groups]

    def _quota(self, booking: Booking, spawner: Any, rules: BookingRules) -> Any:
        """The quota of whom the booking is for (None: a group's, or no quota)."""
        if not booking.for_user:
            return None
        if booking.for_user != spawner.user.name:
            found = self.find_user(booking.for_user)
            if found is None:
                return None
            spawner = found.spawner
        return spawner.gpu_quota_limit()


class BookingHandler(BookingsHandler):
    """``DELETE /hub/api/gpuhub/bookings/<id>``: cancel one."""

    SUPPORTED_METHODS: tuple[str, ...] = ("DELETE", "OPTIONS")

    def delete(self, booking_id: str) -> None:
        user = self._caller("cancel a booking")
        self._full_access(user, "cancel a booking")
        book, _ = self._book(user)
        booking = {b.id: b for b in book.all()}.get(booking_id)
        if booking is None:
            raise web.HTTPError(404, f"There is no booking {as_given(booking_id)}.")
        if booking.booked_by != user.name and not self._fleet_admin():
            raise web.HTTPError(
                403,
                f"Only whoever made booking {as_given(booking_id)} or a fleet admin may cancel it.",
            )
        book.remove(booking_id)
        self.log.info("gpuhub: %s cancelled booking %s", user.name, booking_id)
        _watch_now(self)
        self.set_status(204)
        self.finish()


async def _types(spawner: Any) -> dict[str, TypeFacts]:
    """The hub's GPU types that can be booked (whole GPUs: not shared by memory or time),
    with how many of each exist."""
    capacity, _ = await spawner.gpu_capacity()
    types = spawner.gpu_policy.gpu_types
    return {
        key: TypeFacts(types[key].display_name, int(figures.total))
        for key, figures in capacity.items()
        if key in types and figures.devices is None and types[key].sharing is None
    }


def _new_id(book: BookingBook) -> str:
    while (found := f"b-{secrets.token_hex(4)}") in book.bookings:
        pass
    return found


def _watch_now(handler: BoundedAPIHandler) -> None:
    """A booking made or cancelled: warn, stop or lift now, not at the next tick."""
    monitor = gpu_monitor.for_handler(handler)
    if monitor is not None:
        task = asyncio.ensure_future(booking_watch.watch(monitor))
        monitor._tasks.add(task)
        task.add_done_callback(monitor._tasks.discard)


HANDLERS: list[tuple[str, type[web.RequestHandler]]] = [
    (r"/api/gpuhub/bookings", BookingsHandler),
    (r"/api/gpuhub/bookings/([^/]+)", BookingHandler),
]
