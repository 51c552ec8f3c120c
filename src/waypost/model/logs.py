"""Log lines that callers cannot forge.

Much of what waypost logs was supplied by someone outside: ids, names of
people (also from a host application's directory, which waypost never
checked), reasons, exception messages quoting input. A newline or a line
separator in any of them would let its author start a log line of their own.
Every waypost logger therefore escapes the arguments of each record
(`identity.printable`) before any handler formats it; the format strings are
waypost's own. Numbers are left alone, so `%d` and `%.1f` still work.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
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
