"""A definition's `call` step: another published definition of the tenant, as a child run.

The step starts the child through the run's instance (`ChildRuns.start_child`, a
ChildStarted command) on the definitions' queue, naming the definition and, if the step
gives one, its version; the store pins the child to that version (else the newest) and
its digest when it creates the child, in the commit that records ChildStarted. The child
inherits the limits its parent's RunStarted recorded, and is one level deeper: the
runtime refuses a child more than `MAX_CHILD_DEPTH` levels down, so a definition that
calls itself ends instead of filling the database.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from .context import ContextHost


def start_call(
    inst: ContextHost,
    step: Mapping[str, Any],
    inputs: dict[str, Any],
    limits: Mapping[str, Any],
    queue: str,
) -> asyncio.Future[Any]:
    """Start the child run of a `call` step; the future of its result."""
    version = step.get("version")
    handle = inst.children.start_child(
        step["definition"],
        inputs,
        close=str(step.get("close", "cancel")),
        queue=queue,
        definition={
            "name": step["definition"],
            "version": None if version is None else int(version),
            "limits": dict(limits),
        },
    )
    return handle.result()
