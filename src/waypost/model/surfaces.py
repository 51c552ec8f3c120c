"""Every operation, and the parts of its surfaces that are derived from its request class.

A request class declares how it is offered (`call`, `http`, `cli`, `form`: see
`waypost.model.requests`). The HTTP route, the remote client's method, the CLI command
and the console form of an operation whose declaration is marked derived are made from
its fields by the functions here and the layers that use them; `EVERY_OPERATION` is the
list a test walks to check that no operation lacks a surface without saying why.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from waypost.model.operations import OPERATIONS
from waypost.model.operations_queues import QUEUE_OPERATIONS
from waypost.model.requests import Cli, Form, Http, Request
from waypost.model.webhooks import WEBHOOK_OPERATIONS

EVERY_OPERATION: tuple[type[Request[Any]], ...] = (
    *OPERATIONS,
    *WEBHOOK_OPERATIONS,
    *QUEUE_OPERATIONS,
)


@dataclasses.dataclass(frozen=True)
class Field:
    """A field of a request as a derived surface shows it: its name, its type (resolved),
    whether it is required, its default and its description."""

    name: str
    type: Any
    required: bool
    default: Any
    doc: str

    @property
    def json(self) -> bool:
        """A JSON value (an object or anything) rather than a text: parsed from a CLI option
        or a form field."""
        return (
            self.type is Any
            or typing.get_origin(self.type) is dict
            or (
                dict in typing.get_args(self.type)
                or any(typing.get_origin(a) is dict for a in typing.get_args(self.type))
            )
        )


def fields_of(kind: type[Request[Any]]) -> tuple[Field, ...]:
    """The fields of requests of `kind`, in their order."""
    hints = typing.get_type_hints(kind)
    found = []
    for f in dataclasses.fields(kind):  # type: ignore[arg-type]
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        default = None if f.default is dataclasses.MISSING else f.default
        found.append(Field(f.name, hints[f.name], required, default, f.metadata.get("doc", "")))
    return tuple(found)


def path_fields(kind: type[Request[Any]]) -> tuple[str, ...]:
    http = kind.http
    return http.path_fields() if isinstance(http, Http) else ()


def body_fields(kind: type[Request[Any]]) -> tuple[Field, ...]:
    """The fields a derived route takes in its body: those its path does not carry."""
    in_path = set(path_fields(kind))
    return tuple(f for f in fields_of(kind) if f.name not in in_path)


def body_of(request: Request[Any]) -> dict[str, Any]:
    """What a remote client sends as the body of a derived route."""
    return {f.name: getattr(request, f.name) for f in body_fields(type(request))}


def derived_http() -> tuple[type[Request[Any]], ...]:
    return tuple(k for k in EVERY_OPERATION if isinstance(k.http, Http) and k.http.derived)


def derived_cli() -> tuple[type[Request[Any]], ...]:
    return tuple(k for k in EVERY_OPERATION if isinstance(k.cli, Cli) and k.cli.derived)


def forms() -> tuple[type[Request[Any]], ...]:
    return tuple(k for k in EVERY_OPERATION if isinstance(k.form, Form))


def summary(kind: type[Request[Any]]) -> str:
    """The first paragraph of the request's docstring, on one line."""
    text = (kind.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(text.split())
