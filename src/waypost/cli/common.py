"""What the `waypost` commands share: the database, tenant, --json and --app options,
opening an engine, loading the `--app` modules, printing a tenant's records as JSON or
lines, and building the commands that list a tenant's records or act on one of them."""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, cast

import click

from waypost.client.sync import Engine
from waypost.errors import WaypostError
from waypost.model.logs import LOG_FORMATS
from waypost.runtime.registry import items_in_modules
from waypost.store import DEFAULT_URL
from waypost.store.sqlite import parse_sqlite_url

from .output import cell, show, table

if TYPE_CHECKING:
    from waypost.model.definitions import Problem

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

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
OUTPUTS = ("table", "json")


def output_option(json_help: str = "Print JSON.", *, default: str = "table") -> Callable[[F], F]:
    """--output table|json, and --json as its alias for json: the command is called with
    `as_json`. A command whose records a person reads prints a table by default; one whose
    only form was JSON keeps JSON as its default (`default`)."""

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def run(*args: Any, output: str | None, as_json: bool, **kwargs: Any) -> Any:
            if as_json and output == "table":
                raise click.UsageError("--json is --output json: give one or the other")
            chosen = "json" if as_json else (output or default)
            return command(*args, as_json=chosen == "json", **kwargs)

        return stacked(
            cast(F, run),
            click.option(
                "--output",
                type=click.Choice(OUTPUTS),
                default=None,
                help=f"table (for a person: a list has a header row, then a row a record) "
                f"or json [default: {default}].",
            ),
            click.option(
                "--json", "as_json", is_flag=True, help=f"{json_help.rstrip('.')} (--output json)."
            ),
        )

    return decorate


json_option = output_option()
json_first_option = output_option("Print JSON, what it prints by default.", default="json")
roles_option = click.option(
    "--roles",
    required=True,
    help="Comma-separated: admin, operator, starter, approver, auditor, viewer.",
)


UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def duration_seconds(text: str, digits: int) -> int | None:
    """`text` as a whole number of at most `digits` digits and a unit s, m, h, d or w
    (`90m`, `12h`, `30d`, `2w`), in seconds; None if it is not one."""
    found = re.fullmatch(f"([0-9]{{1,{digits}}})([smhdw])", text.strip())
    return None if found is None else int(found.group(1)) * UNIT_SECONDS[found.group(2)]


def role_names(roles: str) -> list[str]:
    """The names `--roles` gives, comma-separated."""
    return [r.strip() for r in roles.split(",") if r.strip()]


class Cli(click.Group):
    """The `waypost` group: whatever goes wrong is one line on stderr and exit 1.

    A `WaypostError` or an operating-system error (a missing file, a closed port)
    is what a user can act on: its message is printed. Anything else is a bug of
    waypost's: one line says so; `WAYPOST_DEBUG=1` shows the traceback.
    """

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
            raise
        except WaypostError as exc:
            raise click.ClickException(str(exc)) from exc
        except OSError as exc:
            where = f": {exc.filename}" if exc.filename else ""
            raise click.ClickException(f"{exc.strerror or exc}{where}") from exc
        except Exception as exc:
            if os.environ.get("WAYPOST_DEBUG"):
                raise
            raise click.ClickException(
                f"internal error: {type(exc).__name__}: {str(exc)[:200]} "
                "(set WAYPOST_DEBUG=1 to see where)"
            ) from exc


def _missing_sqlite_file(db: str) -> str | None:
    """The path of a SQLite URL whose file does not exist (None otherwise)."""
    if not db.startswith("sqlite:"):
        return None
    try:
        path, _ = parse_sqlite_url(db)
    except WaypostError:
        return None  # the engine says what is wrong with the URL
    return None if os.path.exists(path) else path


@contextmanager
def open_engine(db: str, *, must_exist: bool = False, **options: Any) -> Iterator[Engine]:
    """An engine on `db`; its errors become clean command-line errors.

    A command that reads, or acts on runs, approvals or definitions that must
    already be there (`must_exist`), refuses a SQLite file that does not exist,
    instead of creating an empty database and showing nothing.
    """
    missing = _missing_sqlite_file(db) if must_exist else None
    if missing is not None:
        folder = os.path.dirname(os.path.abspath(missing))
        why = "" if os.path.isdir(folder) else f" (its folder {folder} does not exist)"
        raise click.ClickException(
            f"there is no database at {missing}{why}: give --db or WAYPOST_DB; a worker or "
            "`waypost db migrate` creates one"
        )
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


def record_json(record: Any, *names: str, **more: Any) -> dict[str, Any]:
    """The attributes `names` of `record` for --json (a time in ISO 8601, an enum as its
    value), and `more` as they are given."""
    out: dict[str, Any] = {}
    for name in names:
        value = getattr(record, name)
        if isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, Enum):
            value = value.value
        out[name] = value
    return {**out, **more}


def echo_found(
    found: Sequence[T],
    as_json: bool,
    to_json: Callable[[T], Any],
    columns: Sequence[str],
    row: Callable[[T], Sequence[Any]],
    none: str,
) -> None:
    """Records a list command found: with --json one JSON list, else a table of `columns`
    with a row each (`row`), and `none` on stderr when there are none."""
    if as_json:
        click.echo(dump([to_json(r) for r in found]))
        return
    if not found:
        click.echo(none, err=True)
        return
    shown = table(*columns)
    for r in found:
        shown.add_row(*(cell(value) for value in row(r)))
    show(shown)


def exit_with_problems(head: str, problems: Sequence[Problem], whole: str) -> NoReturn:
    """`head` on stderr, then each of `problems` on a line with where it is (`whole`
    where it is about the whole), and exit 1."""
    click.echo(head, err=True)
    for problem in problems:
        click.echo(f"  {problem.path or whole}: {problem.message}", err=True)
    sys.exit(1)


def check_http_allow(
    ctx: click.Context, param: click.Parameter, hosts: tuple[str, ...]
) -> tuple[str, ...]:
    """--http-allow entries, each checked as the http steps will read it."""
    from waypost.features.http import make_http_activity

    try:
        make_http_activity(allow=list(hosts))  # refuses a malformed entry
    except WaypostError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from exc
    return hosts


def sender_from_spec(spec: str) -> Any:
    """The notification sender --notify (or WAYPOST_NOTIFY) names."""
    from waypost.features.senders import senders_from_url

    try:
        return senders_from_url(spec)
    except WaypostError as exc:
        raise click.BadParameter(str(exc), param_hint="--notify") from exc


def check_cancel_grace(ctx: click.Context, param: click.Parameter, value: str) -> float | None:
    """--cancel-grace: seconds (0 or more), or 'none'."""
    if value.strip().lower() == "none":
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise click.BadParameter(
            f"{value!r} is not a number of seconds (0 or more) or 'none'", ctx=ctx, param=param
        )
    return seconds


log_format_option = click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS),
    default="text",
    show_default=True,
    envvar="WAYPOST_LOG_FORMAT",
    help="Log lines on stderr: text, or one JSON object per line with run_id, step, "
    "attempt and tenant on each line about a run (env WAYPOST_LOG_FORMAT).",
)


def answer_command(
    group: click.Group,
    name: str,
    doc: str,
    call: Callable[..., T],
    echo: Callable[..., None],
    options: Sequence[Callable[[Any], Any]],
) -> None:
    """Add `name` to `group`: a command that makes one call on the engine,
    `call(engine, **given)`, and prints its answer by `echo(answer, as_json, **given)`,
    `given` being the command's arguments and options but --output/--json and --db.
    `options` are all of them in the order --help shows them."""

    def run(as_json: bool, db: str, **given: Any) -> None:
        with open_engine(db, must_exist=True) as engine:
            answer = call(engine, **given)
        echo(answer, as_json, **given)

    run.__doc__ = doc
    group.command(name)(stacked(run, *options))


def list_command(
    group: click.Group,
    doc: str,
    fetch: Callable[..., Sequence[T]],
    columns: Sequence[str],
    row: Callable[[T], Sequence[Any]],
    *,
    to_json: Callable[[T], Any],
    none: str,
    options: Sequence[Callable[[Any], Any]],
) -> None:
    """Add `list` to `group`: the records `fetch(engine, **given)` reads (`given`: its
    --tenant, if it has one), printed by `echo_found` as a table of `columns`, a `row`
    each (`none` may name {tenant}). `options` are its --tenant, --json and --db options
    in the order --help shows them."""

    def echo(found: Sequence[T], as_json: bool, **given: Any) -> None:
        echo_found(found, as_json, to_json, columns, row, none.format(**given))

    answer_command(group, "list", doc, fetch, echo, options)


def record_commands(
    group: click.Group,
    argument: str,
    tenant: Callable[[Any], Any],
    *commands: tuple[str, Callable[..., Any], str | Callable[[str, Any], str], str],
) -> None:
    """Add to `group` commands on one record of a tenant, named by the argument
    `argument`: each (name, call, said, doc) calls `call(engine, record_id, tenant=...)`
    and prints what `said(record_id, answer)` makes of it, or `said` with the record's id
    in its {}. `tenant` is their --tenant."""
    for name, call, said, doc in commands:
        group.command(name)(
            stacked(_record_command(call, said, doc), click.argument(argument), tenant, db_option)
        )


def _record_command(
    call: Callable[..., Any], said: str | Callable[[str, Any], str], doc: str
) -> Callable[..., None]:
    """The callback of one of `record_commands`: its one argument comes as `record`."""

    def run(tenant: str, db: str, **record: str) -> None:
        (record_id,) = record.values()
        with open_engine(db, must_exist=True) as engine:
            answer = call(engine, record_id, tenant=tenant)
        click.echo(said.format(record_id) if isinstance(said, str) else said(record_id, answer))

    run.__doc__ = doc
    return run


def stacked(command: F, *options: Callable[[Any], Any]) -> F:
    """`command` with `options` (click decorators), which --help shows in this order: as
    if they were stacked above it."""
    for option in reversed(options):
        command = option(command)
    return command


def run_or_all_options(counted: str) -> Callable[[F], F]:
    """The options of a command on one run (--run) or on every run of the tenant (--all)
    in batches, with --dry-run (which counts what would be `counted`) and --json totals."""

    def options(command: F) -> F:
        return stacked(
            command,
            click.option("--run", "run_id", default=None, metavar="RUN_ID", help="Only this run."),
            click.option("--all", "all_runs", is_flag=True, help="Every run of the tenant."),
            click.option(
                "--dry-run", is_flag=True, help=f"Count what would be {counted}; write nothing."
            ),
            output_option("Print the totals as JSON."),
            db_option,
            tenant_option,
        )

    return options


def check_run_or_all(run_id: str | None, all_runs: bool) -> None:
    """One of --run and --all, as `run_or_all_options` asks."""
    if (run_id is None) == (not all_runs):
        raise click.UsageError("give --run RUN_ID or --all")


@dataclass(frozen=True)
class Serving:
    """What `worker_options` give a process that serves work."""

    lease: float
    grace: float
    cancel_grace: float | None
    max_activities: int
    notify: str
    approval_url: str | None
    http_allow: tuple[str, ...]

    def engine_options(self) -> dict[str, Any]:
        """The engine's options they set (where notifications go and what their links
        open aside: each process says)."""
        return {
            "lease": self.lease,
            "shutdown_grace": self.grace,
            "cancel_grace": self.cancel_grace,
            "max_activities": self.max_activities,
            "http_allow": list(self.http_allow) or None,
        }


def worker_options(command: F) -> F:
    """The options of a process that serves work, `waypost worker` and `waypost server`:
    the command is called with them as `serving`."""

    @functools.wraps(command)
    def run(
        *args: Any,
        lease: float,
        grace: float,
        cancel_grace: float | None,
        max_activities: int,
        notify: str,
        approval_url: str | None,
        http_allow: tuple[str, ...],
        **kwargs: Any,
    ) -> Any:
        serving = Serving(
            lease, grace, cancel_grace, max_activities, notify, approval_url, http_allow
        )
        return command(*args, serving=serving, **kwargs)

    return stacked(
        cast(F, run),
        click.option(
            "--lease", type=float, default=30.0, show_default=True, help="Task lease (s)."
        ),
        click.option(
            "--grace", type=float, default=30.0, show_default=True, help="Shutdown grace (s)."
        ),
        click.option(
            "--cancel-grace",
            "cancel_grace",
            default="30",
            show_default=True,
            callback=check_cancel_grace,
            help="Seconds a cancelled run's clean-up may take before the run ends "
            "cancelled anyway, or 'none' for no limit.",
        ),
        click.option("--max-activities", type=int, default=100, show_default=True),
        click.option(
            "--notify",
            default="log",
            show_default=True,
            envvar="WAYPOST_NOTIFY",
            help="Where approval notifications go: log, file:PATH, "
            "smtp://host:port?sender=..., webhook+https://host/path?secret=... (or set "
            "WAYPOST_NOTIFY, which keeps a password or secret out of the process list).",
        ),
        click.option(
            "--approval-url",
            default=None,
            help="Base URL of the approval pages that notification links open (the "
            "address of `waypost server` as approvers reach it).",
        ),
        click.option(
            "--http-allow",
            "http_allow",
            multiple=True,
            metavar="HOST",
            callback=check_http_allow,
            help="A host that `http` steps of tenant-defined workflows may call "
            "(repeatable): 'api.example.com', '*.example.com' for its subdomains, "
            "'host:port', '*' for any public address, or an address or network "
            "('10.1.2.3', '10.0.0.0/8') to allow loopback or private addresses. Only "
            "these; without the option this process runs no `http` step.",
        ),
    )


def app_option(help: str, *, required: bool = False) -> Callable[[F], F]:
    """--app (repeatable, as `apps`): the modules whose workflows and activities a command
    loads; `help` says what for."""
    return click.option("--app", "apps", multiple=True, required=required, help=help)


def load_apps(apps: tuple[str, ...]) -> list[Any]:
    """The workflows and activities of the `--app` modules."""
    try:
        return items_in_modules(apps)
    except WaypostError as exc:
        raise click.ClickException(str(exc).replace("app module", "--app")) from exc


def json_value(text: str | None, name: str) -> Any:
    """`text` read as JSON for the option or argument `name` (None stays None); a clear
    usage error, not a traceback, for text that is not JSON or is nested too deeply."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except RecursionError:
        raise click.BadParameter("not JSON: nested too deeply", param_hint=name) from None
    except ValueError as exc:  # not JSON, or a number Python will not read
        raise click.BadParameter(f"not JSON: {exc}", param_hint=name) from None
