"""Every HTTP executor (asyncio, aiohttp, httpx) against real servers on 127.0.0.1: raw sockets
for wire faults, http.server for well-formed exchanges. Every test runs once per transport;
nothing in any of them is mocked, so every classification is earned on the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gzip
import hashlib
import json
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from effectusd.config import DestinationConfig
from effectusd.core.states import Direction, FencingStatus, OutcomeClass
from effectusd.core.transition import Completion
from effectusd.executors.base import BaseHttpExecutor
from effectusd.executors.factory import EXECUTOR_CLASSES, executor_for
from effectusd.executors.protocol import FencingGrant, Invocation
from tests.support import required

# docs/design.md section 2 vectors: namespace default, execution order-7, plan checkout, step
# charge.
SAGA_ID = "53c4d5234ab09a8d5912898c4e385b0a86809796ccca87c3959d7755085345f8"
FORWARD_KEY = "8574e6019624ecdc867c223762cb0e8f2f1bca2924d07b3563fd0c977bbbab6e"
ARGS = b'{"amount":1250,"currency":"EUR","order":"o-1"}'
ARGS_HASH = "c15a5ceb896021e05f9224fdba000d9c5dfb42b47fe52db99e0e8d3699ab34d4"
CONTRACT_HASH = "ab" * 32
TOKEN = "tok-Zq8mW3xR7vK1pL"
LEASE_TOKEN = "lease-Hq4nV8cT2yJ6"  # the attempt's lease: named by its completion, never sent
SHORT = 0.3  # seconds; every stalled exchange ends here, never by sleeping
SHORT_TIMEOUT = timedelta(seconds=SHORT)  # the same, as a destination's configured timeout


class Chosen:
    """The transport under test; set per test by the ``transport`` fixture."""

    transport = "httpx"


@pytest.fixture(autouse=True, params=sorted(EXECUTOR_CLASSES))
def transport(request: pytest.FixtureRequest) -> Iterator[str]:
    Chosen.transport = request.param
    yield request.param
    Chosen.transport = "httpx"


def invocation(**changes: Any) -> Invocation:
    inv = Invocation(
        request_id="req-0001",
        execution_id="order-7",
        saga_id=SAGA_ID,
        effect_id="charge",
        attempt=3,
        direction=Direction.FORWARD,
        verb="payments.charge",
        method="POST",
        path="/charges/o-1",
        body=ARGS,
        argument_hash=ARGS_HASH,
        contract_hash=CONTRACT_HASH,
        idempotency_key=FORWARD_KEY,
        fencing_grants=(FencingGrant("account:b", 9), FencingGrant("account:a", 12)),
        deadline=datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
        key_issued_at=datetime(2030, 1, 1, 23, 59, 58, 123456, tzinfo=UTC),
        timeout=5.0,
        dispatch_id=41,
        lease_token=LEASE_TOKEN,
        fencing_sent=FencingStatus.PROPAGATED,
    )
    return dataclasses.replace(inv, **changes)


def destination(base_url: str, **fields: Any) -> DestinationConfig:
    fields.setdefault("timeout", "2s")
    fields.setdefault("connect_timeout", "1s")
    fields.setdefault("transport", Chosen.transport)
    return DestinationConfig(base_url=base_url, **fields)


@contextlib.asynccontextmanager
async def executor(
    config: DestinationConfig, **kwargs: Any
) -> AsyncIterator[BaseHttpExecutor[Any, Any]]:
    ex = executor_for("payments", config, **kwargs)
    assert isinstance(ex, EXECUTOR_CLASSES[Chosen.transport])
    try:
        yield ex
    finally:
        await ex.aclose()


# --- a real HTTP server that records what it received -------------------------------------


@dataclasses.dataclass
class Reply:
    status: int = 200
    headers: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    body: bytes = b"{}"


@dataclasses.dataclass
class Received:
    method: str
    path: str
    headers: list[tuple[str, str]]  # in arrival order, duplicates kept, values as UTF-8 text
    body: bytes

    def all(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key.lower() == name.lower()]

    def one(self, name: str) -> str:
        values = self.all(name)
        assert len(values) == 1, f"{name}: {values}"
        return values[0]


class Recorder:
    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.received: list[Received] = []
        self.base_url = ""

    def reply(self, *replies: Reply) -> None:
        self.replies.extend(replies)


def _recording_handler(recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real destinations do

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            # http.server decodes header bytes as latin-1; undo that to see the UTF-8 we sent.
            headers = [
                (key, value.encode("latin-1").decode("utf-8"))
                for key, value in self.headers.items()
            ]
            recorder.received.append(Received(self.command, self.path, headers, body))
            reply = recorder.replies.pop(0) if recorder.replies else Reply()
            self.send_response(reply.status)
            for key, value in reply.headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


@contextlib.contextmanager
def recording_server(tls: ssl.SSLContext | None = None) -> Iterator[Recorder]:
    rec = Recorder()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _recording_handler(rec))
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    scheme = "https" if tls else "http"
    rec.base_url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    with recording_server() as rec:
        yield rec


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[str, ssl.SSLContext]:
    """A certificate for 127.0.0.1 that no public CA bundle trusts, and a server context."""
    if shutil.which("openssl") is None:
        required.missing("openssl is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return str(cert), context


# --- raw socket servers for wire faults ----------------------------------------------------


class RawServer:
    """An asyncio TCP server on 127.0.0.1:0; ``behaviour`` runs once per accepted connection."""

    def __init__(self, behaviour: Callable[[RawServer, Any, Any], Awaitable[None]]) -> None:
        self.behaviour = behaviour
        self.connections = 0
        self.requests: list[bytes] = []
        self.writers: list[asyncio.StreamWriter] = []  # one per accepted connection
        self.request_read = asyncio.Event()
        self.release = asyncio.Event()  # lets stalled behaviours finish at teardown
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release.set()
        self._server.close()
        await self._server.wait_closed()
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=2)
            for task in pending:
                task.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        self.connections += 1
        self.writers.append(writer)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await self.behaviour(self, reader, writer)
        writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        request = head + await reader.readexactly(length)
        self.requests.append(request)
        self.request_read.set()
        return request


def reset(writer: asyncio.StreamWriter) -> None:
    """Abort with SO_LINGER 0, so the peer sees a TCP RST rather than an orderly FIN."""
    writer.get_extra_info("socket").setsockopt(
        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
    )
    writer.transport.abort()


def response(status: str, body: bytes, *headers: str) -> bytes:
    head = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def call_raw(behaviour: Any, **config: Any) -> tuple[Completion, RawServer]:
    async with (
        RawServer(behaviour) as server,
        executor(destination(server.base_url, **config)) as ex,
    ):
        return await ex.call(invocation()), server


def answer_with(raw: bytes) -> Any:
    """A raw server's behaviour: read the request, write ``raw``."""

    async def behaviour(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(raw)
        await writer.drain()

    return behaviour


def assert_unknown_after_sending(result: Completion) -> None:
    assert result.outcome is OutcomeClass.UNKNOWN, result
    assert result.evidence["sent"] == "maybe_sent"


def assert_retryable_not_sent(result: Completion) -> None:
    assert result.outcome is OutcomeClass.RETRYABLE, result
    assert result.evidence["sent"] == "not_sent"
    assert result.status_code is None


# --- the request on the wire ----------------------------------------------------------------


async def test_every_reserved_header_arrives_with_its_exact_value(recorder: Recorder) -> None:
    async with executor(destination(recorder.base_url)) as ex:
        result = await ex.call(invocation())
    assert result.outcome is OutcomeClass.SUCCESS
    [got] = recorder.received
    expected = {
        "Idempotency-Key": FORWARD_KEY,
        "X-Effectus-Request-ID": "req-0001",
        "X-Effectus-Execution-ID": "order-7",
        "X-Effectus-Saga-ID": SAGA_ID,
        "X-Effectus-Effect-ID": "charge",
        "X-Effectus-Attempt": "3",
        "X-Effectus-Direction": "forward",
        "X-Effectus-Verb": "payments.charge",
        "X-Effectus-Argument-Hash": ARGS_HASH,
        "X-Effectus-Contract-Hash": CONTRACT_HASH,
        "X-Effectus-Fencing-Grants": (
            '[{"resource":"account:a","token":12},{"resource":"account:b","token":9}]'
        ),
        "X-Effectus-Deadline": "2030-01-02T03:04:05.678Z",
        "X-Effectus-Key-Issued-At": "2030-01-01T23:59:58.123Z",
        "Content-Type": "application/json",
    }
    assert {name: got.one(name) for name in expected} == expected
    # The completion names the held attempt; its lease goes nowhere near the wire.
    assert (result.dispatch_id, result.attempt, result.lease_token) == (41, 3, LEASE_TOKEN)
    assert LEASE_TOKEN not in repr(got.headers) + repr(invocation())


async def test_body_is_the_canonical_arguments_and_matches_the_argument_hash(
    recorder: Recorder,
) -> None:
    async with executor(destination(recorder.base_url)) as ex:
        await ex.call(invocation())
    [got] = recorder.received
    assert (got.method, got.path) == ("POST", "/charges/o-1")
    assert got.body == ARGS
    assert hashlib.sha256(got.body).hexdigest() == got.one("X-Effectus-Argument-Hash")


async def test_method_and_base_path_come_from_invocation_and_config(recorder: Recorder) -> None:
    async with executor(destination(recorder.base_url + "/api/v1/")) as ex:
        await ex.call(invocation(method="PUT", path="/refunds/r%2F1"))
    [got] = recorder.received
    assert (got.method, got.path) == ("PUT", "/api/v1/refunds/r%2F1")


async def test_no_fencing_grants_are_sent_as_an_empty_array(recorder: Recorder) -> None:
    async with executor(destination(recorder.base_url)) as ex:
        await ex.call(invocation(fencing_grants=()))
    assert recorder.received[0].one("X-Effectus-Fencing-Grants") == "[]"


async def test_non_ascii_fencing_resource_arrives_as_exact_canonical_utf8(
    recorder: Recorder,
) -> None:
    async with executor(destination(recorder.base_url)) as ex:
        await ex.call(invocation(fencing_grants=(FencingGrant("account:müller", 1),)))
    grants = recorder.received[0].one("X-Effectus-Fencing-Grants")
    assert grants == '[{"resource":"account:müller","token":1}]'


async def test_static_headers_are_sent_but_never_override_reserved_ones(
    recorder: Recorder,
) -> None:
    # Config validation refuses these headers; model_construct skips it, as a bug elsewhere might.
    config = DestinationConfig.model_construct(
        base_url=recorder.base_url,
        headers={
            "X-Team": "checkout",
            "Idempotency-Key": "forged",
            "x-effectus-attempt": "99",
            "Content-Type": "text/plain",
            "Authorization": "Bearer inline",
        },
        transport=Chosen.transport,
    )
    async with executor(config) as ex:
        await ex.call(invocation())
    [got] = recorder.received
    assert got.one("X-Team") == "checkout"
    assert got.one("Idempotency-Key") == FORWARD_KEY
    assert got.one("X-Effectus-Attempt") == "3"
    assert got.one("Content-Type") == "application/json"
    assert got.all("Authorization") == []


async def test_bearer_token_comes_from_the_named_environment_variable(
    recorder: Recorder,
) -> None:
    config = destination(recorder.base_url, bearer_token_env="PAYMENTS_TOKEN")
    recorder.reply(Reply(), Reply(status=503, headers=[("Retry-After", "1")]))
    async with executor(config, environ={"PAYMENTS_TOKEN": TOKEN}) as ex:
        results = [await ex.call(invocation()), await ex.call(invocation())]
    assert [got.one("Authorization") for got in recorder.received] == [f"Bearer {TOKEN}"] * 2
    for result in results:
        assert TOKEN not in repr(result.error) + repr(result.evidence)


async def test_unset_bearer_variable_is_refused_by_name_at_construction() -> None:
    config = destination("http://127.0.0.1:9", bearer_token_env="PAYMENTS_TOKEN")
    with pytest.raises(ValueError, match="PAYMENTS_TOKEN") as raised:
        executor_for("payments", config, environ={"OTHER": TOKEN})
    assert "not set" in str(raised.value)


async def test_unsendable_bearer_value_is_refused_without_echoing_it() -> None:
    config = destination("http://127.0.0.1:9", bearer_token_env="PAYMENTS_TOKEN")
    with pytest.raises(ValueError, match="PAYMENTS_TOKEN") as raised:
        executor_for("payments", config, environ={"PAYMENTS_TOKEN": "bad token\x01"})
    assert "bad token" not in str(raised.value)


async def test_cookies_set_by_a_destination_are_never_sent_back(recorder: Recorder) -> None:
    recorder.reply(Reply(headers=[("Set-Cookie", "session=abc; Path=/")]), Reply())
    async with executor(destination(recorder.base_url)) as ex:
        await ex.call(invocation())
        await ex.call(invocation())
    assert recorder.received[1].all("Cookie") == []


async def test_invalid_invocation_is_refused_before_anything_is_sent(recorder: Recorder) -> None:
    async with executor(destination(recorder.base_url)) as ex:
        result = await ex.call(invocation(deadline=datetime(2030, 1, 1)))
    assert_retryable_not_sent(result)
    assert "X-Effectus-Deadline" in (result.error or "")
    assert recorder.received == []


async def test_max_concurrency_is_exposed_for_the_dispatcher() -> None:
    async with executor(destination("http://127.0.0.1:9", max_concurrency=7)) as ex:
        assert ex.max_concurrency == 7


async def test_tls_is_verified_so_an_untrusted_server_gets_nothing(
    self_signed: tuple[str, ssl.SSLContext],
) -> None:
    with recording_server(self_signed[1]) as rec:
        async with executor(destination(rec.base_url)) as ex:
            result = await ex.call(invocation())
    assert_retryable_not_sent(result)  # the handshake failed before any request byte
    assert rec.received == []


async def test_tls_trusts_the_configured_ca_file(self_signed: tuple[str, ssl.SSLContext]) -> None:
    with recording_server(self_signed[1]) as rec:
        async with executor(destination(rec.base_url, ca_file=self_signed[0])) as ex:
            result = await ex.call(invocation())
    assert result.outcome is OutcomeClass.SUCCESS
    assert rec.received[0].body == ARGS


# --- classification of answers --------------------------------------------------------------


async def test_2xx_json_body_is_success_with_the_parsed_result(recorder: Recorder) -> None:
    recorder.reply(Reply(status=201, body=b'{"charge_id":"c-1","amount":1250}'))
    async with executor(destination(recorder.base_url)) as ex:
        result = await ex.call(invocation())
    assert result.outcome is OutcomeClass.SUCCESS
    assert (result.status_code, result.result) == (201, {"charge_id": "c-1", "amount": 1250})
    assert result.error is None
    assert result.evidence["sent"] == "maybe_sent"
    assert result.evidence["connection"] == "new"


@pytest.mark.parametrize("status", [200, 204])
async def test_2xx_empty_body_is_success_with_null_result(recorder: Recorder, status: int) -> None:
    recorder.reply(Reply(status=status, body=b""))
    async with executor(destination(recorder.base_url)) as ex:
        result = await ex.call(invocation())
    assert (result.outcome, result.result) == (OutcomeClass.SUCCESS, None)


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (422, OutcomeClass.PERMANENT),
        (503, OutcomeClass.RETRYABLE),
        (409, OutcomeClass.UNKNOWN),
        (409, OutcomeClass.STALE_FENCE),
    ],
)
async def test_outcome_header_names_the_class_of_a_non_2xx_answer(
    recorder: Recorder, status: int, outcome: OutcomeClass
) -> None:
    recorder.reply(Reply(status=status, headers=[("X-Effectus-Outcome", outcome.value)]))
    async with executor(destination(recorder.base_url)) as ex:
        result = await ex.call(invocation())
    assert (result.outcome, result.status_code) == (outcome, status)
    assert result.evidence["headers"] == {"X-Effectus-Outcome": outcome.value}


async def test_a_refusal_keeps_the_destinations_reason_on_one_bounded_printable_line(
    recorder: Recorder,
) -> None:
    said = "out of stock\n\x1b[31m" + "x" * 500
    refused = [("X-Effectus-Outcome", "permanent_failure")]
    recorder.reply(
        Reply(status=409, headers=refused, body=json.dumps({"error": said}).encode()),
        Reply(
            status=503,
            headers=[("X-Effectus-Outcome", "retryable_failure_known_not_committed")],
            body=b"  try again\tlater \n",
        ),
        Reply(status=422, headers=refused, body=b'{"detail":"o-1"}'),  # no reason: not kept
        Reply(status=502, headers=refused, body=b"<html>" + b"o-1 " * 60 + b"</html>"),  # a page
    )
    async with executor(destination(recorder.base_url)) as ex:
        refusal, busy, other, page = [await ex.call(invocation()) for _ in range(4)]
    assert refusal.outcome is OutcomeClass.PERMANENT
    reason = refusal.evidence["reason"]
    assert reason.startswith("out of stock \\u001b[31mxxx") and reason.endswith("x…")
    assert len(reason) == 200 + 5 + 1  # 200 characters (the escape is 6 for 1), then "…"
    assert refusal.error == f"HTTP 409: {reason}"
    assert (busy.outcome, busy.error) == (OutcomeClass.RETRYABLE, "HTTP 503: try again later")
    assert (other.outcome, other.error) == (OutcomeClass.PERMANENT, "HTTP 422")
    assert (page.outcome, page.error) == (OutcomeClass.PERMANENT, "HTTP 502")
    assert "reason" not in other.evidence and "reason" not in page.evidence


async def test_a_refusal_whose_body_never_arrives_keeps_its_class_without_a_reason() -> None:
    async def behaviour(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        head = "HTTP/1.1 409 Conflict\r\nContent-Length: 100\r\n"
        writer.write(f"{head}X-Effectus-Outcome: permanent_failure\r\n\r\n{{".encode())
        await writer.drain()
        await server.release.wait()

    result, _ = await call_raw(behaviour, timeout=SHORT_TIMEOUT)
    assert (result.outcome, result.error) == (OutcomeClass.PERMANENT, "HTTP 409")
    assert "reason" not in result.evidence


async def test_503_without_outcome_header_is_unknown(recorder: Recorder) -> None:
    recorder.reply(Reply(status=503, body=b'{"echo":"o-1"}'))
    async with executor(destination(recorder.base_url)) as ex:
        result = await ex.call(invocation())
    assert_unknown_after_sending(result)
    assert result.status_code == 503
    assert "o-1" not in repr(result.error) + repr(result.evidence)


async def test_status_map_classifies_answers_without_a_valid_outcome_header(
    recorder: Recorder,
) -> None:
    recorder.reply(
        Reply(status=503),
        Reply(status=503, headers=[("X-Effectus-Outcome", "bogus")]),
        Reply(status=503, headers=[("X-Effectus-Outcome", "success")]),
        Reply(status=503, headers=[("X-Effectus-Outcome", "permanent_failure")]),
        Reply(status=500),
    )
    config = destination(
        recorder.base_url, status_map={503: "retryable_failure_known_not_committed"}
    )
    async with executor(config) as ex:
        outcomes = [(await ex.call(invocation())).outcome for _ in range(5)]
    assert outcomes == [
        OutcomeClass.RETRYABLE,
        OutcomeClass.RETRYABLE,
        OutcomeClass.RETRYABLE,
        OutcomeClass.PERMANENT,  # the destination's own word beats the config's guess
        OutcomeClass.UNKNOWN,
    ]


async def test_repeated_outcome_header_is_no_outcome(recorder: Recorder) -> None:
    recorder.reply(
        Reply(
            status=503,
            headers=[
                ("X-Effectus-Outcome", "permanent_failure"),
                ("X-Effectus-Outcome", "retryable_failure_known_not_committed"),
            ],
        )
    )
    async with executor(destination(recorder.base_url)) as ex:
        result = await ex.call(invocation())
    assert_unknown_after_sending(result)  # neither copy is believed over the other


async def test_2xx_that_names_a_failure_class_is_unknown(recorder: Recorder) -> None:
    recorder.reply(Reply(status=200, headers=[("X-Effectus-Outcome", "permanent_failure")]))
    async with executor(destination(recorder.base_url)) as ex:
        result = await ex.call(invocation())
    assert_unknown_after_sending(result)


async def test_redirect_is_not_followed_and_is_unknown(recorder: Recorder) -> None:
    recorder.reply(Reply(status=302, headers=[("Location", "/elsewhere")]))
    async with executor(destination(recorder.base_url)) as ex:
        result = await ex.call(invocation())
    assert_unknown_after_sending(result)
    assert result.status_code == 302
    assert [got.path for got in recorder.received] == ["/charges/o-1"]


async def test_fencing_acknowledgement_and_retry_after_are_kept_as_evidence(
    recorder: Recorder,
) -> None:
    recorder.reply(
        Reply(headers=[("X-Effectus-Fencing", "acknowledged")]),
        Reply(
            status=429,
            headers=[
                ("Retry-After", "7"),
                ("X-Effectus-Outcome", "retryable_failure_known_not_committed"),
            ],
        ),
        Reply(),
    )
    async with executor(destination(recorder.base_url)) as ex:
        acked, throttled, silent = [await ex.call(invocation()) for _ in range(3)]
    assert acked.fencing_status is FencingStatus.ACKNOWLEDGED
    assert acked.evidence["headers"] == {"X-Effectus-Fencing": "acknowledged"}
    assert throttled.evidence["headers"]["Retry-After"] == "7"
    assert throttled.evidence["retry_after_s"] == 7.0  # what the engine's retry delay reads
    assert silent.fencing_status is FencingStatus.PROPAGATED
    assert isinstance(silent.evidence["elapsed_ms"], int)


async def test_an_answer_naming_another_request_acknowledges_no_fencing_of_this_attempt(
    recorder: Recorder,
) -> None:
    recorder.reply(
        Reply(
            headers=[
                ("X-Effectus-Request-ID", "req-9999"),
                ("X-Effectus-Fencing", "acknowledged"),
            ]
        ),
        Reply(
            headers=[
                ("X-Effectus-Request-ID", "req-0001"),
                ("X-Effectus-Fencing", "acknowledged"),
            ]
        ),
    )
    async with executor(destination(recorder.base_url)) as ex:
        stray, own = [await ex.call(invocation()) for _ in range(2)]
    assert_unknown_after_sending(stray)
    assert stray.evidence["request_id_echo"] == "mismatched"
    assert stray.fencing_status is FencingStatus.PROPAGATED  # sent with grants, nothing more
    assert own.outcome is OutcomeClass.SUCCESS
    assert own.fencing_status is FencingStatus.ACKNOWLEDGED


async def test_2xx_with_non_json_body_is_unknown() -> None:
    async def behaviour(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(response("200 OK", b"hello", "Content-Type: text/plain"))
        await writer.drain()

    result, _ = await call_raw(behaviour)
    assert_unknown_after_sending(result)
    assert result.status_code == 200


async def test_2xx_with_body_over_the_limit_is_unknown() -> None:
    big = b'{"pad":"' + b"x" * 200 + b'"}'

    async def behaviour(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(response("200 OK", big))
        await writer.drain()

    result, _ = await call_raw(behaviour, max_response_bytes=100)
    assert_unknown_after_sending(result)
    assert "max_response_bytes" in (result.error or "")


async def test_chunked_2xx_body_growing_over_the_limit_is_unknown() -> None:
    async def behaviour(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(4):
            writer.write(b"40\r\n" + b" " * 64 + b"\r\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    result, _ = await call_raw(behaviour, max_response_bytes=100)
    assert_unknown_after_sending(result)


async def test_truncated_2xx_body_is_unknown() -> None:
    async def behaviour(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"ok":')
        await writer.drain()

    result, _ = await call_raw(behaviour)
    assert_unknown_after_sending(result)
    assert result.status_code == 200


async def test_malformed_http_response_is_unknown() -> None:
    async def behaviour(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(b"THIS IS NOT HTTP\r\n\r\n")
        await writer.drain()

    result, _ = await call_raw(behaviour)
    assert_unknown_after_sending(result)
    assert result.status_code is None


# --- classification of transport failures ---------------------------------------------------


async def test_connection_refused_is_retryable_not_sent() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # bound but never listening: the kernel answers SYN with RST
    async with executor(destination(f"http://127.0.0.1:{port}")) as ex:
        result = await ex.call(invocation())
    assert_retryable_not_sent(result)
    assert "ECONNREFUSED" in (result.error or "")
    assert result.evidence["connection"] == "new"


async def test_connect_timeout_is_retryable_not_sent() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    filler = socket.create_connection(listener.getsockname())  # fills the accept queue
    try:
        config = destination(
            f"http://127.0.0.1:{listener.getsockname()[1]}", connect_timeout=SHORT_TIMEOUT
        )
        async with executor(config) as ex:
            result = await ex.call(invocation())
    finally:
        filler.close()
        listener.close()
    assert_retryable_not_sent(result)
    # httpx says ConnectTimeout, aiohttp ConnectionTimeoutError: the class is named, not trusted.
    assert "Timeout" in (result.error or "")
    assert "before the request was sent" in (result.error or "")


async def test_unresolvable_host_is_retryable_not_sent() -> None:
    config = destination("http://effectusd-test.invalid", connect_timeout="1s")
    async with executor(config) as ex:
        result = await ex.call(invocation())
    assert_retryable_not_sent(result)


async def test_reset_before_the_request_was_read_is_unknown() -> None:
    async def behaviour(server: RawServer, reader: Any, writer: Any) -> None:
        reset(writer)  # the server cannot prove to us it did not act: the bytes may be in

    result, server = await call_raw(behaviour)
    assert_unknown_after_sending(result)
    assert server.connections == 1


async def test_reset_after_request_was_read_is_unknown() -> None:
    async def behaviour(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        reset(writer)

    result, server = await call_raw(behaviour)
    assert_unknown_after_sending(result)
    assert server.requests and server.requests[0].endswith(ARGS)


async def test_server_that_stalls_past_the_timeout_is_unknown() -> None:
    async def behaviour(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        await server.release.wait()

    result, _ = await call_raw(behaviour, timeout=SHORT_TIMEOUT)
    assert_unknown_after_sending(result)
    assert result.evidence["elapsed_ms"] < 2000


async def test_invocation_timeout_caps_the_destination_timeout() -> None:
    async def behaviour(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        await server.release.wait()

    async with (
        RawServer(behaviour) as server,
        executor(destination(server.base_url, timeout="30s")) as ex,
    ):
        result = await ex.call(invocation(timeout=SHORT))
    assert_unknown_after_sending(result)
    assert result.evidence["elapsed_ms"] < 2000


async def test_slow_trickling_body_is_bounded_by_the_overall_timeout() -> None:
    async def behaviour(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        while not server.release.is_set():
            writer.write(b" ")
            await writer.drain()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.release.wait(), SHORT / 10)

    result, _ = await call_raw(behaviour, timeout=SHORT_TIMEOUT)
    assert_unknown_after_sending(result)
    assert result.evidence["elapsed_ms"] < 2000


# aiohttp on its own re-sends PUT and DELETE once when a pooled connection fails: each case
# runs with a non-idempotent and an idempotent method and checks that one copy arrived.
RESEND_METHODS = pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])


@RESEND_METHODS
async def test_reused_keep_alive_connection_reset_after_reading_is_unknown(method: str) -> None:
    async def behaviour(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(response("200 OK", b"{}"))
        await writer.drain()
        await server.read_request(reader)
        reset(writer)

    async with RawServer(behaviour) as server, executor(destination(server.base_url)) as ex:
        first = await ex.call(invocation(method=method))
        second = await ex.call(invocation(method=method, attempt=4, request_id="req-0002"))
    assert first.outcome is OutcomeClass.SUCCESS
    assert_unknown_after_sending(second)
    assert second.evidence["connection"] == "reused"
    assert server.connections == 1 and len(server.requests) == 2  # never re-sent


@RESEND_METHODS
async def test_reused_keep_alive_connection_reset_mid_request_is_unknown(method: str) -> None:
    async def behaviour(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(response("200 OK", b"{}"))
        await writer.drain()
        await reader.read(1)  # the first byte of the next request has arrived
        reset(writer)

    async with RawServer(behaviour) as server, executor(destination(server.base_url)) as ex:
        await ex.call(invocation(method=method))
        second = await ex.call(invocation(method=method, attempt=4, request_id="req-0002"))
    assert_unknown_after_sending(second)
    assert second.evidence["connection"] == "reused"
    assert server.connections == 1


@RESEND_METHODS
async def test_reused_connection_closed_in_order_after_reading_is_unknown(method: str) -> None:
    async def behaviour(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(response("200 OK", b"{}"))
        await writer.drain()
        await server.read_request(reader)  # then an orderly close (FIN), no answer

    async with RawServer(behaviour) as server, executor(destination(server.base_url)) as ex:
        await ex.call(invocation(method=method))
        second = await ex.call(invocation(method=method, attempt=4, request_id="req-0002"))
    assert_unknown_after_sending(second)
    assert second.evidence["connection"] == "reused"
    assert server.connections == 1 and len(server.requests) == 2  # never re-sent


async def test_idle_connection_closed_by_server_is_replaced_without_a_false_outcome() -> None:
    closed = asyncio.Event()

    async def behaviour(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(response("200 OK", b"{}"))
        await writer.drain()
        if server.connections == 1:
            writer.close()
            await writer.wait_closed()
            closed.set()

    async with RawServer(behaviour) as server, executor(destination(server.base_url)) as ex:
        await ex.call(invocation())
        await closed.wait()
        second = await ex.call(invocation(attempt=4, request_id="req-0002"))
    assert second.outcome is OutcomeClass.SUCCESS
    assert second.evidence["connection"] == "new"
    assert server.connections == 2


async def test_waiting_for_a_pooled_connection_past_the_deadline_is_retryable() -> None:
    async def behaviour(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        await server.release.wait()
        writer.write(response("200 OK", b"{}"))
        await writer.drain()

    # The pool holds a call's connection and a probe's (max_concurrency + probe_concurrency).
    bounds = {"max_concurrency": 1, "probe_concurrency": 1, "timeout": "10s"}
    async with (
        RawServer(behaviour) as server,
        executor(destination(server.base_url, **bounds)) as ex,
    ):
        holders = [
            asyncio.create_task(ex.call(invocation(request_id=f"req-000{i}"))) for i in (1, 3)
        ]
        async with asyncio.timeout(5):
            while len(server.requests) < 2:  # both connections are now busy
                await asyncio.sleep(0.01)
        queued = await ex.call(invocation(timeout=SHORT, request_id="req-0002"))
        server.release.set()
        held = await asyncio.gather(*holders)
    assert_retryable_not_sent(queued)
    assert [result.outcome for result in held] == [OutcomeClass.SUCCESS] * 2
    assert server.connections == 2 and len(server.requests) == 2


@RESEND_METHODS
async def test_pooled_connection_the_server_closed_unnoticed_is_not_written_to(
    method: str,
) -> None:
    async def behaviour(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(response("200 OK", b"{}"))
        await writer.drain()
        await server.read_request(reader)  # whatever still arrives on it is recorded
        writer.write(response("200 OK", b"{}"))
        await writer.drain()

    async with RawServer(behaviour) as server, executor(destination(server.base_url)) as ex:
        await ex.call(invocation(method=method))
        # The server closes its side now, and the client's event loop gets no turn to read
        # the FIN before the next call starts: only a check at reuse time can see it.
        server.writers[0].get_extra_info("socket").shutdown(socket.SHUT_WR)
        second = await ex.call(invocation(method=method, attempt=4, request_id="req-0002"))
    assert second.outcome is OutcomeClass.SUCCESS, second
    assert second.evidence["connection"] == "new"
    assert server.connections == 2 and len(server.requests) == 2


async def test_connections_never_exceed_max_concurrency_plus_probe_concurrency() -> None:
    async def behaviour(server: RawServer, reader: Any, writer: Any) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError):
            while True:
                await server.read_request(reader)
                writer.write(response("200 OK", b"{}"))
                await writer.drain()

    async with (
        RawServer(behaviour) as server,
        executor(destination(server.base_url, max_concurrency=2, probe_concurrency=1)) as ex,
    ):
        results = await asyncio.gather(*(ex.call(invocation()) for _ in range(12)))
    assert {result.outcome for result in results} == {OutcomeClass.SUCCESS}
    assert server.connections <= 3 and len(server.requests) == 12


async def test_literal_characters_in_a_configured_path_are_percent_encoded(
    recorder: Recorder,
) -> None:
    async with executor(destination(recorder.base_url)) as ex:
        result = await ex.call(invocation(path="/pay ments/café/r%2F1?x=1 2"))
    assert result.outcome is OutcomeClass.SUCCESS
    assert recorder.received[0].path == "/pay%20ments/caf%C3%A9/r%2F1?x=1%202"


async def test_gzip_body_is_decoded_before_parsing() -> None:
    async def behaviour(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(response("200 OK", gzip.compress(b'{"ok":true}'), "Content-Encoding: gzip"))
        await writer.drain()

    result, _ = await call_raw(behaviour)
    assert (result.outcome, result.result) == (OutcomeClass.SUCCESS, {"ok": True})


async def test_gzip_body_that_decodes_over_the_limit_is_unknown() -> None:
    bomb = gzip.compress(b'{"pad":"' + b"x" * 1_000_000 + b'"}')  # about 1 kB on the wire

    async def behaviour(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(response("200 OK", bomb, "Content-Encoding: gzip"))
        await writer.drain()

    result, _ = await call_raw(behaviour, max_response_bytes=10_000)
    assert_unknown_after_sending(result)
    assert "max_response_bytes" in (result.error or "")


async def test_deflate_body_is_decoded_before_parsing() -> None:
    raw = response("200 OK", zlib.compress(b'{"ok":1}'), "Content-Encoding: deflate")
    result, _ = await call_raw(answer_with(raw))
    assert (result.outcome, result.result) == (OutcomeClass.SUCCESS, {"ok": 1})


async def test_deflate_without_its_zlib_wrapper_as_some_servers_send_is_decoded() -> None:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    body = packer.compress(b'{"ok":2}') + packer.flush()
    result, _ = await call_raw(answer_with(response("200 OK", body, "Content-Encoding: deflate")))
    assert (result.outcome, result.result) == (OutcomeClass.SUCCESS, {"ok": 2})


async def test_an_empty_body_labelled_gzip_is_an_empty_success() -> None:
    result, _ = await call_raw(answer_with(response("200 OK", b"", "Content-Encoding: gzip")))
    assert (result.outcome, result.result) == (OutcomeClass.SUCCESS, None)


async def test_an_interim_100_continue_is_skipped_for_the_answer_after_it() -> None:
    interim = b"HTTP/1.1 100 Continue\r\nX-Effectus-Outcome: permanent_failure\r\n\r\n"
    result, _ = await call_raw(answer_with(interim + response("200 OK", b'{"ok":2}')))
    assert (result.outcome, result.result) == (OutcomeClass.SUCCESS, {"ok": 2})
    assert result.evidence["headers"] == {}  # the interim answer's headers are not the answer's


async def test_a_body_that_ends_with_the_connection_is_read_to_its_end() -> None:
    async def behaviour(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(b'HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{"ok":3}')
        await writer.drain()
        writer.close()  # no length, no chunks: the close ends the body

    result, _ = await call_raw(behaviour)
    assert (result.outcome, result.result) == (OutcomeClass.SUCCESS, {"ok": 3})
