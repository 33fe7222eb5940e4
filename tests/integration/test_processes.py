"""`effectusd run --processes N`: real child processes against a real destination and database.

Every wait here is on something observable: a log line a process printed, a request the
destination received, a process exiting. None is a sleep.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest

from effectusd.cli.daemon import child_run_args
from effectusd.dispatcher.processes import Supervisor
from tests.support.destination import HeldUntilMoreThan, Request, Response, running
from tests.support.harness import (
    client_for,
    fetch,
    make_config,
    serial_plan,
    spawn_daemon,
    write_config_file,
)

pytestmark = pytest.mark.postgres

STARTED = re.compile(r"daemon (\S+:(\d+):\S+) started")
WAIT_S = 60.0


class Lines:
    """Every line a process writes to its stderr (and its children, who inherit it)."""

    def __init__(self, stream: IO[bytes] | None) -> None:
        assert stream is not None
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[bytes]) -> None:
        for raw in stream:
            self._queue.put(raw.decode(errors="replace").rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, matches: Callable[[str], bool], count: int) -> list[str]:
        """The first ``count`` lines that match, waiting for them as they come."""
        found = [line for line in self.seen if matches(line)]
        while len(found) < count:
            try:
                line = self._queue.get(timeout=WAIT_S)
            except queue.Empty:
                line = None
            if line is None:
                pytest.fail(f"wanted {count} matching line(s), got {found}; stderr:\n{self.text}")
            self.seen.append(line)
            if matches(line):
                found.append(line)
        return found[:count]

    def rest(self) -> str:
        """Everything until the stream ends (every writer has exited)."""
        while (line := self._queue.get(timeout=WAIT_S)) is not None:
            self.seen.append(line)
        return self.text

    @property
    def text(self) -> str:
        return "\n".join(self.seen)


def spawn_parent(config_file: Path, url: str, *args: str) -> subprocess.Popen[bytes]:
    """`effectusd run ARGS` in a process group of its own, as a shell starts a foreground job
    (so the test can signal the group without signalling itself)."""
    command = [sys.executable, "-m", "effectusd.cli", "--config", str(config_file)]
    return subprocess.Popen(
        [*command, "--database-url", url, "run", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        process_group=0,
    )


def started(line: str) -> bool:
    return STARTED.search(line) is not None


def owner_of(started_line: str) -> str:
    match = STARTED.search(started_line)
    assert match is not None, started_line
    return match.group(1)


def pid_of(started_line: str) -> int:
    return int(owner_of(started_line).split(":")[1])


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_each_child_gets_the_parents_options_and_its_own_http_port() -> None:
    def args(index: int, port: int | None) -> list[str]:
        return child_run_args(
            index, until_idle=True, workers=3, log_format="json", log_level="DEBUG", http_port=port
        )

    assert args(0, 9100) == [
        "--log-level", "DEBUG", "--until-idle", "--workers", "3", "--log-format", "json",
        "--http-port", "9100",
    ]  # fmt: skip
    assert args(2, 9100)[-2:] == ["--http-port", "9102"]
    assert args(2, 0)[-2:] == ["--http-port", "0"]  # any free port, for each of them
    assert "--http-port" not in args(1, None)


def test_two_processes_until_idle_complete_every_saga_with_two_lease_owners(
    store_url: str, tmp_path: Path
) -> None:
    # Each process makes one call at a time (--workers 1), and the first call is held until a
    # second one arrives: that second call can only come from the other process.
    first_waits_for_a_second = HeldUntilMoreThan(1)

    with running(first_waits_for_a_second) as dest:
        config = make_config(
            dest.base_url,
            {"a": {}, "b": {}},
            destinations={"dest": {"base_url": dest.base_url, "timeout": "40s"}},
        )
        client = client_for(config, store_url)
        sagas = [
            client.submit(serial_plan("multi", ["a", "b"]), execution_id=f"m-{i}").saga_id
            for i in range(6)
        ]
        parent = spawn_daemon(
            write_config_file(tmp_path, config), store_url, "--processes", "2", "--until-idle",
            "--workers", "1",
        )  # fmt: skip
        lines = Lines(parent.stderr)
        code = parent.wait(timeout=120)
        output = lines.rest()

    assert code == 0, output
    assert first_waits_for_a_second.exceeded.is_set(), "no call ever ran beside the first"
    states = fetch(store_url, "SELECT saga_id, state FROM effectus_saga_instances")
    assert sorted((row["saga_id"], row["state"]) for row in states) == sorted(
        (saga, "completed") for saga in sagas
    )
    owners = {
        row["lease_owner"]
        for row in fetch(store_url, "SELECT lease_owner FROM effectus_saga_attempts")
    }
    children = {match.group(1) for match in STARTED.finditer(output)}
    assert len(owners) == 2 and owners == children, (owners, output)
    assert str(parent.pid) not in {owner.split(":")[1] for owner in owners}
    assert len(dest.requests) == 12


def test_processes_auto_starts_one_per_cpu_on_postgresql_and_one_on_sqlite(
    store_url: str, tmp_path: Path
) -> None:
    expected = 1 if store_url.startswith("sqlite") else len(os.sched_getaffinity(0))
    with running() as dest:
        config = make_config(dest.base_url, {"a": {}})
        client_for(config, store_url).submit(serial_plan("auto", ["a"]), execution_id="auto-1")
        parent = spawn_daemon(
            write_config_file(tmp_path, config), store_url, "--processes", "auto", "--until-idle"
        )
        lines = Lines(parent.stderr)
        code = parent.wait(timeout=120)
        output = lines.rest()
    assert code == 0, output
    assert len({match.group(1) for match in STARTED.finditer(output)}) == expected, output
    assert len(dest.requests) == 1


def test_processes_takes_a_count_or_auto_and_names_what_is_wrong(db: str, tmp_path: Path) -> None:
    config = write_config_file(tmp_path, make_config("http://127.0.0.1:9", {"a": {}}))
    for wrong, says in (("0", "0 is not in the range 1 to 256"), ("many", "or auto")):
        refused = subprocess.run(
            [sys.executable, "-m", "effectusd.cli", "--config", str(config),
             "--database-url", db, "run", "--processes", wrong],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert refused.returncode == 2, refused.stderr
        assert says in refused.stderr and "--processes" in refused.stderr


def test_sigterm_to_the_parent_drains_every_child_and_exits_zero(db: str, tmp_path: Path) -> None:
    entered = threading.Event()
    release = threading.Event()

    def held(request: Request) -> Response:
        entered.set()
        return Response(200, {"ok": True}, stall=release)

    with running(held) as dest:
        config = make_config(dest.base_url, {"pay": {}})
        saga = client_for(config, db).submit(serial_plan("term", ["pay"]), execution_id="t-1")
        parent = spawn_daemon(write_config_file(tmp_path, config), db, "--processes", "2")
        lines = Lines(parent.stderr)
        try:
            children = lines.wait_for(started, 2)
            assert entered.wait(WAIT_S), lines.text  # one child holds the call in flight

            parent.send_signal(signal.SIGTERM)
            lines.wait_for(lambda line: "SIGTERM: no new claims; draining" in line, 2)
            release.set()  # the call in flight ends while its process drains
            code = parent.wait(timeout=WAIT_S)
        finally:
            release.set()
            if parent.poll() is None:
                parent.kill()
        output = lines.rest()

    assert code == 0, output
    owners = [owner_of(line) for line in children]
    for owner in owners:
        assert f"daemon {owner} stopped" in output
        assert gone(int(owner.split(":")[1]))
    [attempt] = fetch(db, "SELECT outcome, lease_owner FROM effectus_saga_attempts")
    assert attempt["outcome"] == "success" and attempt["lease_owner"] in owners
    view = client_for(config, db).get(saga.saga_id)
    assert view is not None and view.state == "completed"


def test_children_that_cannot_reach_the_database_make_the_parent_fail(tmp_path: Path) -> None:
    config = make_config("http://127.0.0.1:9", {"pay": {}})
    parent = spawn_daemon(
        write_config_file(tmp_path, config),
        "postgresql://postgres@127.0.0.1:1/nowhere",
        "--processes",
        "2",
    )
    _, stderr = parent.communicate(timeout=WAIT_S)
    output = stderr.decode()

    assert parent.returncode == 1, output
    assert "error: cannot connect to the database: " in output
    assert re.search(r"dispatcher process \d \(pid \d+\) failed with exit code 1", output), output


def test_run_on_a_missing_sqlite_file_fails_with_exit_1_naming_it(tmp_path: Path) -> None:
    """The single-process path of the same command: an unavailable store of either kind is
    an operational failure with a message, not a traceback."""
    config = make_config("http://127.0.0.1:9", {"pay": {}})
    missing = tmp_path / "missing.db"
    daemon = spawn_daemon(write_config_file(tmp_path, config), f"sqlite:///{missing}")
    _, stderr = daemon.communicate(timeout=WAIT_S)

    assert daemon.returncode == 1
    assert (
        f"error: cannot connect to the database: SQLite database {missing} does not exist"
        in stderr.decode()
    )
    assert "Traceback" not in stderr.decode()


def test_ctrl_c_to_the_parents_group_reaches_each_child_once(db: str, tmp_path: Path) -> None:
    """A terminal's Ctrl-C signals the whole foreground group. The children have a group of
    their own, so each hears it once, from the parent: a second signal would make a daemon
    exit at once (143) instead of draining."""
    config = make_config("http://127.0.0.1:9", {"pay": {}})
    parent = spawn_parent(write_config_file(tmp_path, config), db, "--processes", "2")
    lines = Lines(parent.stderr)
    try:
        children = lines.wait_for(started, 2)
        pids = [pid_of(line) for line in children]
        assert all(os.getpgid(pid) != os.getpgid(parent.pid) for pid in pids)
        os.killpg(parent.pid, signal.SIGINT)
        code = parent.wait(timeout=WAIT_S)
    finally:
        if parent.poll() is None:
            parent.kill()
    output = lines.rest()

    assert code == 0, output
    assert output.count("SIGTERM: no new claims; draining") == 2, output
    assert "exiting now" not in output
    for line in children:
        assert f"daemon {owner_of(line)} stopped" in output


def test_children_drain_and_exit_when_the_parent_is_killed(db: str, tmp_path: Path) -> None:
    config = make_config("http://127.0.0.1:9", {"pay": {}})
    parent = spawn_parent(write_config_file(tmp_path, config), db, "--processes", "2")
    lines = Lines(parent.stderr)
    children = lines.wait_for(started, 2)
    pids = [pid_of(line) for line in children]
    try:
        parent.kill()  # SIGKILL: the parent forwards nothing; the kernel tells the children
        output = lines.rest()  # ends once every child has closed its stderr, i.e. exited
    finally:
        parent.wait(timeout=WAIT_S)
        for pid in pids:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)

    for line in children:
        assert f"daemon {owner_of(line)} stopped" in output


SUPERVISE = """
import sys
from effectusd.dispatcher.processes import Supervisor
supervisor = Supervisor([[sys.executable, "-c", code] for code in sys.argv[1:]])
code = supervisor.run()
print(*(process.returncode for process in supervisor.processes))
sys.exit(code)
"""


def supervise(*programs: str) -> tuple[int, str]:
    """Run the supervisor in its own process over ``programs`` (Python source, one child
    each): its exit code and the children's return codes it printed."""
    result = subprocess.run(
        [sys.executable, "-c", SUPERVISE, *programs], capture_output=True, timeout=WAIT_S
    )
    return result.returncode, result.stdout.decode().strip()


def test_one_failing_child_stops_the_others_and_sets_the_exit_code(tmp_path: Path) -> None:
    """On two plain Python children: one fails once the other is ready; the other records the
    SIGTERM it is then sent and exits 0."""
    fifo, stopped = tmp_path / "ready", tmp_path / "stopped"
    os.mkfifo(fifo)
    patient = (
        "import signal, sys\n"
        f"def stop(*_): open({str(stopped)!r}, 'w').write('SIGTERM'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        f"open({str(fifo)!r}, 'w').close()\n"
        "while True: signal.pause()\n"
    )
    failing = f"import sys; open({str(fifo)!r}).read(); sys.exit(7)"

    code, returncodes = supervise(patient, failing)

    assert code == 7
    assert returncodes == "0 7"
    assert stopped.read_text() == "SIGTERM"


def test_a_child_killed_by_a_signal_reports_128_plus_the_signal() -> None:
    code, returncodes = supervise("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")

    assert (code, returncodes) == (128 + signal.SIGKILL, f"-{int(signal.SIGKILL)}")


def test_the_supervisor_restores_the_signal_handlers_it_replaced() -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    assert Supervisor([[sys.executable, "-c", "pass"]]).run() == 0

    assert {sig: signal.getsignal(sig) for sig in before} == before
