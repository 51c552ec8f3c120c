"""Pages of runs as requests: a page with filters, a search by id or correlation key, the
counts by status (what the console's runs page and the API's run lists read), and a
page of one run's history.

Declared beside `operations.py` in the same form (and re-exported from it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from waypost.errors import InvalidRequest
from waypost.model.identity import Principal, check_text, preview
from waypost.model.numbers import whole_number
from waypost.model.records import HistoryPage, RunInfo, RunPage
from waypost.model.requests import (
    READERS,
    REMOTE_LATER,
    Check,
    Cli,
    Http,
    NotOffered,
    Request,
    RunRequest,
    check_page_limit,
    checked,
)
from waypost.model.status import RunStatus

MAX_SEARCH = 200  # characters of a search text
# Bytes of runs' stored payloads (input, result, error) a page, list or search of runs
# stops before (one run at least, whatever its size); the runs left out are never read.
RUN_PAGE_BYTES = 8 * 1024 * 1024


def check_status(status: str | RunStatus | None) -> None:
    if status is not None:
        try:
            RunStatus(status)
        except ValueError:
            known = ", ".join(s.value for s in RunStatus)
            raise InvalidRequest(
                f"unknown run status {preview(status)} (known: {known})", field="status"
            ) from None


@dataclass(frozen=True)
class PageRuns(Request[RunPage]):
    """One page of the tenant's runs, newest first (`RunPage`); its `next_cursor` asks for
    the next. Runs created after the first page do not shift later pages. `version`
    narrows a `workflow`'s runs to one version (it needs the workflow). A page holds at
    most `limit` runs and stops before `RUN_PAGE_BYTES` of their stored payloads (one run
    at least): `next_cursor` then continues after its last run."""

    roles = READERS
    name = "page runs"
    call = "page_runs"
    remote = REMOTE_LATER
    http = Http("GET", "/v1/runs")
    cli = NotOffered("`waypost runs list` lists runs")
    status: str | RunStatus | None = None
    workflow: str | None = checked(Check.OPTIONAL_ID, what="workflow", default=None)
    cursor: str | None = checked(Check.CURSOR, default=None)
    limit: int = checked(Check.LIMIT, default=100)
    version: str | None = checked(Check.OPTIONAL_ID, what="version", default=None)

    def checked(self, principal: Principal) -> Request[RunPage]:
        check_status(self.status)
        if self.version is not None and self.workflow is None:
            raise InvalidRequest("a version filter needs the workflow too", field="version")
        return super().checked(principal)


@dataclass(frozen=True)
class SearchRuns(Request[list[RunInfo]]):
    """The tenant's runs that `text` finds, newest first (`list[RunInfo]`): the run of that
    id, runs whose id starts with it, and runs waiting with it as a correlation value (a
    signal wait's `correlate=(key, value)`, as webhooks find them). At most `limit` of
    them, and no more than `RUN_PAGE_BYTES` of their stored payloads (one at least)."""

    roles = READERS
    name = "search runs"
    call = "search_runs"
    http = cli = NotOffered("the console's search box")
    text: str = ""
    limit: int = checked(Check.LIMIT, default=50)

    def checked(self, principal: Principal) -> Request[list[RunInfo]]:
        text = check_text(self.text, "search", limit=MAX_SEARCH, required=True)
        if "\n" in text or "\t" in text:
            raise InvalidRequest("a search is one line of text", field="search")
        return dataclasses.replace(super().checked(principal), text=text.strip())  # type: ignore[type-var]


@dataclass(frozen=True)
class CountRuns(Request[dict[str, int]]):
    """How many runs the tenant has in each status (statuses with none left out)."""

    roles = READERS
    name = "count runs"
    call = "count_runs"
    http = NotOffered("the console's counts of runs by status; over HTTP, page the runs")
    cli = NotOffered("the console's counts of runs by status")


MAX_SEQ = 2**31 - 1


@dataclass(frozen=True)
class RunDataAt(RunRequest[Any]):
    """A definition run's data and position after its event `seq` (a dict with `data`,
    the step `position` and `waiting`), rebuilt by replaying its history up to there;
    None for a run of workflow code (its data lives in its code)."""

    roles = READERS
    name = "run data at"
    call = "data_at"
    http = NotOffered("the console's replay view")
    cli = NotOffered("the console's replay view; `waypost replay` replays a history")
    seq: int = 1

    def checked(self, principal: Principal) -> Request[Any]:
        whole_number(self.seq, "seq", 1, MAX_SEQ)
        return super().checked(principal)


DEFAULT_HISTORY_PAGE = 500  # events of a history page asked for without a limit
MAX_HISTORY_PAGE = 1_000  # events of a history page, at most
HISTORY_PAGE_BYTES = 4 * 1024 * 1024  # bytes of events' data a page stops before (one at least)


@dataclass(frozen=True)
class PageHistory(RunRequest[HistoryPage]):
    """Part of a run's history (`HistoryPage`): the events after `after_seq`, oldest first,
    at most `limit` (1 to `MAX_HISTORY_PAGE`) and at most `HISTORY_PAGE_BYTES` of their
    data (a page holds one event at least, whatever its size). Its `next_after` asks for
    the next page. A history is read a page at a time, never whole."""

    roles = READERS
    name = "page history"
    call = "history_page"
    http = Http("GET", "/v1/runs/{run_id:id}/history")
    cli = Cli("runs history")
    after_seq: int = 0
    limit: int = DEFAULT_HISTORY_PAGE

    def checked(self, principal: Principal) -> Request[HistoryPage]:
        whole_number(self.after_seq, "after_seq", 0, MAX_SEQ)
        check_page_limit(self.limit, MAX_HISTORY_PAGE, unit=" events")
        return super().checked(principal)


RUN_PAGE_OPERATIONS: tuple[type[Request[Any]], ...] = (
    PageRuns,
    SearchRuns,
    CountRuns,
    RunDataAt,
    PageHistory,
)
