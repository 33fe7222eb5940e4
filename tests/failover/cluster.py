"""A PostgreSQL primary and a streaming standby of its own, built from the installed binaries
(initdb, pg_basebackup), for failover tests: promote the standby, stop the old primary.

Runs the servers as the ``postgres`` system user when the tests run as root (PostgreSQL refuses
to run as root). Ports come from 55400-55499 on 127.0.0.1, each held under a lock file for the
pair's life (test workers build pairs at once, and a standby binds its port long after it was
chosen); data lives in a temporary folder removed on exit. Trust authentication, loopback
only: a test fixture, nothing more.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import psycopg

BIN = Path(os.environ.get("EFFECTUSD_PG_BIN", "/usr/lib/postgresql/15/bin"))
PORTS = range(55400, 55500)
STANDBY_NAME = "effectusd_standby"
START_TIMEOUT_S = 60.0


def available() -> str | None:
    """Why a cluster cannot be built here, or None."""
    if not (BIN / "initdb").exists():
        return f"no PostgreSQL binaries in {BIN}"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run PostgreSQL as"
    return None


PORT_LOCKS = Path(tempfile.gettempdir()) / "effectusd-failover-ports"


def _reserve_ports(count: int) -> tuple[list[int], list[IO[bytes]]]:
    """Ports of PORTS that no other pair holds (an exclusive lock on the port's file, kept open
    until the pair closes) and nobody listens on now."""
    PORT_LOCKS.mkdir(mode=0o777, exist_ok=True)
    ports: list[int] = []
    held: list[IO[bytes]] = []
    start = os.getpid() % len(PORTS)
    for offset in range(len(PORTS)):
        port = PORTS[(start + offset) % len(PORTS)]
        lock = (PORT_LOCKS / f"{port}.lock").open("ab")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                lock.close()
                continue
        ports.append(port)
        held.append(lock)
        if len(ports) == count:
            return ports, held
    for lock in held:
        lock.close()
    raise RuntimeError("no free port in 55400-55499")


class Pair:
    """A primary streaming to one standby; synchronous or asynchronous replication."""

    def __init__(self, root: Path, synchronous: bool) -> None:
        self.root = root
        self.synchronous = synchronous
        (self.primary_port, self.standby_port), self.port_locks = _reserve_ports(2)
        self.primary = root / "primary"
        self.standby = root / "standby"
        self.running: list[Path] = []
        self.stalled_sender: int | None = None

    def _run(self, *command: str | Path) -> str:
        args = [str(part) for part in command]
        if os.geteuid() == 0:
            args = ["runuser", "-u", "postgres", "--", *args]
        done = subprocess.run(args, check=True, capture_output=True, text=True, cwd=self.root)
        return done.stdout

    def admin_url(self, port: int, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{port}/{dbname}"

    def url(self, dbname: str) -> str:
        """Both hosts, the way an application names a database with a standby."""
        return (
            f"postgresql://postgres@127.0.0.1:{self.primary_port},127.0.0.1:{self.standby_port}"
            f"/{dbname}?connect_timeout=2"
        )

    def build(self) -> None:
        self._run(BIN / "initdb", "-D", self.primary, "-U", "postgres", "--auth=trust", "-N")
        settings = [
            f"port = {self.primary_port}",
            "listen_addresses = '127.0.0.1'",
            f"unix_socket_directories = '{self.root}'",
            "wal_level = replica",
            "max_wal_senders = 4",
            "fsync = off",  # a process crash keeps the page cache: this tests failover, not disks
            "max_connections = 60",
        ]
        if self.synchronous:
            settings.append(f"synchronous_standby_names = '{STANDBY_NAME}'")
        with (self.primary / "postgresql.conf").open("a") as conf:
            conf.write("\n".join(settings) + "\n")
        with (self.primary / "pg_hba.conf").open("a") as hba:
            hba.write("host replication all 127.0.0.1/32 trust\n")
        self.start(self.primary)
        self._run(
            BIN / "pg_basebackup",
            *("-h", "127.0.0.1", "-p", str(self.primary_port), "-U", "postgres"),
            *("-D", self.standby, "-X", "stream"),
        )
        (self.standby / "standby.signal").touch()
        with (self.standby / "postgresql.auto.conf").open("a") as conf:
            conf.write(
                f"port = {self.standby_port}\n"
                f"primary_conninfo = 'host=127.0.0.1 port={self.primary_port} user=postgres "
                f"application_name={STANDBY_NAME}'\n"
                # once promoted it is alone: waiting for a synchronous standby would stop it
                "synchronous_standby_names = ''\n"
            )
        self.start(self.standby)
        self.wait_streaming()

    def start(self, data: Path) -> None:
        log = data.with_suffix(".log")
        try:
            self._run(BIN / "pg_ctl", "-D", data, "-l", log, "-w", "start")
        except subprocess.CalledProcessError as failed:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
            raise RuntimeError(f"{data.name} did not start; its log ends:\n{tail}") from failed
        self.running.append(data)

    def stop(self, data: Path, mode: str = "fast") -> None:
        if data in self.running:
            self._run(BIN / "pg_ctl", "-D", data, "-m", mode, "-w", "stop")
            self.running.remove(data)

    def wait_streaming(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        wanted = "sync" if self.synchronous else "async"
        with psycopg.connect(self.admin_url(self.primary_port), autocommit=True) as conn:
            while True:
                row = conn.execute(
                    "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                    (STANDBY_NAME,),
                ).fetchone()
                if row is not None and row[0] == wanted:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the standby is not streaming ({wanted}) in time")
                time.sleep(0.1)

    def wait_replayed(self) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        with psycopg.connect(self.admin_url(self.primary_port), autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        with psycopg.connect(self.admin_url(self.standby_port), autocommit=True) as conn:
            while not conn.execute(
                "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (row[0],)
            ).fetchone()[0]:  # type: ignore[index]
                if time.monotonic() > deadline:
                    raise TimeoutError("the standby did not catch up in time")
                time.sleep(0.05)

    def create_database(self, name: str) -> None:
        with psycopg.connect(self.admin_url(self.primary_port), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')

    def stall_replication(self) -> None:
        """The primary sends the standby nothing more (its WAL sender stopped): what it commits
        from now on is what an asynchronous failover loses."""
        with psycopg.connect(self.admin_url(self.primary_port), autocommit=True) as conn:
            row = conn.execute(
                "SELECT pid FROM pg_stat_replication WHERE application_name = %s",
                (STANDBY_NAME,),
            ).fetchone()
        assert row is not None, "the primary has no WAL sender"
        self.stalled_sender = int(row[0])
        os.kill(self.stalled_sender, signal.SIGSTOP)

    def fail_over(self) -> None:
        """The primary dies at once (SIGKILL: no shutdown, nothing more sent; a stalled WAL
        sender dies with what it held) and the standby is promoted to a new timeline."""
        postmaster = int((self.primary / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGKILL)
        if self.stalled_sender is not None:
            os.kill(self.stalled_sender, signal.SIGKILL)
            os.kill(self.stalled_sender, signal.SIGCONT)
        self.running.remove(self.primary)  # its backends exit on their postmaster's death
        self._run(BIN / "pg_ctl", "-D", self.standby, "-w", "promote")

    def close(self) -> None:
        for data in list(self.running):
            try:
                self.stop(data, "immediate")
            except subprocess.CalledProcessError:
                self.running.remove(data)
        for lock in self.port_locks:
            lock.close()


@contextmanager
def pair(synchronous: bool) -> Iterator[Pair]:
    root = Path(tempfile.mkdtemp(prefix="effectusd-failover-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    cluster = Pair(root, synchronous)
    try:
        cluster.build()
        yield cluster
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)
