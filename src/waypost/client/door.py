"""The one door: every operation enters here, with the principal who asks for it.

`Door.execute(request, principal)` does, for every operation and every caller
(the embedded API, the CLI, the HTTP server), what no operation should do on
its own: it finds the operation's handler, checks the principal's roles and
tenant, checks and normalises the request's fields (`Request.checked`), then
runs the handler. Every refusal is a `WaypostError` with a bounded message.

Adding an operation: a request class in `waypost.model.operations` (its fields,
their checks, its roles, its surfaces), a handler in the room that owns it (taking
the checked request and the principal) marked `@handles(TheRequest)`, and a thin
method on `AsyncEngine` that builds the request; the sync `Engine` and the remote
client derive theirs from that one (see docs/architecture.md, "How to add an
operation").

A request marked `open_to_anonymous` needs no role, and is the only kind the
unauthenticated principal (`Principal.anonymous()`) may send: what it carries
(an approval link's token) is what authenticates the caller.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar, cast

from waypost.errors import InvalidRequest, PermissionDenied, QuotaExceeded
from waypost.model.identity import Principal, check_id, preview
from waypost.model.logs import logger
from waypost.model.observe import NO_OBSERVER, Observer
from waypost.model.operations import Request
from waypost.model.requests import HANDLES

T = TypeVar("T")
Handler = Callable[[Any, Principal], Awaitable[Any]]
# What the remote client's calls send their requests with: `AsyncClient._send`.
Sends = Callable[..., Awaitable[Any]]

log = logger("waypost.door")


class LocalDoor(Protocol):
    """What the engine's calls hand their requests to, `AsyncEngine._local(request, tenant)`
    (on a remote client, the twin's sender: `twins.remote_twin`): what the request answers."""

    async def __call__(self, request: Request[T], tenant: str, /) -> T: ...


def handlers_of(*rooms: object) -> dict[type[Request[Any]], Handler]:
    """Each room's methods marked `@handles(...)`, by the request class they carry out."""
    found: dict[type[Request[Any]], Handler] = {}
    for room in rooms:
        for name in dir(type(room)):
            kinds = getattr(getattr(type(room), name, None), HANDLES, ())
            for kind in kinds:
                if kind in found:
                    raise ValueError(f"{kind.__name__} has two handlers")
                found[kind] = getattr(room, name)
    return found


class Door:
    """Runs operations for principals: roles, bounds and identities checked once, here."""

    def __init__(
        self, handlers: Mapping[type[Request[Any]], Handler], observer: Observer = NO_OBSERVER
    ) -> None:
        self._handlers = dict(handlers)
        self.observer = observer

    def serves(self, kind: type[Request[Any]]) -> bool:
        return kind in self._handlers

    def reroute(self, kinds: Iterable[type[Request[Any]]], handler: Handler) -> None:
        """Carry out requests of `kinds` (operations the door serves) with `handler`."""
        for kind in kinds:
            if kind not in self._handlers:
                raise ValueError(f"{kind.__name__} is not an operation the door serves")
            self._handlers[kind] = handler

    def operations(self) -> tuple[type[Request[Any]], ...]:
        """Every request class this door serves (the role table is checked against it)."""
        return tuple(self._handlers)

    async def execute(self, request: Request[T], principal: Principal) -> T:
        """Check `request` for `principal` and carry it out; answers what the operation does."""
        handler = self._handlers.get(type(request))
        if handler is None:
            raise InvalidRequest(f"{preview(request)} is not an operation waypost serves")
        if not principal.authenticated:
            # Nobody signed in: only what authenticates itself (an approval link's token).
            if not request.open_to_anonymous:
                raise PermissionDenied(
                    f"{request.name or type(request).__name__} needs a signed-in caller"
                )
        else:
            check_id(principal.tenant, "tenant")
            allowed = type(request).roles  # the class's: a request's field may be called roles
            if not request.open_to_anonymous and not principal.may(allowed):
                needed = ", ".join(sorted(r.value for r in allowed)) or "admin"
                raise PermissionDenied(
                    f"{preview(principal.subject)} may not "
                    f"{request.name or type(request).__name__} in tenant "
                    f"{preview(principal.tenant)}: that needs one of the roles {needed}"
                )
        checked = request.checked(principal)
        log.debug("%s by %s in %s", request.name, principal.subject, principal.tenant)
        try:
            return cast(T, await handler(checked, principal))
        except QuotaExceeded as exc:
            self.observer.quota_refused(principal.tenant, exc.quota)
            raise
