"""Run blocking SQLite work from async code without blocking the event loop.

    async with SqlitePool("sqlite:///shop.db", size=4) as pool:
        reply = await pool.run(lambda conn: handle_sqlite(conn, request, charge))

A fixed set of connections and as many worker threads of the pool's own (the loop's default
executor stays free for everything else). A connection goes back to the pool only when the
thread using it has finished, even if the awaiting task was cancelled meanwhile, so no two
threads ever use one connection at once.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import TypeVar

from effectusd.backends import sqlite as backend
from effectusd.backends.connections import SqliteConnection
from effectusd.destination.sqlite import DEFAULT_BUSY_TIMEOUT, connect_sqlite, sqlite_path

T = TypeVar("T")


class SqlitePoolTimeout(TimeoutError):
    """No connection became free in time; nothing was done."""


class SqlitePool:
    def __init__(
        self,
        database: str | os.PathLike[str],
        *,
        size: int = 4,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        acquire_timeout: float = 30.0,
    ) -> None:
        """``database``: a ``sqlite:///`` URL or a file path. Connections open lazily, each in
        the worker thread that first needs it, with ``connect_sqlite(database, busy_timeout)``.
        """
        if size < 1:
            raise ValueError("size: a SQLite pool needs at least one connection")
        # Absolute now, so every connection opens the same file whatever the cwd is later.
        self.path = sqlite_path(database).absolute()
        self.size = size
        self.busy_timeout = busy_timeout
        self.acquire_timeout = acquire_timeout
        self._executor: ThreadPoolExecutor | None = None
        # None is a slot whose connection is not open yet (or was thrown away).
        self._free: asyncio.Queue[SqliteConnection | None] | None = None
        self._opened: list[SqliteConnection] = []
        self._opened_lock = threading.Lock()

    async def open(self) -> None:
        if self._executor is not None:
            raise RuntimeError("this SqlitePool is already open")
        self._executor = ThreadPoolExecutor(self.size, thread_name_prefix="effectus-sqlite")
        self._free = asyncio.Queue()
        for _ in range(self.size):
            self._free.put_nowait(None)

    async def close(self) -> None:
        """Wait for running work to finish, then close every connection."""
        executor, self._executor = self._executor, None
        if executor is None:
            return
        await asyncio.to_thread(executor.shutdown, wait=True)
        with self._opened_lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()  # no worker is left, so no thread is using it

    async def __aenter__(self) -> SqlitePool:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def run(self, work: Callable[[SqliteConnection], T]) -> T:
        """``work(conn)`` in a worker thread, on a connection no one else is using; returns
        what it returns. Raises SqlitePoolTimeout if no connection is free in time."""
        executor, free = self._executor, self._free
        if executor is None or free is None:
            raise RuntimeError("SqlitePool.run: the pool is not open (use `async with`)")
        try:
            slot = await asyncio.wait_for(free.get(), self.acquire_timeout)
        except TimeoutError:
            raise SqlitePoolTimeout(
                f"no SQLite connection free within {self.acquire_timeout} s"
            ) from None
        loop = asyncio.get_running_loop()

        def give_back(conn: SqliteConnection | None) -> None:
            loop.call_soon_threadsafe(free.put_nowait, conn)  # asyncio.Queue is not thread-safe

        return await loop.run_in_executor(executor, self._work_on, slot, work, give_back)

    def _work_on(
        self,
        slot: SqliteConnection | None,
        work: Callable[[SqliteConnection], T],
        give_back: Callable[[SqliteConnection | None], None],
    ) -> T:
        """In a worker thread: open the slot's connection if needed, run ``work``, and give the
        slot back only now that no thread uses it (the awaiting task may be long cancelled)."""
        conn = slot
        try:
            if conn is None:
                conn = connect_sqlite(self.path, busy_timeout=self.busy_timeout)
                with self._opened_lock:
                    self._opened.append(conn)
            return work(conn)
        finally:
            give_back(self._reusable(conn))

    def _reusable(self, conn: SqliteConnection | None) -> SqliteConnection | None:
        """``conn`` if the next user may have it, else None (its slot reopens on next use)."""
        if conn is None or not conn.in_transaction:
            return conn
        # Work that left a transaction open would hand its locks and writes to the next user.
        try:
            conn.execute("ROLLBACK")
        except backend.Error:
            with self._opened_lock:
                self._opened.remove(conn)
            conn.close()
            return None
        return conn
