"""A real HTTP destination on 127.0.0.1 whose answers a test scripts, and which records every
request it received (headers and body bytes)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def key(self) -> str:
        return self.headers["idempotency-key"]

    @property
    def attempt(self) -> int:
        return int(self.headers["x-effectus-attempt"])

    @property
    def direction(self) -> str:
        return self.headers["x-effectus-direction"]

    @property
    def effect(self) -> str:
        return self.headers["x-effectus-effect-id"]

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Response:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    stall: threading.Event | None = None  # wait on this before answering (the call times out)


Handler = Callable[[Request], Response]


def ok(request: Request) -> Response:
    return Response(200, {"ok": True, "effect": request.effect, "attempt": request.attempt})


class Destination:
    def __init__(self, handler: Handler = ok) -> None:
        self.handler = handler
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def seen(self, effect: str | None = None, direction: str | None = None) -> list[Request]:
        with self._lock:
            return [
                r
                for r in self.requests
                if (effect is None or r.effect == effect)
                and (direction is None or r.direction == direction)
            ]


def _handler_class(destination: Destination) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length) if length else b""
            request = Request(
                self.command,
                self.path,
                {k.lower(): v for k, v in self.headers.items()},
                body,
            )
            destination.record(request)
            response = destination.handler(request)
            if response.stall is not None:
                response.stall.wait(30)
            payload = b"" if response.body is None else json.dumps(response.body).encode()
            try:
                self.send_response(response.status)
                for name, value in response.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    return Handler


class _Server(ThreadingHTTPServer):
    # The default backlog of 5 resets connections when several daemons connect at once; a
    # reset after sending is (correctly) unknown, which is not what these tests are about.
    request_queue_size = 512
    daemon_threads = True


def _listen(destination: Destination, port: int = 0) -> None:
    server = _Server(("127.0.0.1", port), _handler_class(destination))
    destination.server = server
    threading.Thread(target=server.serve_forever, daemon=True).start()


def go_down(destination: Destination) -> None:
    """Close the listening socket: connecting is refused until ``come_back`` (a restart)."""
    assert destination.server is not None
    destination.server.shutdown()
    destination.server.server_close()


def come_back(destination: Destination) -> None:
    """Listen again on the port ``go_down`` closed."""
    assert destination.server is not None
    _listen(destination, destination.server.server_address[1])


@contextlib.contextmanager
def running(handler: Handler = ok) -> Iterator[Destination]:
    destination = Destination(handler)
    _listen(destination)
    try:
        yield destination
    finally:
        assert destination.server is not None
        destination.server.shutdown()
        destination.server.server_close()


class HeldUntilMoreThan:
    """A handler that holds each of the first ``n`` calls until call ``n + 1`` arrives, then
    answers everything at once: a daemon with ``n`` slots cannot send call ``n + 1`` while
    its ``n`` are held, so its arrival proves another daemon sent it."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.arrived = 0
        self.exceeded = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, request: Request) -> Response:
        with self._lock:
            self.arrived += 1
            if self.arrived > self.n:
                self.exceeded.set()
        return Response(200, {"ok": True}, stall=self.exceeded)
