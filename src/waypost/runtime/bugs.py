"""Which exceptions of workflow code fail a run, and which are bugs that suspend it.

A business failure is said explicitly: `waypost.Failure` (a definition run's
`DefinitionFailed` is one), an exception type the workflow declares in
`@workflow(failure_types=...)`, or an outcome the engine raised into the code
that the code did not catch: an `ActivityError` (an activity failed after its
retries) or a `WaitTimeout` (a wait given a `timeout=` ran out). Anything else
that escapes the code — a `KeyError`, a `TypeError`, a misuse of the context — is
a bug: the run must not end for good because of it, so the engine suspends it
with the error, its traceback and the code's `file:line`, to go on after a fix
and a `resume`. (A run's input that does not fit the workflow's type hint fails
the run: the caller's data is wrong, not the code.)
"""

from __future__ import annotations

import os
import traceback

from waypost.errors import ActivityError, ChildFailed, Failure, WaitTimeout, WorkflowBug

from .registry import WorkflowDefn

MAX_MESSAGE = 2_000
MAX_TRACEBACK = 16_000
_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def is_failure(defn: WorkflowDefn, exc: BaseException) -> bool:
    """Whether `exc` escaping the workflow's code fails the run (else: a bug)."""
    return isinstance(exc, Failure | ActivityError | ChildFailed | WaitTimeout) or (
        bool(defn.failure_types) and isinstance(exc, defn.failure_types)
    )


def bounded(text: str, most: int) -> str:
    if len(text) <= most:
        return text
    half = most // 2
    return f"{text[:half]}\n... ({len(text) - 2 * half} characters left out) ...\n{text[-half:]}"


def code_site(defn: WorkflowDefn, exc: BaseException) -> str:
    """`file.py:line` where the workflow's code raised `exc`: the innermost frame in the
    workflow's own file, else the innermost outside waypost, else the innermost."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    code = getattr(defn.fn, "__code__", None)
    own = code.co_filename if code is not None else None
    chosen = next((f for f in reversed(frames) if f.filename == own), None)
    if chosen is None:
        chosen = next((f for f in reversed(frames) if not f.filename.startswith(_PKG_DIR)), None)
    if chosen is None:
        chosen = frames[-1]
    return f"{os.path.basename(chosen.filename)}:{chosen.lineno}"


def workflow_bug(defn: WorkflowDefn, exc: BaseException, run_id: str, where: str) -> WorkflowBug:
    """The bug `exc` is, as the engine suspends the run with it (`where`: what the code
    was handling)."""
    site = code_site(defn, exc)
    kind = type(exc).__name__
    message = bounded(str(exc), MAX_MESSAGE)
    return WorkflowBug(
        f"run {run_id!r}: the workflow code raised {kind}"
        + (f" at {site}" if site else "")
        + f" while handling {where}: {message}",
        error_type=kind,
        error_message=message,
        module=type(exc).__module__,
        site=site,
        traceback_text=bounded("".join(traceback.format_exception(exc)), MAX_TRACEBACK),
    )
