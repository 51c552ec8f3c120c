"""Ctrl-C in the commands that serve work (`worker`, `server`, `demo`).

The first SIGINT stops gracefully: one line on stderr says what the process waits for,
and no more work is taken while the work in flight finishes. A second SIGINT stops at
once, exit code 130 (128 + SIGINT, what a shell reports for a process Ctrl-C ended),
without a traceback: what a stop at once leaves unfinished is what a crashed process
leaves, attempts whose leases lapse and which another worker takes again. SIGTERM stops
gracefully, quietly, as it always has.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import click

from waypost.model.logs import logger

INTERRUPTED = 130
"""The exit code of a process Ctrl-C ended (128 + SIGINT): stopped at once by a second
one, or the demo, cut short by a first."""


def stopping_line(in_flight: str) -> str:
    """What the first Ctrl-C prints: what the process waits for (`in_flight`)."""
    return f"stopping: waiting for {in_flight} in flight to finish (Ctrl-C again to stop at once)"


def activities(count: int) -> str:
    return f"{count} {'activity' if count == 1 else 'activities'}"


def say_on_stderr(line: str, log_format: str, logger_name: str) -> None:
    """`line` on stderr: as it is, or as a JSON log line under --log-format json (where
    every line on stderr is one JSON object)."""
    if log_format == "json":
        logger(logger_name).info("%s", line)
    else:
        click.echo(line, err=True)
    sys.stderr.flush()


def stop_at_once(*_: Any) -> None:
    """End the process now, exit code 130: the second Ctrl-C."""
    try:
        sys.stdout.flush()
        sys.stderr.write("stopped at once: work in flight is taken again when its lease lapses\n")
        sys.stderr.flush()
    finally:
        os._exit(INTERRUPTED)  # no clean-up to wait on: that is what was asked


class Interrupted(Exception):
    """The first Ctrl-C, raised where the main thread was (`interrupts(raising=True)`)."""


class Stop:
    """Whether, and how, the process was asked to stop."""

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.interrupted = False  # by Ctrl-C (SIGINT), not SIGTERM

    def wait(self) -> None:
        """Wait until SIGTERM or SIGINT (a short poll: the handler runs in this thread)."""
        while not self.asked.wait(0.5):
            pass


@contextmanager
def interrupts(*, raising: bool = False, say: str | None = None) -> Iterator[Stop]:
    """Within the block, SIGTERM and the first SIGINT ask the process to stop (`Stop`); the
    first SIGINT also prints `say` (when given) and, if `raising`, raises `Interrupted`
    where the main thread is. Every later SIGINT stops the process at once.

    Off the main thread (where no handler can be set) nothing changes."""
    stop = Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def on_term(sig: int, frame: FrameType | None) -> None:
        stop.asked.set()

    def on_int(sig: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGINT, stop_at_once)
        stop.interrupted = True
        stop.asked.set()
        if say is not None:
            click.echo(say, err=True)
        if raising:
            raise Interrupted

    previous = {
        signal.SIGTERM: signal.signal(signal.SIGTERM, on_term),
        signal.SIGINT: signal.signal(signal.SIGINT, on_int),
    }
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
