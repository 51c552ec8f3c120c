"""Requests in general: the checks a field may declare, and the base class of requests.

Every operation is a frozen dataclass deriving from `Request` (see
`waypost.model.operations` for them all): its class says which roles may send it
and what it answers; each field that carries outside input names its `Check` in
the field's metadata, and `Request.checked(principal)` applies them once, at the
one door.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Generic, TypeVar
from urllib.parse import quote

from waypost.errors import InvalidRequest, PermissionDenied
from waypost.model.identity import (
    MAX_COMMENT,
    MAX_REASON,
    Principal,
    Role,
    check_id,
    check_identity,
    check_text,
    preview,
)
from waypost.model.numbers import whole_number
from waypost.model.paging import decode_cursor

T = TypeVar("T")
T_fn = TypeVar("T_fn", bound=Callable[..., Any])

MAX_LIMIT = 10_000
MAX_MEMBERS = 1_000
MAX_MAPPING = 200
MAX_TOKEN = 512
MAX_VERSION = 2**31 - 1  # a version number any store keeps as an integer

READERS = frozenset({Role.VIEWER, Role.AUDITOR, Role.OPERATOR, Role.STARTER})
# Who lists approvals as today, every approval of the tenant; an approver and nothing
# more that is not local sees only the approvals it may decide now.
APPROVAL_READERS = frozenset({Role.OPERATOR, Role.AUDITOR, Role.VIEWER})
# How a decision without a credential was authenticated, in the audit: the caller's key.
TOKENLESS_AUTH = "api-key"


class Check(StrEnum):
    """How a field of a request is checked at the door."""

    ID = "id"  # exact, bounded, no control or invisible characters
    OPTIONAL_ID = "optional id"
    IDENTITY = "identity"  # a person, in normal form
    OPTIONAL_IDENTITY = "optional identity"
    IDENTITIES = "identities"  # a list of persons
    ACTOR = "actor"  # the person acting: the caller (by default, or unless local)
    ON_BEHALF = "on behalf"  # a person the caller acts as: itself unless local
    STARTER = "starter"  # who a run is started for: the caller, or whom a local caller names
    REASON = "reason"  # a required text
    OPTIONAL_REASON = "optional reason"
    COMMENT = "comment"  # an optional text
    LIMIT = "limit"  # 1..MAX_LIMIT
    TOKEN = "token"  # a credential: bounded, never quoted
    OPTIONAL_TOKEN = "optional token"  # a credential, or None for none at all
    MAPPING = "mapping"  # step id -> step id
    LOCAL_ONLY = "local only"  # only the embedded API and the CLI may set it
    VERSION = "version"  # a number, or a version's name; None for the newest
    ROLES = "roles"  # role names, at least one: a tuple of `Role`
    CURSOR = "cursor"  # a page's cursor as `waypost.model.paging` makes it; None for the first


def checked(
    kind: Check, *, what: str = "", default: Any = dataclasses.MISSING, doc: str = ""
) -> Any:
    """A request field with its door check (and `what` to call it in errors; `doc` to
    describe it in the surfaces derived from the request: the HTTP body, the CLI option).

    A credential (`Check.TOKEN`) is left out of the request's repr, so that no log line
    or error message that shows a request can show it.
    """
    secret = kind in (Check.TOKEN, Check.OPTIONAL_TOKEN)
    metadata = {"check": kind, "what": what, "doc": doc}
    return field(default=default, metadata=metadata, repr=not secret)


def described(doc: str, *, default: Any = dataclasses.MISSING) -> Any:
    """A request field without a door check of its own (a JSON value the handler bounds),
    described for the derived surfaces."""
    return field(default=default, metadata={"doc": doc})


# == how an operation is offered ========================================================
# Each request class declares its surfaces: the engine's method (`call`, which the remote
# client and the blocking twins share), its HTTP route (`http`), its CLI command (`cli`)
# and its console form (`form`). A surface it does not have is `NotOffered(why)`. Where a
# declaration is marked derived, the route, the remote method, the CLI command or the
# form is made from it (`waypost.server.api.derived`, `waypost.client.remote`,
# `waypost.cli.derived`, `waypost.server.console.commands`); a test lists every operation
# and fails if one lacks a surface without saying why.


@dataclass(frozen=True)
class NotOffered:
    """A surface an operation does not have, and why."""

    why: str


@dataclass(frozen=True)
class Http:
    """An operation's route. Fields named in the path (`{run_id:id}`) come from the path;
    with `derived`, the route is made from the request: the other fields are its JSON
    body (for GET, its query), and it answers `answer`."""

    method: str
    path: str
    status: int = 200
    summary: str = ""
    tag: str = "runs"
    derived: bool = False
    # What a derived route answers: "accepted" ({<first path field>: ..., "accepted": true}).
    answer: str = "accepted"

    def path_fields(self) -> tuple[str, ...]:
        """The request's fields that the path carries, in order."""
        return tuple(part.split("}")[0].split(":")[0] for part in self.path.split("{")[1:])

    def url(self, request: Any) -> str:
        """The path with the request's fields in it (each quoted as one path segment)."""
        path = self.path
        for name in self.path_fields():
            value = quote(str(getattr(request, name)), safe="")
            start = path.index("{" + name)
            path = path[:start] + value + path[path.index("}", start) + 1 :]
        return path


@dataclass(frozen=True)
class Cli:
    """An operation's CLI command (`"runs pause"`); with `derived`, the command is made
    from the request: path fields of its route become arguments, the others options (a
    JSON value parsed), and `done(request)` is the line it prints."""

    command: str
    derived: bool = False
    done: Callable[[Any], str] | None = None


@dataclass(frozen=True)
class Form:
    """The run page's form for an operation on a run: its button, the fields it shows
    beside the reason (JSON ones parsed), whether it is dangerous and whether a
    finished run offers it."""

    label: str
    fields: tuple[str, ...] = ()
    danger: bool = False
    after_end: bool = False


WHY = "Why (recorded in the run's history)."  # a command's reason, described
REMOTE_LATER = NotOffered("the remote client has no method for it yet: its HTTP route serves it")
PLATFORM_ONLY = NotOffered(
    "a platform operator's command, with access to the database: the CLI or the embedded API"
)
GROUPS_ONLY = NotOffered(
    "approver groups are kept with access to the database: the CLI or the embedded API"
)
MIGRATION_ONLY = NotOffered(
    "migrating runs to a new version is checked by an operator with the CLI or the embedded API"
)


@dataclass(frozen=True)
class Resource:
    """What a tenant keeps many of (schedules, users, webhook sources), whose requests'
    names and surfaces follow from their verb (`class PauseSchedule(..., verb="pause")`):
    the name `<verb> <noun>` (`list <noun>s`), the engine's call the same with
    underscores, the CLI command `<group> <verb>` (`show` for get) and the route, tagged
    `group` (`<noun>s` unless given): create POSTs to `path` (201), list GETs it, get GETs
    `path/{key}`, delete DELETEs it, any other verb POSTs to `path/{key}/<verb>`. A
    request declares itself what differs."""

    noun: str
    path: str
    key: str
    group: str = ""

    def surfaces(self, verb: str) -> dict[str, Any]:
        """The name, call, route and CLI command of the request with `verb`."""
        one = f"{self.path}/{{{self.key}:id}}"
        method, path, status = {
            "create": ("POST", self.path, 201),
            "list": ("GET", self.path, 200),
            "get": ("GET", one, 200),
            "delete": ("DELETE", one, 200),
        }.get(verb, ("POST", f"{one}/{verb}", 200))
        name = f"list {self.noun}s" if verb == "list" else f"{verb} {self.noun}"
        group = self.group or f"{self.noun}s"
        return {
            "name": name,
            "call": name.replace(" ", "_"),
            "http": Http(method, path, status, tag=group),
            "cli": Cli(f"{group} {'show' if verb == 'get' else verb}"),
        }


class Request(Generic[T]):
    """An operation; `T` is what it answers."""

    roles: ClassVar[frozenset[Role]] = frozenset()
    name: ClassVar[str] = ""
    # Open to anyone, the unauthenticated principal included, and needing no role: for
    # requests where what the caller presents (an approval link's token) authenticates it.
    open_to_anonymous: ClassVar[bool] = False
    # Its surfaces (see `Http`, `Cli`, `Form`): None is undeclared, which a test refuses.
    call: ClassVar[str | NotOffered | None] = None
    http: ClassVar[Http | NotOffered | None] = None
    # The remote client's method, where it is not named `call` (or NotOffered: why).
    remote: ClassVar[str | NotOffered | None] = None
    cli: ClassVar[Cli | NotOffered | None] = None
    form: ClassVar[Form | None] = None
    # What its name and surfaces follow from, with its verb (see `Resource`).
    resource: ClassVar[Resource | None] = None

    def __init_subclass__(cls, *, verb: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if verb:
            cls.declare(verb)

    @classmethod
    def declare(cls, verb: str) -> None:
        """Declare this request's name and surfaces from `verb` (`class
        PauseSchedule(ScheduleCommand[...], verb="pause")`) by its `resource`'s rule, but
        for those it declares itself (a family with a rule of its own overrides this)."""
        if cls.resource is None:
            raise TypeError(f"{cls.__name__}: a verb without a resource to follow from")
        for attr, value in cls.resource.surfaces(verb).items():
            if attr not in vars(cls):
                setattr(cls, attr, value)

    def checked(self, principal: Principal) -> Request[T]:
        """This request with every field checked and normalised for `principal`."""
        changes: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            kind = f.metadata.get("check")
            if kind is None:
                continue
            what = (f.metadata.get("what") or f.name.replace("_", " ")).replace("{name}", self.name)
            value = getattr(self, f.name)
            new = _check(Check(kind), value, what, principal)
            if new is not value:
                changes[f.name] = new
        return dataclasses.replace(self, **changes) if changes else self  # type: ignore[type-var]


@dataclass(frozen=True)
class RunRequest(Request[T]):
    """A request about one run of the caller's tenant, named by its first field."""

    run_id: str = checked(Check.ID, what="run_id")


@dataclass(frozen=True)
class RunCommand(RunRequest[None]):
    """An operator's command on a run, its reason recorded in the run's history. Its
    route, CLI command and run-page form are derived (`command_route`, `command_cli`)."""

    roles = frozenset({Role.OPERATOR})
    reason: str = checked(Check.REASON, what="{name}'s reason", doc=WHY)


@dataclass(frozen=True)
class RunBatch(Request[T]):
    """A request over the tenant's runs a batch at a time: with `run_id`, that run;
    without, up to `limit` (1 to `most`) of the runs whose ids sort after `after` (None:
    from the first). `dry_run` counts and writes nothing."""

    most: ClassVar[int] = MAX_LIMIT
    run_id: str | None = checked(Check.OPTIONAL_ID, what="run_id", default=None)
    after: str | None = checked(Check.OPTIONAL_ID, what="after", default=None)
    limit: int = 100
    dry_run: bool = False

    def checked(self, principal: Principal) -> Request[T]:
        check_page_limit(self.limit, self.most)
        check_flag(self.dry_run, "dry_run")
        if self.run_id is not None and self.after is not None:
            raise InvalidRequest("give run_id or after, not both", field="after")
        return super().checked(principal)


def command_route(command: str, summary: str) -> Http:
    """The derived route of a run command: `POST /v1/runs/{run_id}/<command>`, 202."""
    return Http("POST", f"/v1/runs/{{run_id:id}}/{command}", 202, summary, derived=True)


def command_cli(command: str, done: Callable[[Any], str]) -> Cli:
    """The derived CLI command of a run command: `waypost runs <command> RUN_ID --reason`."""
    return Cli(f"runs {command}", derived=True, done=done)


def _check(kind: Check, value: Any, what: str, principal: Principal) -> Any:
    if kind is Check.ID:
        return check_id(value, what)
    if kind is Check.OPTIONAL_ID:
        return None if value is None else check_id(value, what)
    if kind is Check.IDENTITY:
        return check_identity(value, what)
    if kind is Check.OPTIONAL_IDENTITY:
        return None if value is None else check_identity(value, what)
    if kind is Check.IDENTITIES:
        if isinstance(value, str) or not isinstance(value, list | tuple):
            raise InvalidRequest(f"{what} must be a list of names", field=what)
        if len(value) > MAX_MEMBERS:
            raise InvalidRequest(
                f"{what}: {len(value)} names, at most {MAX_MEMBERS} at once", field=what
            )
        return [check_identity(v, what) for v in value]
    if kind is Check.ACTOR:
        if value is None:
            return check_identity(principal.subject, what)
        return acting(check_identity(value, what), what, principal)
    if kind is Check.ON_BEHALF:
        if value is None:
            return None if principal.local else check_identity(principal.subject, what)
        return acting(check_identity(value, what), what, principal)
    if kind is Check.STARTER:
        # Never unknown: segregation of duties refuses every decision on a run whose
        # starter nobody knows, so a start names the caller when it names nobody.
        if value is None:
            return check_identity(principal.subject, what)
        return acting(check_identity(value, what), what, principal)
    if kind is Check.REASON:
        return check_text(value, what, limit=MAX_REASON, required=True)
    if kind is Check.OPTIONAL_REASON:
        return check_text(value, what, limit=MAX_REASON)
    if kind is Check.COMMENT:
        return check_text(value, what, limit=MAX_COMMENT)
    if kind is Check.LIMIT:
        return whole_number(value, what, 1, MAX_LIMIT)
    if kind is Check.OPTIONAL_TOKEN and value is None:
        return None
    if kind in (Check.TOKEN, Check.OPTIONAL_TOKEN):
        if not isinstance(value, str) or len(value) > MAX_TOKEN:
            return ""  # never quoted, never stored: an unusable credential is just invalid
        return value
    if kind is Check.MAPPING:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise InvalidRequest(f"{what} must map step ids to step ids", field=what)
        if len(value) > MAX_MAPPING:
            raise InvalidRequest(f"{what}: {len(value)} entries, at most {MAX_MAPPING}", field=what)
        return {check_id(k, f"{what} key"): check_id(v, f"{what} value") for k, v in value.items()}
    if kind is Check.VERSION:
        if value is None:
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            if not 0 <= value <= MAX_VERSION:
                raise InvalidRequest(
                    f"a version number is from 0 to {MAX_VERSION}, not {preview(value)}",
                    field="version",
                )
            return value
        return check_id(value, what)
    if kind is Check.ROLES:
        return check_roles(value)
    if kind is Check.CURSOR:
        if value is not None:
            decode_cursor(value)
        return value
    if kind is Check.LOCAL_ONLY:
        if value is not None and not principal.local:
            raise PermissionDenied(f"only the embedded API may set {what}")
        return value
    raise AssertionError(kind)  # pragma: no cover - every Check is handled above


def check_page_limit(limit: Any, top: int, *, unit: str = "") -> int:
    """A page's or a batch's `limit`: a whole number from 1 to `top` (of `unit`)."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidRequest(f"limit must be a whole number, not {preview(limit)}", field="limit")
    if not 1 <= limit <= top:
        raise InvalidRequest(f"limit must be from 1 to {top}{unit}, not {limit}", field="limit")
    return limit


def check_flag(value: Any, what: str) -> bool:
    """A yes-or-no field: a bool, nothing else."""
    if not isinstance(value, bool):
        raise InvalidRequest(f"{what} must be true or false", field=what)
    return value


def acting(identity: str, what: str, principal: Principal) -> str:
    if not principal.local and not principal.is_subject(identity):
        raise PermissionDenied(
            f"{what} must be the caller ({preview(principal.subject)}), not {preview(identity)}"
        )
    return identity


def check_roles(value: Any) -> tuple[Role, ...]:
    known = ", ".join(r.value for r in Role)
    if isinstance(value, str) or not isinstance(value, list | tuple | set | frozenset):
        raise InvalidRequest(f"roles must be a list of role names ({known})", field="roles")
    if len(value) > len(Role):
        raise InvalidRequest(f"roles: {len(value)} given, there are {len(Role)}", field="roles")
    roles: set[Role] = set()
    for name in value:
        try:
            roles.add(Role(name))
        except (ValueError, TypeError):
            raise InvalidRequest(
                f"unknown role {preview(name)} (known: {known})", field="roles"
            ) from None
    if not roles:
        raise InvalidRequest(f"an API key needs at least one role ({known})", field="roles")
    return tuple(r for r in Role if r in roles)  # in the order Role declares them


# == handlers ===========================================================================
HANDLES = "__waypost_handles__"


def handles(*kinds: type[Request[Any]]) -> Callable[[T_fn], T_fn]:
    """Mark a method as the handler of requests of `kinds` (the engine finds its rooms'
    handlers by this mark: `waypost.client.door.handlers_of`)."""

    def mark(fn: T_fn) -> T_fn:
        setattr(fn, HANDLES, (*getattr(fn, HANDLES, ()), *kinds))
        return fn

    return mark
