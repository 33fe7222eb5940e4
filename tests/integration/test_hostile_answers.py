"""Answers a hostile or broken destination may send, against every HTTP executor on real
servers on 127.0.0.1: answers the store could not hold, a stray second response on a kept-alive
connection, compression bombs, and junk in the headers that are kept as evidence. Whatever the
executor returns must be storable (PostgreSQL jsonb/text, SQLite, RFC 8785) and bounded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

from effectusd.core.canonical import canonical_text
from effectusd.core.states import FencingStatus, OutcomeClass
from effectusd.core.transition import Completion
from effectusd.executors.factory import EXECUTOR_CLASSES
from tests.integration.test_http_executor import (
    Chosen,
    RawServer,
    answer_with,
    assert_unknown_after_sending,
    call_raw,
    destination,
    executor,
    invocation,
    response,
)

TOKEN = "tok-Zq8mW3xR7vK1pL"


@pytest.fixture(autouse=True, params=sorted(EXECUTOR_CLASSES))
def transport(request: pytest.FixtureRequest) -> Iterator[str]:
    Chosen.transport = request.param
    yield request.param
    Chosen.transport = "httpx"


def assert_storable(result: Completion) -> str:
    """What the recorder writes, as RFC 8785 text: raises if it could not be canonical, and
    PostgreSQL refuses U+0000 in jsonb and text."""
    record = {"result": result.result, "error": result.error, "evidence": result.evidence}
    text = canonical_text(record)
    assert "\\u0000" not in text and "\x00" not in text
    return text


# --- 1. answers the store cannot hold -------------------------------------------------------

UNSTORABLE = {
    "nul in a string": (b'{"note":"a\\u0000b"}', "U+0000"),
    "nul in a key": (b'{"\\u0000":1}', "U+0000"),
    "lone surrogate": (b'{"note":"\\ud800"}', "lone surrogate"),
    "number past a double": (b'{"amount":1e400}', "Infinity"),
    "integer past 2^53": (b'{"amount":9007199254740993}', "integer outside"),
}


@pytest.mark.parametrize("case", sorted(UNSTORABLE))
async def test_2xx_json_body_the_store_cannot_hold_is_unknown_and_kept_as_size_and_hash(
    case: str,
) -> None:
    body, reason = UNSTORABLE[case]
    result, server = await call_raw(answer_with(response("200 OK", body)))
    assert len(server.requests) == 1
    assert_unknown_after_sending(result)  # it reached the destination: never "not committed"
    assert result.result is None
    assert "cannot be stored" in (result.error or "") and reason in (result.error or "")
    assert result.evidence["body"]["bytes"] == len(body)
    text = assert_storable(result)
    assert "note" not in text and "amount" not in text  # why, never what


async def test_body_that_is_not_utf8_is_unknown_and_storable() -> None:
    result, _ = await call_raw(answer_with(response("200 OK", b'{"note":"\xff\xfe"}')))
    assert_unknown_after_sending(result)
    assert_storable(result)


@pytest.mark.parametrize("status", [b"200 OK", b"503 Service Unavailable"])
@pytest.mark.parametrize("junk", [b"\xff\xfe", b"\x01\x7f"])
async def test_non_utf8_or_control_bytes_in_the_outcome_header_are_not_stored(
    status: bytes, junk: bytes
) -> None:
    head = b"HTTP/1.1 " + status + b"\r\nContent-Length: 2\r\nX-Effectus-Outcome: "
    raw = head + junk + TOKEN.encode() + b"\r\n\r\n{}"
    result, _ = await call_raw(answer_with(raw))
    assert_unknown_after_sending(result)
    text = assert_storable(result)
    assert TOKEN not in text


# --- 4. header junk kept as evidence ----------------------------------------------------------


@pytest.mark.parametrize("status", ["200 OK", "503 Service Unavailable"])
async def test_a_token_echoed_into_evidence_headers_is_stored_as_invalid_with_its_length(
    status: str,
) -> None:
    raw = response(
        status,
        b"{}",
        f"X-Effectus-Outcome: bearer {TOKEN}",
        f"X-Effectus-Fencing: {TOKEN}",
        f"Retry-After: {TOKEN}",
    )
    result, _ = await call_raw(answer_with(raw))
    assert_unknown_after_sending(result)
    text = assert_storable(result)
    assert TOKEN not in text
    headers = result.evidence["headers"]
    assert headers["X-Effectus-Outcome"] == f"(invalid, {len(TOKEN) + 7} characters)"
    assert headers["X-Effectus-Fencing"] == f"(invalid, {len(TOKEN)} characters)"
    assert headers["Retry-After"] == f"(invalid, {len(TOKEN)} characters)"
    assert result.fencing_status is FencingStatus.PROPAGATED  # not acknowledged


async def test_valid_evidence_headers_are_kept_verbatim() -> None:
    raw = response(
        "503 Service Unavailable",
        b"{}",
        "X-Effectus-Outcome: retryable_failure_known_not_committed",
        "X-Effectus-Fencing: Acknowledged",
        "Retry-After: 7",
    )
    result, _ = await call_raw(answer_with(raw))
    assert result.outcome is OutcomeClass.RETRYABLE
    assert result.evidence["headers"] == {
        "X-Effectus-Outcome": "retryable_failure_known_not_committed",
        "X-Effectus-Fencing": "acknowledged",
        "Retry-After": "7",
    }
    assert result.fencing_status is FencingStatus.ACKNOWLEDGED


# --- 2. a stray response on a kept-alive connection -------------------------------------------


def _request_id(request: bytes) -> str:
    for line in request.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"x-effectus-request-id":
            return value.strip().decode()
    raise AssertionError("no request id")


@dataclasses.dataclass
class Stray:
    """Answers each request, then sends a second, unrequested answer on the same connection:
    ``together`` in the same write, else only once the test says the call has finished."""

    echo: bool
    together: bool
    finished: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    sent: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    def answer(self, request_id: str, body_id: str) -> bytes:
        body = f'{{"request_id":"{body_id}"}}'.encode()
        echo = [f"X-Effectus-Request-ID: {request_id}"] if self.echo else []
        return response("200 OK", body, *echo)

    async def behaviour(self, server: RawServer, reader: Any, writer: Any) -> None:
        while True:
            request_id = _request_id(await server.read_request(reader))
            real = self.answer(request_id, request_id)
            # The stray one repeats the answer to this request, as a duplicated reply would.
            stray = self.answer(request_id, "stray-" + request_id)
            if self.together:
                writer.write(real + stray)
                await writer.drain()
                continue
            writer.write(real)
            await writer.drain()
            await self.finished.wait()
            self.finished.clear()
            writer.write(stray)
            await writer.drain()
            self.sent.set()


async def run_stray(stray: Stray, calls: int = 50, **config: Any) -> list[Completion]:
    results = []
    async with (
        RawServer(stray.behaviour) as server,
        executor(destination(server.base_url, **config)) as ex,
    ):
        for n in range(calls):
            results.append(await ex.call(invocation(request_id=f"req-{n:04d}")))
            if not stray.together:
                stray.finished.set()
                await stray.sent.wait()  # the stray answer is on its way before the next call
                stray.sent.clear()
    for n, result in enumerate(results):
        if result.outcome is OutcomeClass.SUCCESS:
            assert result.result == {"request_id": f"req-{n:04d}"}, (n, result)
        assert_storable(result)
    return results


async def test_a_stray_answer_echoing_another_request_id_is_never_taken_as_success() -> None:
    results = await run_stray(Stray(echo=True, together=False))
    for result in results:
        if result.outcome is not OutcomeClass.SUCCESS:
            assert_unknown_after_sending(result)
            assert result.evidence["request_id_echo"] == "mismatched"
        else:
            assert result.evidence["request_id_echo"] == "matched"


async def test_a_stray_answer_sent_with_the_first_is_never_taken_as_the_next_answer() -> None:
    results = await run_stray(Stray(echo=False, together=True))
    # The connection holding the stray bytes is retired, so every call gets its own answer.
    assert [r.outcome for r in results] == [OutcomeClass.SUCCESS] * len(results)


async def test_a_stray_answer_that_arrived_while_idle_is_never_taken_as_the_next_answer() -> None:
    results = await run_stray(Stray(echo=False, together=False))
    assert [r.outcome for r in results] == [OutcomeClass.SUCCESS] * len(results)


async def test_keep_alive_off_gives_every_call_its_own_connection() -> None:
    stray = Stray(echo=False, together=True)
    async with (
        RawServer(stray.behaviour) as server,
        executor(destination(server.base_url, keep_alive=False)) as ex,
    ):
        results = [await ex.call(invocation(request_id=f"req-{n:04d}")) for n in range(20)]
    assert [r.result for r in results] == [{"request_id": f"req-{n:04d}"} for n in range(20)]
    assert server.connections == 20
    assert {r.evidence["connection"] for r in results} == {"new"}


async def test_an_answer_echoing_this_request_id_is_success() -> None:
    raw = response("200 OK", b'{"ok":true}', "X-Effectus-Request-ID: req-0001")
    result, _ = await call_raw(answer_with(raw))
    assert (result.outcome, result.result) == (OutcomeClass.SUCCESS, {"ok": True})
    assert result.evidence["request_id_echo"] == "matched"


async def test_a_retryable_answer_echoing_another_request_is_unknown_not_retryable() -> None:
    raw = response(
        "503 Service Unavailable",
        b"{}",
        "X-Effectus-Outcome: retryable_failure_known_not_committed",
        "X-Effectus-Request-ID: req-other",
    )
    result, _ = await call_raw(answer_with(raw))
    assert_unknown_after_sending(result)
    assert "req-other" not in assert_storable(result)


# --- 3. compression bombs ------------------------------------------------------------------


async def test_gzip_bomb_is_unknown_without_ever_holding_the_inflated_body() -> None:
    bomb = gzip.compress(b"\x00" * 50_000_000)  # about 50 kB on the wire
    assert len(bomb) < 100_000
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        result, _ = await call_raw(
            answer_with(response("200 OK", bomb, "Content-Encoding: gzip")),
            max_response_bytes=100_000,
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert_unknown_after_sending(result)
    assert "max_response_bytes" in (result.error or "")
    assert peak < 8_000_000, peak  # the inflated body is 50 MB; only ~the limit may be held


async def test_gzip_twice_is_decoded_twice_or_refused(transport: str) -> None:
    body = gzip.compress(gzip.compress(b'{"ok":true}'))
    raw = response("200 OK", body, "Content-Encoding: gzip, gzip")
    result, _ = await call_raw(answer_with(raw))
    if transport == "aiohttp":  # aiohttp decodes one layer: the rest is not JSON
        assert_unknown_after_sending(result)
    else:
        assert (result.outcome, result.result) == (OutcomeClass.SUCCESS, {"ok": True})


async def test_truncated_gzip_body_is_unknown() -> None:
    body = gzip.compress(b'{"ok":true,"pad":"' + b"x" * 1000 + b'"}')[:-12]
    result, _ = await call_raw(answer_with(response("200 OK", body, "Content-Encoding: gzip")))
    assert_unknown_after_sending(result)
    assert_storable(result)
