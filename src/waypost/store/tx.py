"""The transaction handle every store transaction runs in, once for all dialects.

A transaction function (see `transactions/`) receives a `Tx`: one open database
transaction of some dialect, whose statements it addresses by name (the
`-- name:` sections of `sql/queries.sql` and `sql/<dialect>/queries.sql`, see
`sqlfile.py`). Running a named statement is the same for every dialect and is
written here; a dialect's subclass supplies what runs the statements (with rows
read by column name), how a savepoint is taken, how a read-only snapshot is begun
and ended, and how other processes are told that work is waiting.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

from waypost.model.chain import PLAIN, Chain
from waypost.model.encryption import Keys

# Topics of notifications: a task became ready; a timer was set; a message waits.
TASKS = "tasks"
TIMERS = "timers"
OUTBOX = "outbox"


class Abort(Exception):
    """A condition of the request failed: roll it back and answer `result`."""

    def __init__(self, result: Any) -> None:
        super().__init__(getattr(result, "conflict", result))
        self.result = result


class Row(Protocol):
    """A row read by column name: a `sqlite3.Row`, or a dict from psycopg's `dict_row`."""

    def __getitem__(self, column: str, /) -> Any: ...


class Cursor(Protocol):
    """What `Tx` reads of a statement's outcome: its rows, or how many rows it changed."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Statements(Protocol):
    """What runs a transaction's statements: a `sqlite3` connection or a psycopg cursor."""

    def execute(self, query: str, params: dict[str, Any], /) -> Cursor: ...

    def executemany(self, query: str, rows: list[dict[str, Any]], /) -> object: ...


class Tx(ABC):
    """One open transaction of a dialect, addressed by query name.

    `statements` runs the named statements and returns rows read by column name.
    """

    __slots__ = ("chain", "keys", "queries", "statements")

    def __init__(
        self,
        statements: Statements,
        queries: Mapping[str, str],
        chain: Chain = PLAIN,
        *,
        keys: Keys | None = None,
    ) -> None:
        self.statements = statements
        self.queries = queries
        self.chain = chain  # how the events a transaction appends are hashed
        self.keys = keys  # what payloads are encrypted with (None: stored as plaintext)

    def one(self, name: str, params: dict[str, Any]) -> Row | None:
        """The first row the statement `name` returns, or None."""
        row: Row | None = self.statements.execute(self.queries[name], params).fetchone()
        return row

    def all(self, name: str, params: dict[str, Any]) -> list[Row]:
        """Every row the statement `name` returns."""
        return self.statements.execute(self.queries[name], params).fetchall()

    def run(self, name: str, params: dict[str, Any]) -> int:
        """Run the statement `name`; the number of rows it changed."""
        return self.statements.execute(self.queries[name], params).rowcount

    def many(self, name: str, rows: list[dict[str, Any]]) -> None:
        """Run the statement `name` once for each set of parameters in `rows`."""
        self.statements.executemany(self.queries[name], rows)

    # Whether `step_statement` can make a run's step in one statement (transactions/step.py).
    one_statement_steps = False
    # Whether a batch of due timers fires in two statements (transactions/timers.py).
    batch_timer_fires = False

    def step_statement(self, name: str, params: dict[str, Any]) -> Row | None:
        """Run the one-statement step `name` (only where `one_statement_steps`); its row."""
        return self.one(name, params)

    @abstractmethod
    def savepoint(self) -> AbstractContextManager[None]:
        """A nested transaction: an exception inside it undoes only its own writes."""

    @abstractmethod
    def notify(self, topic: str) -> None:
        """Tell other processes, once this transaction commits, that `topic` has work."""

    @abstractmethod
    def begin_read(self) -> None:
        """Make the transaction a read-only snapshot: its reads all see one moment."""

    @abstractmethod
    def end_read(self) -> None:
        """End the snapshot begun by `begin_read`."""


def loads_nullable(text: str | None) -> Any:
    """The JSON value of a nullable text column (None for NULL)."""
    return None if text is None else json.loads(text)
