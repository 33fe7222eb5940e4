"""Long-lived SQLite use by the daemon: operations run on one connection owned by one worker
thread, so the event loop never blocks on the file. SQLite has one writer at a time; the
daemon's writes are already batched, so one thread loses nothing."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from effectusd.backends.operation import Operation
from effectusd.backends.sqlite.connection import connect
from effectusd.backends.sqlite.runner import run, run_read
from effectusd.backends.statements import Statements

T = TypeVar("T")


class ThreadSession:
    def __init__(self, path: str | Path, statements: Statements) -> None:
        self.path = path
        self.statements = statements
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="effectusd-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._closed = False

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = connect(self.path)
        return self._conn

    async def _in_thread(self, work: Callable[[sqlite3.Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, lambda: work(self._connection()))

    async def write(self, operation: Operation[T]) -> T:
        return await self._in_thread(lambda conn: run(conn, operation, self.statements))

    async def write_single(self, operation: Operation[T]) -> T:
        """SQLite has no round trips to save: a single statement is a write like any other."""
        return await self.write(operation)

    async def read(self, operation: Operation[T]) -> T:
        return await self._in_thread(lambda conn: run_read(conn, operation, self.statements))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        def close_connection() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await asyncio.get_running_loop().run_in_executor(self._thread, close_connection)
        self._thread.shutdown(wait=True)
