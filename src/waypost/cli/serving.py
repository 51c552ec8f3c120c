"""How `waypost server` listens and stops: its address checked before anything is
printed, and uvicorn's server with the command line's Ctrl-C (stopping.py).

Imported only once the server's extra (uvicorn) is known to be installed.
"""

from __future__ import annotations

import errno
import signal
import socket
from types import FrameType
from typing import Any

import click
import uvicorn

from .stopping import say_on_stderr, stop_at_once, stopping_line

STARTUP_FAILURE = 3  # uvicorn's exit code for a server process that did not start


def check_address(host: str, port: int) -> None:
    """Refuse, before any banner, an address the server could not listen on: a port
    another process holds, a host that is not this machine's. Binds as uvicorn will
    (SO_REUSEADDR), then lets go at once."""
    if port == 0:  # any free port: nothing to check
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                why = "another process listens there; stop it or give another --port"
            elif exc.errno == errno.EACCES:
                why = "not allowed (a port below 1024 needs privileges); give another --port"
            else:
                why = f"{exc.strerror or exc}; check --host and --port"
            raise click.ClickException(f"cannot listen on {shown}: {why}") from None
        except socket.gaierror as exc:
            raise click.ClickException(
                f"cannot listen on {shown}: {exc.strerror or exc}; check --host"
            ) from None


class _StoppingServer(uvicorn.Server):
    """uvicorn's server, whose first Ctrl-C says it is stopping and whose second stops
    the process at once (exit 130); uvicorn's own second Ctrl-C would only skip what is
    left of the graceful stop once the engine's grace is over."""

    log_format = "text"

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGINT:
            if self.should_exit:
                stop_at_once()
            say_on_stderr(
                stopping_line("the requests and activities"), self.log_format, "waypost.server"
            )
        super().handle_exit(sig, frame)


def serve(app: str, processes: int, log_format: str, **options: Any) -> None:
    """Run uvicorn on `app`: in this process with Ctrl-C as above, or in `processes`
    processes under uvicorn's supervisor (whose Ctrl-C is uvicorn's own)."""
    if processes > 1:
        uvicorn.run(app, workers=processes, **options)
        return
    server = _StoppingServer(uvicorn.Config(app, **options))
    server.log_format = log_format
    server.run()
    if not server.started:
        raise SystemExit(STARTUP_FAILURE)
