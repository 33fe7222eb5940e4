"""A hostile neighbour on the same host, as a process of its own: it holds connections to a
port open, opening each again as soon as the server closes it, some idle and some sending a
header line every 0.2 s and never the blank line that ends them.

``python -m tests.support.neighbour PORT IDLE SLOW`` prints ``ready`` once every connection
has been opened, and holds them until it is terminated."""

from __future__ import annotations

import asyncio
import contextlib
import sys


async def hold(port: int, slow: bool, opened: list[int]) -> None:
    while True:
        writer = None
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            opened[0] += 1
            if slow:
                writer.write(b"GET /x HTTP/1.1\r\nHost: h\r\n")
            while not reader.at_eof():
                if slow:
                    writer.write(b"X-Slow: 1\r\n")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(reader.read(1024), 0.2)
        except OSError:
            pass
        finally:
            if writer is not None:
                writer.close()


async def main(port: int, idle: int, slow: int) -> None:
    opened = [0]
    holders = [asyncio.create_task(hold(port, i >= idle, opened)) for i in range(idle + slow)]
    while opened[0] < idle + slow:
        await asyncio.sleep(0.01)
    print("ready", flush=True)
    await asyncio.gather(*holders)


if __name__ == "__main__":
    asyncio.run(main(*(int(arg) for arg in sys.argv[1:4])))
