"""Definitions (YAML) several tests publish."""

from __future__ import annotations

_AMOUNT_HOLD = """
name: {name}
input:
  type: object
  required: [amount]
  properties:
    amount: {{type: number, minimum: 0}}
  additionalProperties: false
start: wait
steps:
  wait: {{type: wait, signal: go, next: done}}
  done: {{type: succeed, output: "{{amount: amount}}"}}
"""


def amount_hold(name: str) -> str:
    """Definition `name`: its input is a non-negative `amount` and nothing else; it waits
    for signal `go`, then ends with `{amount}`."""
    return _AMOUNT_HOLD.format(name=name)


_ASK_ANN = """
name: {name}
start: ask
steps:
  ask:
    type: approval
    approvers: {{users: [ann]}}
    next: done
  done:
    type: succeed
"""


def ask_ann(name: str) -> str:
    """Definition `name`: one approval by user `ann`, then the run succeeds."""
    return _ASK_ANN.format(name=name)


def waits_then_succeeds(*waits: tuple[str, str]) -> str:
    """The YAML of steps (indented as under `steps:`) that wait, in turn, for each
    `(step, signal)` of `waits`, then a step `done` that succeeds."""
    steps = [step for step, _ in waits] + ["done"]
    return (
        "".join(
            f"  {step}:\n    type: wait\n    signal: {signal}\n    next: {after}\n"
            for (step, signal), after in zip(waits, steps[1:], strict=True)
        )
        + "  done:\n    type: succeed\n"
    )


# Step `reserve` of the purchase definitions (indented as under `steps:`): it reserves
# the order's amount; RELEASED_ON_UNDO, its compensation, follows it where it has one.
RESERVE_STEP = """  reserve:
    type: activity
    activity: budget.reserve
    input: {order_id: order_id, amount: amount}
    output: $.reservation
"""
RELEASED_ON_UNDO = """    compensate:
      activity: budget.release
      input: {reservation_id: reservation.id}
"""


def big_orders_approved(otherwise: str) -> str:
    """Step `route` (indented as under `steps:`): an amount over 1000 goes on to step
    `approve`, any other to step `otherwise`."""
    return (
        "  route:\n    type: choice\n    choices:\n      - when: amount > `1000`\n"
        f"        next: approve\n    default: {otherwise}\n"
    )
