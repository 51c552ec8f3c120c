"""Running activity attempts: arguments in, an outcome out, leases kept alive.

An attempt runs outside any transaction. Its outcome is reported under the
fence it was given; the engine accepts it only if that fence is still the
task's. Sync activities run in a thread pool, async ones on the engine's
loop; both are bounded by the attempt's start-to-close deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from waypost.errors import ActivityCancelled, NonRetryableError, PayloadError, StoreError
from waypost.model.codec import Codec, error_to_json
from waypost.model.events import canonical_json
from waypost.model.logs import log_context, logger
from waypost.model.retry import Retry
from waypost.runtime.context import ActivityContext
from waypost.runtime.registry import ActivityDefn, Registry
from waypost.store.base import LeaseRenewal, Store, TaskRef

from . import tracing
from .attempts import Attempt, Outcome, Report, failure, log_attempt_claimed
from .signals import Shared

log = logger("waypost.worker")


class Worker:
    """The activity attempts this engine is running, and their leases."""

    def __init__(
        self, shared: Shared, store: Store, registry: Registry, codec: Codec, report: Report
    ) -> None:
        self.settings = settings = shared.settings
        self.store = store
        self.background, self.wakeups = shared.background, shared.wakeups
        self.registry, self.codec, self.report = registry, codec, report
        max_activities, threads = settings.max_activities, settings.activity_threads
        self.max_activities = max_activities
        self.reserved = 0
        self.started = 0  # attempts spawned and not yet reported
        self.inflight: dict[TaskRef, Attempt] = {}
        self._threads = ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix="waypost-activity"
        )

    # -- capacity ---------------------------------------------------------
    def free(self) -> int:
        return self.max_activities - self.reserved

    def reserve(self) -> bool:
        if self.reserved >= self.max_activities:
            return False
        self.reserved += 1
        return True

    def unreserve(self, n: int = 1) -> None:
        self.reserved = max(0, self.reserved - n)
        if n > 0:
            self.wakeups.slot_freed()  # a queued activity may take the freed slot

    def shutdown(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)

    # -- running ----------------------------------------------------------
    def start(self, a: Attempt) -> None:
        """Run an attempt whose slot is reserved, in its own task."""
        self.started += 1
        log_attempt_claimed(a)
        # In flight from now: this engine's scheduler leaves its timeout to it.
        self.inflight[a.ref] = a
        a.task = self.background.spawn(self.run(a))

    async def run(self, a: Attempt) -> None:
        """Run one attempt (its slot is reserved already) and report the outcome."""
        try:
            with log_context(run_id=a.run_id, step=a.step, attempt=a.attempt, tenant=a.tenant):
                await self._run(a)
        finally:
            self.started -= 1

    async def _run(self, a: Attempt) -> None:
        settings = self.settings
        if a.retime and not await self._timed_again(a):
            self.inflight.pop(a.ref, None)
            self.unreserve()
            return
        defn = self.registry.activities().get(a.activity)
        a.ctx = ActivityContext(
            tenant=a.tenant,
            run_id=a.run_id,
            step_id=a.step,
            activity=a.activity,
            attempt=a.attempt,
            idempotency_key=str(a.spec.get("key", "")),
            deadline=a.deadline,
            clock=settings.clock,
            heartbeat_details=a.previous_details,
        )
        self.inflight[a.ref] = a
        try:
            stall = settings.faults.pause("activity:stall")
            if stall > 0:
                # Stopped, as by SIGSTOP or a long pause: no renewals, so the lease lapses.
                del self.inflight[a.ref]
                await asyncio.sleep(stall)
                self.inflight[a.ref] = a
            if defn is None:
                outcome = failure(
                    a,
                    {
                        "type": "UnknownActivity",
                        "message": f"activity {a.activity!r} is not registered",
                    },
                    settings.clock(),
                    retryable=True,
                )
            else:
                with tracing.attempt_span(
                    a.spec,
                    run_id=a.run_id,
                    step=a.step,
                    attempt=a.attempt,
                    tenant=a.tenant,
                    activity=a.activity,
                ):
                    outcome = await self._call(defn, a, a.ctx)
                    if outcome.error is not None:
                        tracing.failed(str(outcome.error.get("type", "error")))
        except BaseException:
            self.inflight.pop(a.ref, None)
            raise
        finally:
            self.unreserve()
        try:
            if outcome.ok and settings.faults.chance("activity:lose-response"):
                return  # never reported: the lease lapses and the step runs again
            await self.report(a, outcome)
        finally:
            # Leased (and renewed) until the outcome is recorded or given up on.
            self.inflight.pop(a.ref, None)

    async def _timed_again(self, a: Attempt) -> bool:
        """Time the attempt again from now (it was leased by a write that landed late, so
        its deadline counted from before the wait); False when it is no longer ours."""
        settings = self.settings
        try:
            deadline = await self.store.retime_activity(
                settings.owner, a.ref, settings.lease, settings.clock(), time.monotonic()
            )
        except StoreError as exc:
            log.warning(
                "could not time attempt %d again (%s); it keeps its deadline", a.attempt, exc
            )
            return True
        if deadline is None:
            log.info("attempt %d is no longer this engine's: not run", a.attempt)
            return False
        a.time_to(deadline)
        return True

    async def _call(self, defn: ActivityDefn, a: Attempt, ctx: ActivityContext) -> Outcome:
        settings = self.settings
        codec = self.codec
        try:
            args = []
            raw_args = a.spec.get("args")
            if raw_args:
                hints = defn.param_hints
                raw_args = codec.decode(raw_args)
                args = [
                    codec.decode(v, hints[i] if i < len(hints) else Any)
                    for i, v in enumerate(raw_args)
                ]
            kwargs = {}
            raw_kwargs = a.spec.get("kwargs")
            if raw_kwargs:
                raw_kwargs = codec.decode(raw_kwargs)
                kwargs = {
                    k: codec.decode(v, defn.kwarg_hints.get(k, Any)) for k, v in raw_kwargs.items()
                }
        except Exception as exc:
            return failure(a, error_to_json(exc), settings.clock(), retryable=False)

        # The start-to-close deadline cancels the awaiting task. A sync
        # activity's thread cannot be stopped: it runs on, and whatever it
        # returns is reported late (and recorded as such, changing nothing).
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("activities run inside an asyncio task")
        expired = False

        timer: list[asyncio.TimerHandle] = []

        def on_deadline() -> None:
            nonlocal expired
            remaining = a.deadline - settings.clock()
            if remaining > 0:  # loop timers may fire a little early; never time out early
                timer[0] = loop.call_later(remaining, on_deadline)
                return
            expired = True
            task.cancel()

        timer.append(loop.call_later(max(0.0, a.deadline - settings.clock()), on_deadline))
        settings.faults.hit("activity:before")
        thread: asyncio.Future[Any] | None = None
        try:
            if defn.is_async:
                value = await defn.fn(ctx, *args, **kwargs)
            else:
                call = functools.partial(defn.fn, ctx, *args, **kwargs)
                thread = loop.run_in_executor(self._threads, contextvars.copy_context().run, call)
                value = await asyncio.shield(thread)
        except asyncio.CancelledError:
            if thread is not None and not thread.done():
                thread.add_done_callback(functools.partial(self._finished_late, a, ctx))
            if not expired:
                if task.cancelling():
                    raise  # the engine is shutting down: the lease will lapse
                return self._failed(
                    a, ActivityCancelled("the activity was cancelled"), settings.clock(), ctx
                )
            task.uncancel()
            seconds = a.spec.get("timeout")
            error = {
                "type": "ActivityTimeout",
                "message": f"attempt {a.attempt} exceeded its start-to-close timeout of {seconds}s",
            }
            return failure(a, error, settings.clock(), retryable=True, details=self._details(ctx))
        except Exception as exc:
            return self._failed(a, exc, settings.clock(), ctx)
        finally:
            timer[0].cancel()
            settings.faults.hit("activity:after")
        try:
            return Outcome(True, result=codec.encode(value))
        except PayloadError as exc:
            err = PayloadError(f"the result of activity {a.activity!r}: {exc}")
            return failure(a, error_to_json(err), settings.clock(), retryable=False)

    def _finished_late(self, a: Attempt, ctx: ActivityContext, thread: asyncio.Future[Any]) -> None:
        """A sync attempt that was given up on has returned: report it (as late)."""
        if thread.cancelled():
            return
        exc = thread.exception()
        if exc is not None:
            outcome = self._failed(a, exc, self.settings.clock(), ctx)
        else:
            try:
                outcome = Outcome(True, result=self.codec.encode(thread.result()))
            except PayloadError as err:
                outcome = failure(a, error_to_json(err), self.settings.clock(), retryable=False)
        with contextlib.suppress(RuntimeError):  # the engine has closed meanwhile
            self.background.spawn(self.report(a, outcome))

    def _failed(self, a: Attempt, exc: BaseException, now: float, ctx: ActivityContext) -> Outcome:
        names = tuple(c.__name__ for c in type(exc).__mro__)
        policy = Retry.from_json(a.spec["retry"]) if "retry" in a.spec else Retry()
        retryable = not (
            isinstance(exc, NonRetryableError | ActivityCancelled)
            or policy.is_non_retryable(type(exc).__name__, names)
        )
        tb = "".join(traceback.format_exception(exc))
        return failure(
            a,
            error_to_json(exc, traceback_text=tb, causes=True),
            now,
            retryable=retryable,
            details=self._details(ctx),
        )

    def _details(self, ctx: ActivityContext) -> str | None:
        at, details = ctx.final_heartbeat()
        if at is None:
            return None
        try:
            return canonical_json(self.codec.encode(details))
        except PayloadError as exc:
            log.warning("heartbeat details of %s are not JSON: %s", ctx.activity, exc)
            return None

    # -- leases -------------------------------------------------------------
    def renewals(self) -> list[LeaseRenewal]:
        out = []
        for ref, a in list(self.inflight.items()):
            at, details = (None, None)
            if a.ctx is not None:
                at, raw = a.ctx.take_heartbeat()
                if at is not None:
                    try:
                        details = canonical_json(self.codec.encode(raw))
                    except PayloadError as exc:
                        log.warning("heartbeat details of %s are not JSON: %s", a.activity, exc)
            out.append(LeaseRenewal(ref, heartbeat_at=at, heartbeat_details=details))
        return out

    def apply_lease_state(self, ref: TaskRef, held: bool, cancel_requested: bool) -> None:
        a = self.inflight.get(ref)
        if a is None or a.ctx is None:
            return
        a.ctx.mark(lost=not held, cancelled=cancel_requested)
