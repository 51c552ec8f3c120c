"""Each step type of a definition on the test clock: waits, timeouts, parallel, loops, http."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually, run_reaches
from tests.helpers.http_server import Answer, Server
from waypost.features.senders import verify_webhook
from waypost.testing import TestEnv, event_types, events_of

pytestmark = pytest.mark.timeout(120)


@wp.activity(name="count.up")
def count_up(ctx: wp.ActivityContext, count: int | None) -> int:
    return (count or 0) + 1


@wp.activity(name="echo")
def echo(ctx: wp.ActivityContext, value: Any) -> Any:
    return value


@wp.activity(name="undo")
def undo(ctx: wp.ActivityContext, what: Any) -> str:
    return f"undone {what}"


@wp.activity(name="undo.broken")
def undo_broken(ctx: wp.ActivityContext, what: Any) -> None:
    raise wp.NonRetryableError(f"cannot undo {what}")


class Refused(Exception):
    """A refusal the activity's own retry policy says not to retry."""


@wp.activity(
    name="picky",
    retry=wp.Retry(max_attempts=2, non_retryable=(Refused,)),
    timeout=timedelta(minutes=20),
)
def picky(ctx: wp.ActivityContext, fail: bool) -> str:
    if fail:
        raise Refused("no")
    return "ok"


REGISTERED = (count_up, echo, undo, undo_broken, picky)


def scenario(test: Callable[[TestEnv], Any], **options: Any) -> None:
    async def body() -> None:
        async with TestEnv(*REGISTERED, **options) as env:
            await test(env)
            assert await env.check() == []

    asyncio.run(body())


def waiting(kind: str) -> Callable[[wp.RunInfo], bool]:
    return lambda info: (
        info.status == "waiting" and any(w["kind"] == kind for w in info.waiting_for)
    )


async def failure(run: wp.AsyncRunHandle) -> dict[str, Any]:
    with pytest.raises(wp.WorkflowFailed) as failed:
        await run.result(timeout=10)
    error: dict[str, Any] = failed.value.error
    return error


def test_a_wait_of_a_duration_and_a_wait_until_a_time_from_the_data() -> None:
    definition = """
name: waits
start: pause
steps:
  pause: {type: wait, duration: P2D, next: later}
  later: {type: wait, until: due, next: done}
  done: {type: succeed, output: "'woke'"}
"""

    async def test(env: TestEnv) -> None:
        await env.engine.publish(definition)
        due = "2030-01-01T00:00:00+00:00"
        run = await env.engine.start("waits", {"due": due})
        await run_reaches(run, waiting("timer"))
        await env.advance(days=1)
        # Still a day to go: the timer is pending and due after now, so it cannot have fired.
        next_at = await env.engine.store.next_timer_at()
        assert next_at is not None and next_at > env.clock()
        assert events_of(await run.history(), "TimerFired") == []
        await env.advance(days=1, seconds=1)
        info = await run_reaches(run, lambda i: any(w.get("until") == due for w in i.waiting_for))
        assert info.status == "waiting"
        assert await env.fast_forward(run) == "woke"
        fired = events_of(await run.history(), "TimerFired")
        assert len(fired) == 2

    # Years ahead: past the default maximum run time of a tenant (90 days).
    scenario(test, limits=wp.Limits(max_total_timeout=20 * 365 * 86400.0))


def test_a_signal_wait_times_out_to_its_on_timeout_step_or_fails_the_run() -> None:
    definition = """
name: chase
start: answer
steps:
  answer:
    type: wait
    signal: reply
    output: $.reply
    timeout: PT1H
    on_timeout: reminded
    next: thanks
  thanks: {type: succeed, output: reply.text}
  reminded: {type: succeed, output: "'no reply'"}
"""
    strict = (
        definition.replace("name: chase", "name: strict")
        .replace("    on_timeout: reminded\n", "")
        .replace("  reminded: {type: succeed, output: \"'no reply'\"}\n", "")
    )

    async def test(env: TestEnv) -> None:
        await env.engine.publish(definition)
        await env.engine.publish(strict)
        answered = await env.engine.start("chase", {})
        silent = await env.engine.start("chase", {})
        hard = await env.engine.start("strict", {})
        for run in (answered, silent, hard):
            await run_reaches(run, waiting("signal"))
        await answered.signal("reply", {"text": "yes"})
        assert await answered.result(timeout=10) == "yes"
        await env.advance(hours=1, seconds=1)
        assert await silent.result(timeout=10) == "no reply"
        error = await failure(hard)
        assert error["type"] == "timeout" and "'answer'" in error["message"]

    scenario(test)


def test_parallel_branches_join_and_the_next_step_sees_what_each_stored() -> None:
    definition = """
name: fan
start: both
steps:
  both:
    type: parallel
    branches:
      - start: left
        steps:
          left: {type: activity, activity: echo, input: {value: a}, output: $.left}
      - start: wait_right
        steps:
          wait_right: {type: wait, signal: right, output: $.signal, next: right}
          right: {type: activity, activity: echo, input: {value: signal.b}, output: $.right}
    next: done
  done: {type: succeed, output: "[left, right]"}
"""

    async def test(env: TestEnv) -> None:
        await env.engine.publish(definition)
        run = await env.engine.start("fan", {"a": 1})
        await run_reaches(run, waiting("signal"))
        history = await run.history()
        assert len(events_of(history, "ActivityCompleted")) == 1  # the left branch is done
        await run.signal("right", {"b": 2})
        assert await run.result(timeout=10) == [1, 2]

    scenario(test)


def test_a_failing_branch_cancels_the_other_and_compensates_what_completed() -> None:
    definition = """
name: fan_fail
start: both
steps:
  both:
    type: parallel
    branches:
      - start: booked
        steps:
          booked:
            type: activity
            activity: echo
            input: {value: "'room'"}
            output: $.room
            compensate: {activity: undo, input: {what: room}}
            next: broken
          broken: {type: fail, error: no_flight, message: No flight left.}
      - start: waits
        steps:
          waits: {type: wait, signal: never}
    next: done
  done: {type: succeed}
"""

    async def test(env: TestEnv) -> None:
        await env.engine.publish(definition)
        run = await env.engine.start("fan_fail", {})
        error = await failure(run)
        assert error["type"] == "no_flight" and error["message"] == "No flight left."
        assert error["details"]["compensated"] == ["booked"]
        history = await run.history()
        undone = [
            e for e in events_of(history, "ActivityCompleted") if e.data["result"] == "undone room"
        ]
        assert len(undone) == 1
        info = await run.get()
        assert info.status == "failed" and info.waiting_for == []

    scenario(test)


def test_a_loop_is_bounded_by_its_choice() -> None:
    definition = """
name: loop
start: again
steps:
  again: {type: activity, activity: count.up, input: {count: count}, output: $.count, next: check}
  check:
    type: choice
    max_iterations: 3
    choices:
      - when: count < `5`
        next: again
    default: done
  done: {type: succeed, output: count}
"""
    enough = definition.replace("count < `5`", "count < `3`").replace("name: loop", "name: short")

    async def test(env: TestEnv) -> None:
        await env.engine.publish(definition)
        await env.engine.publish(enough)
        short = await env.engine.start("short", {})
        assert await short.result(timeout=10) == 3
        run = await env.engine.start("loop", {})
        error = await failure(run)
        assert error["type"] == "too_many_iterations" and "'check'" in error["message"]
        # Three passes are allowed; the activity before the fourth ran, the fourth pass failed.
        history = await run.history()
        assert len(events_of(history, "ActivityCompleted")) == 4
        assert events_of(history, "ActivityScheduled")[0].data["site"] == "loop v1 step again"

    scenario(test)


def test_the_total_timeout_fails_the_run_and_compensates() -> None:
    definition = """
name: bounded
timeout: PT2H
start: book
steps:
  book:
    type: activity
    activity: echo
    input: {value: "'seat'"}
    output: $.seat
    compensate: {activity: undo, input: {what: seat}}
    next: wait
  wait: {type: wait, signal: confirm}
"""

    async def test(env: TestEnv) -> None:
        await env.engine.publish(definition)
        run = await env.engine.start("bounded", {})
        await run_reaches(run, waiting("signal"))
        await env.advance(hours=2, seconds=1)
        error = await failure(run)
        assert error["type"] == "timeout" and error["details"]["compensated"] == ["book"]
        assert error["details"]["step"] == "wait" and "at step 'wait'" in error["message"]
        types = event_types(await run.history())
        assert types.count("TimerFired") == 1 and types[-1] == "RunFailed"

    scenario(test)


def test_an_approval_that_expires_goes_to_its_on_expiry_step() -> None:
    definition = """
name: sign
start: ask
steps:
  ask:
    type: approval
    approvers: {users: [ann]}
    expires_in: P1D
    output: $.decision
    on_expiry: escalate
    next: done
  escalate: {type: succeed, output: "join('-', ['expired', decision.outcome])"}
  done: {type: succeed, output: "'approved'"}
"""

    async def test(env: TestEnv) -> None:
        await env.engine.publish(definition)
        run = await env.engine.start("sign", {})
        await run_reaches(run, waiting("approval"))
        await env.advance(days=1, seconds=1)
        assert await run.result(timeout=10) == "expired-expired"

    scenario(test)


def test_cancelling_a_definition_run_does_not_compensate() -> None:
    definition = """
name: cancel_me
start: book
steps:
  book:
    type: activity
    activity: echo
    input: {value: "'x'"}
    compensate: {activity: undo, input: {what: "'x'"}}
    next: wait
  wait: {type: wait, signal: never}
"""

    async def test(env: TestEnv) -> None:
        await env.engine.publish(definition)
        run = await env.engine.start("cancel_me", {})
        await run_reaches(run, waiting("signal"))
        await run.cancel("customer withdrew")
        with pytest.raises(wp.WorkflowCancelled):
            await run.result(timeout=10)
        scheduled = events_of(await run.history(), "ActivityScheduled")
        assert [e.data["activity"] for e in scheduled] == ["echo"]

    scenario(test)


def test_an_http_step_sends_a_signed_body_with_a_stable_idempotency_key() -> None:
    server = Server()
    server.answer(
        "/orders", Answer(503), Answer(201, b'{"id": "po-9"}', {"Content-Type": "application/json"})
    )
    definition = f"""
name: call_supplier
start: order
steps:
  order:
    type: activity
    http:
      url: {server.base}/orders
      body: {{reference: order_id, currency: {{literal: EUR}}}}
      signature: {{secret: supplier-key}}
    retry: {{max_attempts: 3, initial_interval: 0}}
    output: $.supplier
    next: done
  done: {{type: succeed, output: supplier.id}}
"""

    async def test(env: TestEnv) -> None:
        await env.engine.publish(definition)
        run = await env.engine.start("call_supplier", {"order_id": "A-1"})
        assert await run.result(timeout=20) == "po-9"
        sent = server.requests("/orders")
        assert len(sent) == 2
        assert json.loads(sent[1].body) == {"currency": "EUR", "reference": "A-1"}
        keys = {r.headers["idempotency-key"] for r in sent}
        assert len(keys) == 1 and keys.pop().startswith("wp-")
        verify_webhook("k3y", sent[1].body, sent[1].headers, url=f"{server.base}/orders")

    try:
        scenario(
            test,
            http_allow=[f"127.0.0.1:{server.port}"],
            http_secrets=lambda tenant, name: "k3y" if name == "supplier-key" else None,
        )
    finally:
        server.close()


def test_a_run_continues_on_a_new_engine_and_a_changed_version_suspends_it(
    sqlite_url: str,
) -> None:
    definition = """
name: restart
start: wait
steps:
  wait: {type: wait, signal: go, next: done}
  done: {type: succeed, output: "'done'"}
"""
    with wp.Engine(sqlite_url, poll_interval=0.05) as first:
        first.publish(definition)
        with first.running():
            run = first.start("restart", {})
            kept = first.start("restart", {})
            for r in (run, kept):
                eventually(lambda r=r: first.get(r.run_id).status == "waiting", "the run to wait")
    with wp.Engine(sqlite_url, poll_interval=0.05) as second, second.running():
        second.signal(run.run_id, "go")
        assert second.result(run.run_id, timeout=10) == "done"
    # Someone edits the stored version behind the engine's back.
    db = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))
    body = json.loads(db.execute("SELECT body FROM definitions").fetchone()[0])
    body["steps"]["done"]["output"] = "'tampered'"
    db.execute("UPDATE definitions SET body = ?", (json.dumps(body),))
    db.commit()
    db.close()
    with wp.Engine(sqlite_url, poll_interval=0.05) as third, third.running():
        third.signal(kept.run_id, "go")
        eventually(lambda: third.get(kept.run_id).status == "suspended", "the run suspended")
        info = third.get(kept.run_id)
        assert "does not match its digest" in info.error["message"]


def test_a_run_in_the_branches_of_a_parallel_step_is_not_migrated() -> None:
    definition = """
name: branches
start: both
steps:
  both:
    type: parallel
    branches:
      - start: a
        steps:
          a: {type: wait, signal: a}
      - start: b
        steps:
          b: {type: wait, signal: b}
    next: done
  done: {type: succeed, output: "'joined'"}
"""

    async def test(env: TestEnv) -> None:
        await env.engine.publish(definition)
        run = await env.engine.start("branches", {})
        await run_reaches(run, waiting("signal"))
        await env.engine.publish(definition.replace("'joined'", "'joined twice'"))
        report = await env.engine.migrate(run.run_id, 2, None, "try")
        assert not report.migrated and not report.compatible
        assert "in the branches of parallel step 'both'" in report.reasons[0]
        assert "RunMigrated" not in event_types(await run.history())
        await run.signal("a")
        await run.signal("b")
        assert await run.result(timeout=10) == "joined"  # still version 1

    scenario(test)


def test_a_compensation_that_fails_is_reported_and_the_others_still_run() -> None:
    definition = """
name: undo_all
start: one
steps:
  one:
    type: activity
    activity: echo
    input: {value: "'a'"}
    compensate: {activity: undo, input: {what: "'a'"}}
    next: two
  two:
    type: activity
    activity: echo
    input: {value: "'b'"}
    compensate: {activity: undo.broken, input: {what: "'b'"}}
    next: boom
  boom: {type: fail, error: boom}
"""

    async def test(env: TestEnv) -> None:
        await env.engine.publish(definition)
        run = await env.engine.start("undo_all", {})
        error = await failure(run)
        assert error["type"] == "boom"
        assert error["details"]["compensated"] == ["one"]
        assert error["details"]["compensation_failed"] == [
            {"step": "two", "message": "cannot undo b"}
        ]
        order = [
            e.data["compensates"]
            for e in events_of(await run.history(), "ActivityScheduled")
            if "compensates" in e.data
        ]
        assert order == ["two", "one"]  # newest first, the failed one did not stop the rest

    scenario(test)


def test_a_steps_retry_and_timeout_refine_the_registered_activity() -> None:
    definition = """
name: refined
start: call
steps:
  call:
    type: activity
    activity: picky
    input: {fail: fail}
    retry: {max_attempts: 5, initial_interval: 0}
"""

    async def test(env: TestEnv) -> None:
        await env.engine.publish(definition)
        run = await env.engine.start("refined", {"fail": True})
        error = await failure(run)
        assert error["type"] == "activity_failed" and "1 attempt(s)" in error["message"]
        (scheduled,) = events_of(await run.history(), "ActivityScheduled")
        retry = scheduled.data["retry"]
        assert retry["max_attempts"] == 5 and retry["initial_interval"] == 0
        assert retry["non_retryable"] == ["Refused"]  # kept from the registered policy
        assert scheduled.data["timeout"] == 1200  # the step sets none: the registered one

    scenario(test)
