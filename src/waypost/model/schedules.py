"""Schedules: when a schedule fires, and its operations (decision 0017).

A schedule starts runs of one workflow (registered code or a tenant's published
definition) with one input, either on a cron expression read in a time zone
(`cron="0 9 * * MON-FRI", tz="Europe/Madrid"`) or at a fixed interval
(`every=timedelta(hours=1)`, counted from the Unix epoch, so every engine agrees).

Fire times are instants (unix seconds). A cron expression is matched against wall
times of its zone (`croniter` on naive times), each then read as an instant:

- a wall time the zone skips (the spring-forward hour) is read as the first instant
  after the gap: `30 2 * * *` in Europe/Madrid fires at 03:00 local on the last
  Sunday of March, once (several skipped times collapse into that one fire);
- a wall time the zone repeats (the fall-back hour) is read as its first occurrence:
  it fires once, and nothing fires during the repeated hour's second pass.

A fire's run id is `sched:<schedule id>:<fire time, UTC, ISO 8601>`: the same fire
is the same run however many engines find it due, and starting a run id that exists
only finds it again.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter  # type: ignore[import-untyped]

from waypost.errors import InvalidRequest
from waypost.model.identity import Principal, Role, check_id, preview
from waypost.model.numbers import finite
from waypost.model.requests import READERS, Check, Request, Resource, checked

T = TypeVar("T")

MAX_SCHEDULE_ID = 120  # the run ids made from it stay within an id's 200 characters
MAX_CRON = 200
MIN_EVERY = 1.0  # seconds
MAX_EVERY = 366 * 86400.0
MAX_WINDOW = 366 * 86400.0
MAX_FIRES = 1000  # fire times computed at once: a backfill, a catch-up, a listing
ON_TIME = 60.0  # a fire found within this many seconds of its time is on time, not missed
_SEARCH_YEARS = 5  # a cron expression that matches nothing this far ahead never fires
CHANGERS = frozenset({Role.OPERATOR})


class Overlap(StrEnum):
    """What a fire does while the schedule's previous run has not finished."""

    SKIP = "skip"  # no run for this fire
    BUFFER_ONE = "buffer_one"  # remember (only) the latest such fire; start it when the run ends
    ALLOW_ALL = "allow_all"  # start it anyway
    CANCEL_PREVIOUS = "cancel_previous"  # ask the previous run to cancel, start this one


# A backfill's own overlap policies: `schedule` takes the schedule's.
BACKFILL_OVERLAPS = ("allow_all", "skip", "cancel_previous", "schedule")


class CatchUp(StrEnum):
    """What happens to fires missed while no engine ran (found later than `ON_TIME`)."""

    NONE = "none"  # missed fires are dropped; only on-time fires run
    LAST = "last"  # the latest missed fire runs (if no fire is on time), the others are dropped
    ALL = "all"  # every fire within the catch-up window runs, oldest first


def check_choice(value: Any, kind: type[StrEnum], what: str) -> str:
    try:
        return kind(value).value
    except ValueError:
        allowed = ", ".join(k.value for k in kind)
        raise InvalidRequest(
            f"{what} is one of {allowed}, not {preview(value)}", field=what
        ) from None


def seconds_of(value: Any, what: str, low: float, high: float) -> float:
    """A duration given as a `timedelta` or seconds, within [low, high]."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(f"{what} must be a duration, not {preview(value)}", field=what)
    # Compared before any conversion: an integer of 400 digits is no float.
    if finite(value) is None or not low <= value <= high:
        raise InvalidRequest(
            f"{what} must be from {low:g} to {high:g} seconds, not {preview(value)}", field=what
        )
    return float(value)


@dataclass(frozen=True)
class Timing:
    """When a schedule fires: a cron expression in a zone, or every `every` seconds."""

    cron: str | None = None
    tz: str = "UTC"
    every: float | None = None

    @staticmethod
    def of(cron: Any, tz: Any, every: Any) -> Timing:
        """Checked timing; `InvalidRequest` naming the field at fault."""
        if (cron is None) == (every is None):
            raise InvalidRequest(
                "a schedule has either cron or every, not both or neither", field="cron"
            )
        if every is not None:
            if tz not in (None, "UTC"):
                raise InvalidRequest("tz goes with cron; every counts real seconds", field="tz")
            return Timing(every=seconds_of(every, "every", MIN_EVERY, MAX_EVERY))
        zone = tz if tz is not None else "UTC"
        if not isinstance(zone, str) or not zone or len(zone) > 64 or "\x00" in zone:
            raise InvalidRequest(f"tz must be a time zone name, not {preview(zone)}", field="tz")
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise InvalidRequest(
                f"unknown time zone {preview(zone)} (an IANA name such as 'Europe/Madrid')",
                field="tz",
            ) from None
        if not isinstance(cron, str) or len(cron) > MAX_CRON or not cron.strip():
            raise InvalidRequest(
                f"cron must be a cron expression, not {preview(cron)}", field="cron"
            )
        if any(ord(c) < 32 for c in cron) or len(cron.split()) != 5:
            raise InvalidRequest(
                f"cron {preview(cron)} must have five fields: minute hour day month weekday",
                field="cron",
            )
        if not croniter.is_valid(cron):
            raise InvalidRequest(
                f"cron {preview(cron)} is not a valid cron expression", field="cron"
            )
        timing = Timing(cron=cron, tz=zone)
        if timing.next_after(datetime.now(UTC).timestamp()) is None:
            raise InvalidRequest(f"cron {preview(cron)} never fires", field="cron")
        return timing

    def describe(self) -> str:
        return f"every {self.every:g}s" if self.every is not None else f"{self.cron} ({self.tz})"

    def next_after(self, after: float) -> float | None:
        """The first fire time strictly after the instant `after` (None: there is none)."""
        return next(self.fires_after(after), None)

    def fires_after(self, after: float) -> Iterator[float]:
        """The fire times strictly after the instant `after`, in order (for a cron
        expression, up to `_SEARCH_YEARS` ahead)."""
        if self.every is not None:
            at = (math.floor(after / self.every) + 1) * self.every
            while True:
                yield at
                at += self.every
        assert self.cron is not None
        zone = ZoneInfo(self.tz)
        # Wall times are matched from the wall time of `after` on; an instant at or before
        # `after` (the repeated hour's wall times, read as their first occurrence, or the
        # skipped ones, read as the gap's end) is passed over, so instants only increase.
        it = croniter(self.cron, datetime.fromtimestamp(after, zone).replace(tzinfo=None))
        limit = after + _SEARCH_YEARS * 366 * 86400
        last = after
        while True:
            try:
                wall: datetime = it.get_next(datetime)
            except (ValueError, OverflowError, KeyError):  # croniter's "no such date"
                return
            instant = wall_to_instant(wall, zone)
            if instant > limit or wall.year > 9000:
                return
            if instant > last:
                last = instant
                yield instant

    def fires(self, start: float, end: float, limit: int = MAX_FIRES) -> list[float]:
        """Fire times in [start, end], at most `limit` (`InvalidRequest` past it)."""
        found: list[float] = []
        for at in self.fires_after(start - 1e-6):
            if at > end:
                break
            if len(found) == limit:
                raise InvalidRequest(
                    f"more than {limit} fire times in that range; ask for a shorter one",
                    field="end",
                )
            found.append(at)
        return found


CRON_RESOLUTION = 60.0  # seconds: cron fire times are whole minutes apart
GAP_SPAN = 2 * 86400.0  # seconds of a cron expression's fire times looked at for its gaps
GAP_FIRES = 1500


def fires_closer_than(timing: Timing, after: float, seconds: float) -> tuple[float, float] | None:
    """Two consecutive fire times of `timing` less than `seconds` apart, if there are
    (None: it never fires more often). A cron expression's minutes and hours are the same
    every day it fires, so two days of its fire times (at most `GAP_FIRES`) after `after`
    show every gap it has, the one from one day to the next included."""
    if timing.every is not None:
        return (after, after + timing.every) if timing.every < seconds else None
    if seconds <= CRON_RESOLUTION:
        return None
    previous: float | None = None
    end: float | None = None
    for count, at in enumerate(timing.fires_after(after)):
        if previous is not None and at - previous < seconds:
            return previous, at
        end = at + GAP_SPAN if end is None else end
        if at > end or count >= GAP_FIRES:
            return None
        previous = at
    return None


def wall_to_instant(wall: datetime, zone: ZoneInfo) -> float:
    """The instant of a wall time in `zone`: its first occurrence if repeated, the end of
    the gap if skipped."""
    first = wall.replace(tzinfo=zone, fold=0)
    instant = first.timestamp()
    if datetime.fromtimestamp(instant, zone).replace(tzinfo=None) == wall:
        return instant
    # In a gap: fold=0 reads it with the offset before the gap (too late), fold=1 with the
    # offset after it (too early); the gap ends between them, where the offset changes.
    low, high = wall.replace(tzinfo=zone, fold=1).timestamp(), instant
    low, high = min(low, high), max(low, high)
    before = datetime.fromtimestamp(low, zone).utcoffset()
    while high - low > 1:
        mid = math.floor((low + high) / 2)
        if datetime.fromtimestamp(mid, zone).utcoffset() == before:
            low = mid
        else:
            high = mid
    return float(high)


def iso(instant: float) -> str:
    """An instant as UTC ISO 8601 to the second: `2026-03-29T01:00:00Z`."""
    return datetime.fromtimestamp(instant, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fire_run_id(schedule_id: str, fire_at: float) -> str:
    """The run id of a schedule's fire: one fire, one run, whoever starts it."""
    return f"{fire_run_prefix(schedule_id)}{iso(fire_at)}"


_ISO_SECOND = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def fire_run_prefix(schedule_id: str) -> str:
    """What the run ids of a schedule's fires start with."""
    return f"sched:{schedule_id}:"


def is_fire_run(schedule_id: str, run_id: str) -> bool:
    """Whether `run_id` is the run of one of the schedule's fires (not of a schedule whose
    id merely starts with this one's and a colon)."""
    prefix = fire_run_prefix(schedule_id)
    return run_id.startswith(prefix) and bool(_ISO_SECOND.fullmatch(run_id[len(prefix) :]))


def check_schedule_id(value: Any) -> str:
    return check_id(value, "schedule_id", limit=MAX_SCHEDULE_ID)


def instant_of(value: Any, what: str) -> float:
    """An instant from a timezone-aware `datetime`, an ISO 8601 text or unix seconds."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidRequest(
                f"{what} is not an ISO 8601 time: {preview(value)}", field=what
            ) from None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidRequest(f"{what} needs a time zone (e.g. ...Z or +02:00)", field=what)
        return value.timestamp()
    instant = finite(value)
    if instant is None:
        raise InvalidRequest(f"{what} must be a time, not {preview(value)}", field=what)
    return instant


@dataclass(frozen=True)
class ScheduleInfo:
    """A schedule as its operations answer it (times are unix seconds)."""

    schedule_id: str
    workflow: str
    version: str | None
    cron: str | None
    tz: str
    every: float | None
    input: Any
    overlap: str
    catchup: str
    catchup_window: float
    paused: bool
    next_fire_at: float | None
    last_fire_at: float | None
    last_run_id: str | None
    buffered_fire_at: float | None
    created_at: float
    created_by: str
    # Who paused or resumed it last, and when (None: nobody since it was made). Its runs
    # are started on behalf of `created_by` (segregation of duties keeps them from
    # deciding those runs' approvals).
    changed_at: float | None = None
    changed_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Its fields, and each time also in UTC ISO 8601 (`next_fire`, `created`, ...)."""
        out = dict(self.__dict__)
        for key in (
            "next_fire_at",
            "last_fire_at",
            "buffered_fire_at",
            "created_at",
            "changed_at",
        ):
            value = out[key]
            out[key.removesuffix("_at")] = iso(value) if value is not None else None
        return out

    @staticmethod
    def from_dict(data: dict[str, Any]) -> ScheduleInfo:
        names = ScheduleInfo.__dataclass_fields__
        return ScheduleInfo(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class Backfilled:
    """What a backfill did: each fire time of the range and its run id (None: skipped)."""

    schedule_id: str
    fires: list[tuple[str, str | None]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schedule_id": self.schedule_id,
            "fires": [{"fire_at": at, "run_id": run} for at, run in self.fires],
        }


# == operations =========================================================================
SCHEDULES = Resource("schedule", "/v1/schedules", key="schedule_id")


@dataclass(frozen=True)
class ScheduleRequest(Request[T]):
    """A request about one schedule of the caller's tenant, named by its first field."""

    resource = SCHEDULES
    schedule_id: str = checked(Check.ID, what="schedule_id")


@dataclass(frozen=True)
class ScheduleCommand(ScheduleRequest[T]):
    """An operator's command on one schedule."""

    roles = CHANGERS


@dataclass(frozen=True)
class CreateSchedule(Request[ScheduleInfo], verb="create"):
    """Make a schedule of the caller's tenant (operators and admins)."""

    roles = CHANGERS
    resource = SCHEDULES
    call = "schedule"
    schedule_id: str
    workflow: Any
    cron: str | None = None
    tz: str | None = None
    every: Any = None
    input: Any = None
    version: str | int | None = checked(Check.VERSION, default=None)
    overlap: str = "skip"
    catchup: str = "last"
    catchup_window: Any = 86400.0

    def checked(self, principal: Principal) -> Request[ScheduleInfo]:
        check_schedule_id(self.schedule_id)
        check_id(self.workflow, "workflow")
        Timing.of(self.cron, self.tz, self.every)
        check_choice(self.overlap, Overlap, "overlap")
        check_choice(self.catchup, CatchUp, "catchup")
        seconds_of(self.catchup_window, "catchup_window", 0.0, MAX_WINDOW)
        return super().checked(principal)


@dataclass(frozen=True)
class ListSchedules(Request[list[ScheduleInfo]], verb="list"):
    """The schedules of the caller's tenant, by id."""

    roles = READERS
    resource = SCHEDULES
    call = "schedules"


@dataclass(frozen=True)
class GetSchedule(ScheduleRequest[ScheduleInfo], verb="get"):
    """One schedule of the caller's tenant (`ScheduleNotFound`)."""

    roles = READERS
    call = "describe_schedule"


@dataclass(frozen=True)
class PauseSchedule(ScheduleCommand[ScheduleInfo], verb="pause"):
    """Stop a schedule firing until it is resumed (its runs go on)."""


@dataclass(frozen=True)
class ResumeSchedule(ScheduleCommand[ScheduleInfo], verb="resume"):
    """Fire again, from now on: fires that fell while it was paused are not caught up."""


@dataclass(frozen=True)
class DeleteSchedule(ScheduleCommand[None], verb="delete"):
    """Delete a schedule; the runs it started go on."""


def _check_unwaiting(overlap: str, what: str) -> None:
    """`InvalidRequest` unless `overlap` is a policy for fires that do not wait."""
    if overlap not in BACKFILL_OVERLAPS:
        raise InvalidRequest(
            f"a {what}'s overlap is one of {', '.join(BACKFILL_OVERLAPS)}, not "
            f"{preview(overlap)} (a {what} does not wait, so it buffers nothing)",
            field="overlap",
        )


@dataclass(frozen=True)
class BackfillSchedule(ScheduleCommand[Backfilled], verb="backfill"):
    """Start the runs of a schedule's fire times in [start, end] (at most `MAX_FIRES`).

    A backfill has its own overlap policy, applied between its own runs only (decision
    0017): `allow_all` (default: every fire's run starts at once), `skip`,
    `cancel_previous`, or `schedule` (the schedule's policy; `buffer_one` skips, as a
    backfill does not wait). A run the schedule's regular fires started does not count
    for it, and its runs do not count for later regular fires. A fire that already has
    its run (it fired, or was backfilled before) finds that run again."""

    start: Any = None
    end: Any = None
    overlap: str = "allow_all"

    def checked(self, principal: Principal) -> Request[Backfilled]:
        start = instant_of(self.start, "start")
        end = instant_of(self.end, "end")
        if end < start:
            raise InvalidRequest("end comes before start", field="end")
        _check_unwaiting(self.overlap, "backfill")
        same = super().checked(principal)
        assert isinstance(same, BackfillSchedule)
        return BackfillSchedule(same.schedule_id, start, end, self.overlap)


@dataclass(frozen=True)
class TriggerSchedule(ScheduleCommand[Backfilled], verb="trigger"):
    """Start a schedule's run now, as a fire at this moment would: through the schedule's
    overlap policy against the run its regular fires last started (`overlap` may name
    another: `allow_all`, `skip`, `cancel_previous`; `buffer_one` skips, as a trigger does
    not wait). Started on behalf of whoever asked; the regular fires go on as they were,
    and the triggered run does not count for them (as a backfill's)."""

    overlap: str = "schedule"

    def checked(self, principal: Principal) -> Request[Backfilled]:
        _check_unwaiting(self.overlap, "trigger")
        same = super().checked(principal)
        assert isinstance(same, TriggerSchedule)
        return TriggerSchedule(same.schedule_id, self.overlap)


SCHEDULE_OPERATIONS: tuple[type[Request[Any]], ...] = (
    CreateSchedule,
    ListSchedules,
    GetSchedule,
    PauseSchedule,
    ResumeSchedule,
    DeleteSchedule,
    BackfillSchedule,
    TriggerSchedule,
)
"""The schedule operations the door serves."""
