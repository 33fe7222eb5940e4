"""The HTTP executor on asyncio's own transports (docs/design.md section 5): HTTP/1.1 written by
us, answers parsed by llhttp (``httptools``), one pool of keep-alive connections per
destination.

Same request, same classification as the other transports (``effectusd.executors.base`` and
``effectusd.executors.classify``). What it adds is exact evidence: the request goes out in one
``transport.write`` on a connection this executor opened or took from its own pool, so "not
sent" is what it looks like: the call ended before that write (waiting for one of the pool's
``connections``, connecting, the TLS handshake). From the write on, every failure is
unknown. It never re-sends, follows no redirect, sends no cookie back and takes no proxy from
the environment.

A pooled connection is handed out only if it is still open, nothing arrived on it while it was
idle (the loop reads idle connections: a close or a stray answer retires them) and its socket
has nothing the loop has not read yet; else it is closed and the next is tried (the request
never had it). A connection goes back to the pool only after an answer read to its end with
nothing after it, and only while keep-alive is on and the server did not ask to close.

Bodies are held at most ``2 * max_response_bytes + 1 KiB`` as they arrive (past that the
connection is closed and the body is over the limit), then decoded (gzip, deflate, in the
reverse of the order the answer lists them), each layer bounded: one that decodes past the limit
stops there.
"""

from __future__ import annotations

import asyncio
import select
import ssl
import time
from collections.abc import Mapping
from urllib.parse import urlsplit

import httptools

from effectusd import faults
from effectusd.config import DestinationConfig
from effectusd.core.transition import Completion
from effectusd.executors.base import (
    KEEPALIVE_S,
    USER_AGENT,
    BaseHttpExecutor,
    request_path,
    verifying_tls_context,
)
from effectusd.executors.classify import ANSWER_HEADERS, Wire
from effectusd.executors.inflate import ACCEPT_ENCODING, inflated
from effectusd.executors.protocol import Invocation

# Response headers kept, by their lowercased name: what classification reads, the length, and
# what the body's framing needs.
_KEPT = {
    name.lower(): name
    for name in (*ANSWER_HEADERS, "Content-Length", "Content-Encoding", "Transfer-Encoding")
}


class _Wire(Wire):
    __slots__ = ("connection_kind", "written")

    def __init__(self, invocation: Invocation) -> None:
        super().__init__(invocation)
        self.connection_kind: str | None = None  # "new" once connecting, "reused" from the pool
        self.written = False  # set just before the request's one write

    def provably_not_sent(self, exc: BaseException) -> bool:
        return not self.written

    @property
    def connection(self) -> str | None:
        return self.connection_kind


class _Answer:
    """One response as it arrives: the head, then the body, bounded."""

    __slots__ = (
        "bodiless",
        "body",
        "complete",
        "error",
        "head",
        "headers",
        "interim",
        "keep_alive",
        "over",
        "size",
        "status",
        "waiter",
    )

    def __init__(self, waiter: asyncio.Future[None], bodiless: bool) -> None:
        self.waiter = waiter  # woken on the head, on body data, on the end, on failure
        self.bodiless = bodiless  # the answer to a HEAD: its head is all of it
        self.status = 0
        self.headers: dict[str, str] = {}
        self.head = False  # the final (non-1xx) head has been parsed
        self.interim = False  # parsing a 1xx head, which is skipped
        self.body: list[bytes] = []
        self.size = 0
        self.over = False  # more body arrived than is held
        self.complete = False
        self.keep_alive = False
        self.error: BaseException | None = None


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: at most one exchange at a time, in order."""

    def __init__(self, hold: int) -> None:
        self.hold = hold  # body bytes held; past them the connection is closed, the body over
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.answer: _Answer | None = None
        self.usable = True  # False once closed, or once anything arrived that was not asked for
        self.idle_since = 0.0

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        answer = self.answer
        if answer is None or answer.complete:  # nothing asked: a stray answer or junk
            self.retire()
            return
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self.retire()
            self._fail(exc)

    def eof_received(self) -> bool:
        self.usable = False
        answer = self.answer
        if answer is not None and answer.head and not answer.complete and _close_delimited(answer):
            answer.complete = True  # a body that ends with the connection ended with it
            _wake(answer)
        return False  # close; a framed answer cut short fails in connection_lost

    def connection_lost(self, exc: Exception | None) -> None:
        self.usable = False
        answer = self.answer
        if answer is not None and not answer.complete:
            self._fail(exc or ConnectionResetError("connection closed before the answer ended"))

    # -- httptools callbacks
    def on_message_begin(self) -> None:
        answer = self.answer
        if answer is not None and answer.complete:
            self.retire()  # a second answer behind the first: never read as anyone's

    def on_header(self, name: bytes, value: bytes) -> None:
        answer = self.answer
        if answer is None or answer.complete or answer.interim:
            return
        kept = _KEPT.get(name.decode("latin-1").lower())
        if kept is not None:
            text = value.decode("latin-1")
            found = answer.headers.get(kept)
            # Repeated headers are joined, as the other transports do: a duplicated outcome is
            # no outcome.
            answer.headers[kept] = text if found is None else f"{found}, {text}"

    def on_headers_complete(self) -> None:
        answer = self.answer
        if answer is None or answer.complete:
            return
        status = self.parser.get_status_code()
        if 100 <= status < 200:
            answer.interim = True  # 100 Continue and the like: the real answer follows
            answer.headers = {}
            return
        answer.status = status
        answer.keep_alive = self.parser.should_keep_alive()
        answer.head = True
        if answer.bodiless:  # the parser cannot know a HEAD's answer has no body
            answer.complete = True
            self.retire()
        _wake(answer)

    def on_body(self, body: bytes) -> None:
        answer = self.answer
        if answer is None or answer.complete or answer.interim or answer.over:
            return
        answer.size += len(body)
        if answer.size > self.hold:
            answer.over = True
            answer.body.clear()
            self.retire()  # never reused; what follows is not read
        else:
            answer.body.append(body)
        _wake(answer)

    def on_message_complete(self) -> None:
        answer = self.answer
        if answer is None or answer.complete:
            return
        if answer.interim:
            answer.interim = False
            return
        answer.complete = True
        _wake(answer)

    # --
    def retire(self) -> None:
        self.usable = False
        if self.transport is not None:
            self.transport.close()

    def _fail(self, exc: BaseException) -> None:
        answer = self.answer
        if answer is not None and not answer.complete and answer.error is None:
            answer.error = exc
            _wake(answer)

    def reusable(self, now: float) -> bool:
        """Open, nothing unasked arrived, not idle too long, nothing unread on the socket."""
        transport = self.transport
        if not self.usable or transport is None or transport.is_closing():
            return False
        if now - self.idle_since > KEEPALIVE_S:
            return False
        sock = transport.get_extra_info("socket")
        if sock is None:
            return False
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return not poller.poll(0)


def _wake(answer: _Answer) -> None:
    waiter = answer.waiter
    if not waiter.done():
        waiter.set_result(None)


def _close_delimited(answer: _Answer) -> bool:
    """A body framed by neither a length nor chunks: it ends where the connection does."""
    headers = answer.headers
    return not answer.keep_alive and not (
        "Content-Length" in headers or "chunked" in headers.get("Transfer-Encoding", "").lower()
    )


class AsyncioExecutor(BaseHttpExecutor[bytes, _Wire]):
    """Executor for one HTTP destination on asyncio's transports. Callers limit concurrency
    (see BaseHttpExecutor); the pool never opens more than ``connections``."""

    def __init__(
        self, name: str, config: DestinationConfig, *, environ: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(name, config, environ=environ)
        parts = urlsplit(self._base_url)
        https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if https else 80)
        self._prefix = request_path(parts.path)  # the base URL's path, before every call's
        self._tls: ssl.SSLContext | None = None
        if https:
            self._tls = verifying_tls_context(config) if config.verify_tls else _unverified()
        self._keep_alive = config.keep_alive
        # Built once: the request line's tail and every header that is the same for each call.
        static = {"Host": parts.netloc, "User-Agent": USER_AGENT}
        configured = {name.lower() for name in self._static_headers}
        for name, value in (("Accept", "*/*"), ("Accept-Encoding", ACCEPT_ENCODING)):
            if name.lower() not in configured:
                static[name] = value
        static.update(self._static_headers)
        if not self._keep_alive:
            static["Connection"] = "close"
        self._head_tail = "".join(f"{k}: {v}\r\n" for k, v in static.items()).encode()
        self._hold = _held(self._max_response_bytes)
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(self.connections)
        self._closed = False
        self._open: set[_Connection] = set()

    async def aclose(self) -> None:
        self._closed = True
        for conn in list(self._open):
            conn.retire()
        self._idle.clear()
        self._open.clear()

    def _new_wire(self, inv: Invocation) -> _Wire:
        return _Wire(inv)

    def _build(self, inv: Invocation, headers: dict[str, str], total: float, wire: _Wire) -> bytes:
        body = inv.body
        lines = [f"{inv.method} {self._prefix}{request_path(inv.path)} HTTP/1.1\r\n"]
        lines += [f"{name}: {value}\r\n" for name, value in headers.items()]
        lines.append(f"Content-Length: {len(body)}\r\n")
        return b"".join(("".join(lines).encode(), self._head_tail, b"\r\n", body))

    async def _exchange(self, request: bytes, wire: _Wire, started: float) -> Completion:
        if self._closed:
            raise RuntimeError("executor is closed")
        async with self._slots:  # while waiting here, nothing was sent
            conn = await self._connection(wire)
            loop = asyncio.get_running_loop()
            answer = _Answer(loop.create_future(), bodiless=request.startswith(b"HEAD "))
            conn.answer = answer
            done = False
            try:
                wire.written = True  # from here on, every failure may have been sent
                assert conn.transport is not None
                conn.transport.write(request)
                faults.point("after_send")  # the chaos suite's "request left, no answer yet"
                while not answer.head:
                    await self._next(answer)
                wire.answered(answer.status, answer.headers)
                result = await self._classify(
                    wire, started, answer.headers, lambda limit: self._read(answer, limit)
                )
                done = answer.complete
            finally:
                conn.answer = None
                if done and answer.keep_alive and self._keep_alive and conn.usable:
                    conn.idle_since = time.monotonic()
                    self._idle.append(conn)
                else:
                    self._drop(conn)
            return result

    async def _connection(self, wire: _Wire) -> _Connection:
        """A pooled connection that is still good, else a new one."""
        idle = self._idle
        if idle:
            now = time.monotonic()
            while idle:
                conn = idle.pop()
                if conn.reusable(now):
                    wire.connection_kind = "reused"
                    return conn
                self._drop(conn)  # this request never had it
        wire.connection_kind = "new"
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self._connect_timeout):
            _, conn = await loop.create_connection(
                lambda: _Connection(self._hold),
                self._host,
                self._port,
                ssl=self._tls,
                server_hostname=self._host if self._tls is not None else None,
            )
        self._open.add(conn)
        return conn

    def _drop(self, conn: _Connection) -> None:
        conn.retire()
        self._open.discard(conn)

    @staticmethod
    async def _next(answer: _Answer) -> None:
        """Wait for the next thing the connection says of ``answer`` (a failure wakes it too)."""
        await answer.waiter
        answer.waiter = asyncio.get_running_loop().create_future()
        if answer.error is not None:
            raise answer.error

    async def _read(self, answer: _Answer, limit: int) -> bytes | None:
        """The decoded body, or None once it is known to exceed ``limit`` bytes."""
        hold = _held(limit)
        while not (answer.over or answer.size > hold):
            if answer.complete:
                raw = b"".join(answer.body)
                return inflated(raw, answer.headers.get("Content-Encoding", "").split(","), limit)
            await self._next(answer)
        return None


def _held(limit: int) -> int:
    """Body bytes held for a decoded limit: enough to decode ``limit`` bytes (compressed data is
    not much larger than what it decodes to) and to tell that a body is over it."""
    return 2 * limit + 1024


def _unverified() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context
