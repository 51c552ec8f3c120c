"""Local HTTP servers for tests: `LocalServer` answers each request as a function says;
`Server` records every request and answers from a script per path."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, TypeVar


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes


@dataclass
class Answer:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


class LocalServer:
    """An HTTP server on a free local port, in a thread of its own: `respond` answers each
    request (any method) from what was received."""

    def __init__(self, respond: Callable[[Received], Answer]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                answer = respond(
                    Received(
                        self.command,
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                    )
                )
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join()


class Server:
    """A local HTTP server that records every request and answers from a script per path."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.script: dict[str, list[Answer]] = {}
        self._lock = threading.Lock()
        self._http = LocalServer(self._record)
        self.port = self._http.port
        self.base = self._http.base

    def answer(self, path: str, *answers: Answer) -> None:
        """Answer `path` with these in turn; the last one repeats."""
        with self._lock:
            self.script[path] = list(answers)

    def _record(self, request: Received) -> Answer:
        with self._lock:
            self.received.append(request)
            path = request.path.partition("?")[0]
            answers = self.script.get(path) or [Answer(404, b"no such path")]
            return answers.pop(0) if len(answers) > 1 else answers[0]

    def requests(self, path: str | None = None) -> list[Received]:
        with self._lock:
            return [r for r in self.received if path is None or r.path.partition("?")[0] == path]

    def close(self) -> None:
        self._http.close()


class _Closes(Protocol):
    def close(self) -> None: ...


S = TypeVar("S", bound=_Closes)


def serving(server: S) -> Iterator[S]:
    """Yield `server`, then close it: the body of a server fixture (`yield from serving(...)`)."""
    try:
        yield server
    finally:
        server.close()
