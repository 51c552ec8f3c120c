"""What the `waypost` commands share: the database and tenant options, opening an engine."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from waypost.engine.sync import Engine
from waypost.errors import WaypostError
from waypost.store import DEFAULT_URL

db_option = click.option(
    "--db",
    "db",
    envvar="WAYPOST_DB",
    default=DEFAULT_URL,
    show_default=True,
    help="Database URL (or set WAYPOST_DB).",
)
tenant_option = click.option(
    "--tenant", default="default", show_default=True, help="Tenant of the run."
)


@contextmanager
def open_engine(db: str, **options: Any) -> Iterator[Engine]:
    """An engine on `db`; its errors become clean command-line errors."""
    try:
        engine = Engine(db, **options)
    except WaypostError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        yield engine
    except WaypostError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        engine.close()


def dump(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)
