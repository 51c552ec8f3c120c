"""Log lines that callers cannot forge.

Much of what waypost logs was supplied by someone outside: ids, names of
people (also from a host application's directory, which waypost never
checked), reasons, exception messages quoting input. A newline or a line
separator in any of them would let its author start a log line of their own.
Every waypost logger therefore escapes the arguments of each record
(`identity.printable`) before any handler formats it; the format strings are
waypost's own. Numbers are left alone, so `%d` and `%.1f` still work.

While the engine works on a run (a workflow task, an activity attempt) it names the
run in `log_context`: a context variable, so every line logged meanwhile, by waypost
or by the workflow's and activities' own code, can say which run, step and attempt it
is about (`JsonLogFormatter` writes them on every line).

A warning about the set-up (a database server's setting, a file's mode), which every
store opened on it would repeat, is logged once per process (`warn_once`).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from waypost.model.identity import printable


def _escaped(arg: Any) -> Any:
    if arg is None or isinstance(arg, bool | int | float):
        return arg
    return printable(arg)


class EscapeArguments(logging.Filter):
    """Rewrites a record's arguments as printable text (see the module)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, Mapping):
            record.args = {key: _escaped(value) for key, value in args.items()}
        elif isinstance(args, tuple):
            record.args = tuple(_escaped(a) for a in args)
        return True


_ESCAPE = EscapeArguments()


def logger(name: str) -> logging.Logger:
    """The logger `name`, escaping the arguments of every record logged through it."""
    log = logging.getLogger(name)
    if _ESCAPE not in log.filters:
        log.addFilter(_ESCAPE)
    return log


# == which run a line is about ===========================================================
RUN_FIELDS = ("run_id", "step", "attempt", "tenant")
_said: set[tuple[str, str]] = set()
_said_lock = threading.Lock()


def warn_once(log: logging.Logger, message: str, *args: Any) -> bool:
    """Log the warning `message % args` unless this process has logged it already (to
    `log`); whether it did. For facts about the set-up, which do not change while the
    process runs: a command or a server process that opens several stores on one
    database says each once."""
    key = (log.name, message % args if args else message)
    with _said_lock:
        if key in _said:
            return False
        _said.add(key)
    log.warning(message, *args)
    return True


_run_fields: ContextVar[Mapping[str, Any] | None] = ContextVar("waypost_log_run", default=None)


class log_context:
    """Lines logged inside this block (in this task, and threads it hands work with its
    context) are about `fields` (run_id, step, attempt, tenant)."""

    __slots__ = ("fields", "token")

    def __init__(self, **fields: Any) -> None:
        self.fields = fields

    def __enter__(self) -> None:
        self.token = _run_fields.set(self.fields)

    def __exit__(self, *exc: object) -> None:
        _run_fields.reset(self.token)


def run_fields() -> Mapping[str, Any] | None:
    """What `log_context` says the current work is about (None: no run)."""
    return _run_fields.get()


class JsonLogFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message; run_id, step, attempt and
    tenant on every line logged while the engine works on a run (`log_context`; null
    where there is none, such as the step of a workflow task); the fields a record
    carries itself (`extra=`) as they are."""

    FIELDS = ("tenant", "run_id", "task", "step", "attempt", "fence", "event")

    def __init__(self, more: Callable[[], Mapping[str, Any] | None] | None = None) -> None:
        """`more()` gives fields for every line, such as the active span's trace_id and
        span_id."""
        super().__init__()
        self.more = more

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        about = run_fields()
        if about is not None:
            for name in RUN_FIELDS:
                out[name] = about.get(name)
        for name in self.FIELDS:
            if name in record.__dict__:
                out[name] = record.__dict__[name]
        more = self.more() if self.more is not None else None
        if more:
            out.update(more)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=True)


LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(
    log_format: str = "text", more: Callable[[], Mapping[str, Any] | None] | None = None
) -> None:
    """Log at INFO to stderr: one text line, or one JSON object (`JsonLogFormatter`, with
    the fields `more()` gives), per record (what `waypost worker` and `waypost server`
    do with `--log-format`)."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format {log_format!r}: use one of {', '.join(LOG_FORMATS)}")
    handler = logging.StreamHandler(sys.stderr)
    text = logging.Formatter(TEXT_FORMAT)
    formatter = JsonLogFormatter(more) if log_format == "json" else text
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
