"""The bench's no-op HTTP sink: answers every request 200 {} as fast as asyncio can."""

from __future__ import annotations

import asyncio
from typing import Any

_REPLY = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
    b"Connection: keep-alive\r\n\r\n{}"
)


class _NoopProtocol(asyncio.Protocol):
    """Answers every request with 200 {} as fast as asyncio can (keep-alive)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            length = 0
            for line in self.buffer[:head_end].split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            total = head_end + 4 + length
            if len(self.buffer) < total:
                return
            self.buffer = self.buffer[total:]
            self.transport.write(_REPLY)


def serve_noop(port: int, ready: Any) -> None:
    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_NoopProtocol, "127.0.0.1", port)
        ready.set()
        async with server:
            await server.serve_forever()

    asyncio.run(main())
