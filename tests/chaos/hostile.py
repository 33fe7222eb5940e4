"""The chaos suite's hostile destinations: one raw asyncio HTTP server per behaviour, each on
its own 127.0.0.1 port, answering what a store cannot hold or misbehaving on the wire.

    python -m tests.chaos.hostile --listen unstorable:PORT [--listen stray:PORT ...]
        --timeout 1.0 --max-requests 5000 --lifetime 600 --seed 0

Every behaviour also answers properly some of the time (200 {"ok": true}, or a 422 that names
permanent_failure), so hostile sagas also complete, fail and compensate. Only a proper answer
is ever {"ok": true}: the runner checks that no other body became a step's result. The server
stops accepting after --max-requests requests and exits after --lifetime seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import random
import signal
from collections.abc import Awaitable, Callable

BEHAVIOURS = ("unstorable", "bad_outcome", "stray", "slow", "reset", "gzip_bomb")
PROPER = 0.25  # the share of requests answered properly
MAX_RESPONSE_BYTES = 1_048_576  # DestinationConfig.max_response_bytes' default

UNSTORABLE = (
    b'{"v": "a\\u0000b"}',  # NUL: PostgreSQL jsonb cannot hold it
    b'{"v": "\\ud800"}',  # a lone surrogate
    b'{"v": 1e400}',  # past any float
    b'{"v": 9007199254740993}',  # past 2^53
    b'{"v": "\xff\xfe"}',  # not UTF-8
)
# X-Effectus-Outcome values no outcome can be read from; "token" echoes the caller's
# Authorization, which must never reach the store's evidence.
BAD_OUTCOMES = (b"succ\xffess", b"success\x01", b"permanent_failure\x7f", b"token", b"echo")
# "echo": a 200 whose request-ID echo names another request.
ECHO_OTHER = b"X-Effectus-Request-ID: 00000000-0000-4000-8000-000000000000"
STRAY = b'{"stray": true}'


def _response(status: int, body: bytes, *extra: bytes) -> bytes:
    head = [
        f"HTTP/1.1 {status} X".encode(),
        b"Content-Type: application/json",
        f"Content-Length: {len(body)}".encode(),
        *extra,
    ]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def _bomb() -> bytes:
    """A small gzip body that inflates to valid JSON past the executor's response limit."""
    pad = b"0" * (MAX_RESPONSE_BYTES * 8)
    return gzip.compress(b'{"pad": "' + pad + b'"}', compresslevel=9)


class Hostile:
    def __init__(self, timeout: float, max_requests: int) -> None:
        self.timeout, self.left = timeout, max_requests
        self.servers: list[asyncio.Server] = []
        self.bomb = _bomb()
        self.served: dict[str, int] = {}  # hostile (not proper) answers, per behaviour

    def handler(
        self, behaviour: str
    ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    await self.exchange(behaviour, reader, writer)
            except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
                pass
            finally:
                writer.close()

        return connection

    async def exchange(
        self, behaviour: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        self.left -= 1
        if self.left <= 0:
            for server in self.servers:
                server.close()  # bounded: no new connections from here on
        headers = {}
        for line in head.decode("latin-1").split("\r\n")[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        # each behaviour's first answer is hostile, so every run exercises every behaviour
        proper = behaviour in self.served and random.random() < PROPER
        if behaviour == "slow" and not proper and random.random() < 0.5:
            self.served["slow"] = self.served.get("slow", 0) + 1
            await asyncio.sleep(self.timeout + 0.5)  # past the timeout, the body still unread
            proper = True  # then a proper answer, too late for the caller
        await reader.readexactly(int(headers.get("content-length", "0")))
        if not proper or behaviour == "stray":
            self.served[behaviour] = self.served.get(behaviour, 0) + 1
        echo = f"X-Effectus-Request-ID: {headers.get('x-effectus-request-id', '')}".encode()
        ok = _response(200, b'{"ok": true}', echo)
        if proper:
            no = _response(422, b"{}", echo, b"X-Effectus-Outcome: permanent_failure")
            out = ok if random.random() < 0.5 else no
        elif behaviour == "reset":
            writer.transport.abort()  # the request read, then the connection reset
            raise ConnectionError
        elif behaviour == "slow":
            await asyncio.sleep(self.timeout + 0.5)  # the request read, then silence
            out = ok
        elif behaviour == "unstorable":
            out = _response(200, random.choice(UNSTORABLE), echo)
        elif behaviour == "bad_outcome":
            bad = random.choice(BAD_OUTCOMES)
            if bad == b"token":
                bad = headers.get("authorization", "none").encode("latin-1")
            if bad == b"echo":
                out = _response(200, b'{"echo": "another"}', ECHO_OTHER)
            else:
                status = random.choice((200, 422))
                out = _response(status, b"{}", echo, b"X-Effectus-Outcome: " + bad)
        elif behaviour == "gzip_bomb":
            out = _response(200, self.bomb, echo, b"Content-Encoding: gzip")
        else:
            out = ok
        if behaviour == "stray":
            # after any answer, a second, unrequested one in the same write, so it is on the
            # connection before the caller could send another request on it
            out += _response(200, STRAY)
        writer.write(out)
        await writer.drain()


async def main(args: argparse.Namespace) -> None:
    random.seed(args.seed)
    hostile = Hostile(args.timeout, args.max_requests)
    for spec in args.listen:
        behaviour, port = spec.split(":")
        assert behaviour in BEHAVIOURS, behaviour
        server = await asyncio.start_server(hostile.handler(behaviour), "127.0.0.1", int(port))
        hostile.servers.append(server)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    ports = (server.sockets[0].getsockname()[1] for server in hostile.servers)
    print("ready", *ports, flush=True)  # in --listen order: port 0 picks a free one
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), args.lifetime)
    print(json.dumps(hostile.served), flush=True)  # what the runner checks was exercised


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", action="append", required=True, help="behaviour:port")
    parser.add_argument("--timeout", type=float, default=1.0)
    parser.add_argument("--max-requests", type=int, default=5000)
    parser.add_argument("--lifetime", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=0)
    asyncio.run(main(parser.parse_args()))
