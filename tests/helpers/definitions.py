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
