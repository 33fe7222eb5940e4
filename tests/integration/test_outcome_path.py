"""The outcome's path, measured: the effectusd code a warm mid-chain success runs from its
classified answer to the commit of the record transaction that settles it (docs/design.md
section 7, "The outcome's path").

The window opens where the executor's ``call`` hands the Completion back to
``Pipeline.call`` and closes where the store's ``record`` returns to the recorder (its
transaction committed): two test-only wrappers on the executor and the store instances, no
hook in the daemon. In between, ``sys.setprofile`` sees every function the event loop's
thread enters, and ``threading.setprofile`` the same on the SQLite store's worker thread,
which runs the record's transaction. Counted: each code object under the ``effectusd``
package entered by a ``call`` event (a function, a method, a lambda, a comprehension or a
generator expression; a coroutine or generator resumed after an await counts as entered, for
its code runs again), by (module, qualified name, first line); and the modules they are in.

Deterministic by construction rather than by filtering: a profile hook sees every task on the
loop, so nothing but the measured outcome runs in the window. The daemon is the real one
(store, executor, capacity, pipeline and its recorder's loop as ``Daemon.run`` builds them)
with its claim loop replaced by the test's own and no reclaimer, sampler or listener: the
test claims between outcomes, never while the window is open, and submits the measured saga
only once the warm-up saga is through. The window then holds the call's task handing its
completion over (and the batch task awaiting it) and the recorder's round that writes it.
Filtering by task instead would miss the SQLite worker thread, where no task is current. A
warm-up saga of the same plan runs the path first (its plan loaded and cached by the store,
its statements' texts, the claim in the record); psycopg's and the standard library's code is
not counted, so whether a statement is prepared yet changes nothing here. The measured success
is the second saga's second step, claimed in the record of the first on PostgreSQL, by the
claim on SQLite, as in the daemon.

``python -m tests.integration.test_outcome_path`` prints the functions entered on each store
(a PostgreSQL test database is created and dropped)."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, NamedTuple

import effectusd
from effectusd.config import Config
from effectusd.core.transition import Completion
from effectusd.dispatcher.daemon import Daemon
from effectusd.dispatcher.loops import Loop
from effectusd.dispatcher.pipeline import Pipeline
from effectusd.executors.protocol import Invocation
from effectusd.store.dispatch import ClaimSlots, DispatchStore, RecordReport
from tests.support import backends
from tests.support.destination import running
from tests.support.harness import client_for, make_config, serial_plan


class Budget(NamedTuple):
    modules: int
    functions: int


# What a warm mid-chain success may enter, per store; the test fails past it. Issue 47's
# items 1-3 bring it down to 20 modules and 50 functions. docs/design.md section 7 quotes it
# (test_the_design_quotes_the_paths_budget): change both together.
PATH_BUDGET = {
    "postgres": Budget(modules=32, functions=102),
    "sqlite": Budget(modules=32, functions=97),
}

STEPS = 5  # per saga: the warm-up runs each statement of the path more than once
MEASURED_STEP = "s2"  # of the second saga: one step before it, one after it
WAIT_S = 60.0

PACKAGE = str(Path(effectusd.__file__).parent.parent)  # the folder effectusd/ is in


class Function(NamedTuple):
    module: str
    qualname: str
    line: int


def function_of(code: CodeType) -> Function:
    relative = Path(code.co_filename).relative_to(PACKAGE).with_suffix("")
    return Function(".".join(relative.parts), code.co_qualname, code.co_firstlineno)


class Entered:
    """The profile function: while ``open``, the effectusd code objects any thread entered."""

    def __init__(self) -> None:
        self.prefix = str(Path(effectusd.__file__).parent) + "/"
        self.open = False
        self.codes: set[CodeType] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and self.open and frame.f_code.co_filename.startswith(self.prefix):
            self.codes.add(frame.f_code)

    def start(self) -> None:
        """Open, from the caller's caller on: the functions on the stack (Pipeline.call)
        go on running in the window, entered before it."""
        self.open = True
        frame: FrameType | None = sys._getframe(2)
        while frame is not None:
            self(frame, "call", None)
            frame = frame.f_back
        sys.setprofile(self)

    def stop(self) -> None:
        sys.setprofile(None)
        self.open = False

    def functions(self) -> list[Function]:
        return sorted({function_of(code) for code in self.codes})


@dataclass
class Measured:
    """What one measured outcome entered."""

    store: str
    functions: list[Function]
    modules: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.modules = sorted({f.module for f in self.functions})

    def counts(self) -> Budget:
        return Budget(len(self.modules), len(self.functions))

    def report(self) -> str:
        lines = [
            f"{self.store}: {len(self.modules)} modules, {len(self.functions)} functions "
            "from the classified answer to the record's commit"
        ]
        for module in self.modules:
            names = [_name(f) for f in self.functions if f.module == module]
            lines.append(f"  {module} ({len(names)}): {', '.join(names)}")
        return "\n".join(lines)


def _name(function: Function) -> str:
    """A lambda's or a comprehension's name with its line: a function may have several."""
    return f"{function.qualname}:{function.line}" if "<" in function.qualname else function.qualname


class Window:
    """Opens the profile when the measured invocation's completion is handed back, closes it
    when the record that settles that completion returns."""

    def __init__(self, entered: Entered, saga_id: str | None = None) -> None:
        self.entered = entered
        self.saga_id = saga_id  # set once the measured saga is submitted
        self.completion: Completion | None = None
        self.report: RecordReport | None = None
        self.closed = asyncio.Event()

    def wrap(self, pipeline: Pipeline) -> None:
        [executor] = pipeline.executors.values()
        store = pipeline.store
        call, record = executor.call, store.record

        async def measured_call(invocation: Invocation) -> Completion:
            completion = await call(invocation)
            if (invocation.saga_id, invocation.effect_id) == (self.saga_id, MEASURED_STEP):
                self.completion = completion
                self.entered.start()
            return completion

        async def measured_record(
            completions: Sequence[Completion], slots: ClaimSlots | None = None
        ) -> RecordReport:
            report = await record(completions, slots)
            if any(c is self.completion for c in completions) and self.entered.open:
                self.entered.stop()
                self.report = report
                self.closed.set()
            return report

        executor.call = measured_call  # type: ignore[method-assign]
        store.record = measured_record  # type: ignore[method-assign]


Script = Callable[[Pipeline], Awaitable[None]]


class ClaimedByTheTest(Daemon):
    """``Daemon.run`` whole, but for its loops: the recorder's alone, and the test's
    ``script`` where the claim loop would be."""

    def __init__(self, config: Config, url: str, script: Script) -> None:
        super().__init__(config, url)
        self.script = script

    def _loops(self, pipeline: Pipeline, store: DispatchStore) -> list[Loop]:
        return [loop for loop in super()._loops(pipeline, store) if loop.name == "recorder"]

    async def _claim_until_stopped(
        self, pipeline: Pipeline, store: DispatchStore, until_idle: bool
    ) -> None:
        # A task of its own: the script's waits resume its task, and so would every frame
        # the task is in (this one's caller, Daemon.run) in the window.
        await asyncio.create_task(self.script(pipeline))


async def claim_until_through(pipeline: Pipeline, window: Window) -> None:
    """Claim as the claim loop would, until nothing is left to call or record; never while
    the window is open (only test code runs here then)."""
    async with asyncio.timeout(WAIT_S):
        while True:
            if window.entered.open:
                await window.closed.wait()
            elif pipeline.idle:
                if not await pipeline.claim_once():
                    return
            else:
                await asyncio.sleep(0.005)


async def measure(url: str) -> Measured:
    """One warm mid-chain success on the store at ``url``, measured."""
    entered = Entered()
    with running() as dest:
        config = make_config(dest.base_url, {"work": {}})
        client = client_for(config, url)
        plan = serial_plan("path", ["work"] * STEPS)
        window = Window(entered)
        sagas: list[str] = []

        async def script(pipeline: Pipeline) -> None:
            window.wrap(pipeline)
            for execution_id in ("warm-up", "measured"):
                sagas.append(client.submit(plan, execution_id=execution_id).saga_id)
                window.saga_id = sagas[-1] if execution_id == "measured" else None
                await claim_until_through(pipeline, window)

        threading.setprofile(entered)  # the SQLite store's worker thread, started by the store
        try:
            await asyncio.wait_for(ClaimedByTheTest(config, url, script).run(), WAIT_S)
        finally:
            threading.setprofile(None)  # type: ignore[arg-type]
        for saga in sagas:
            view = client.get(saga)
            assert view is not None and view.state == "completed", saga
    assert window.closed.is_set(), "the measured outcome was never recorded"
    assert window.report is not None and window.report.applied == 1
    assert [row["effect_id"] for _, _, row in window.report.transitions] == [MEASURED_STEP]
    return Measured("sqlite" if backends.is_sqlite(url) else "postgres", entered.functions())


# Entered by any path: the call's task handing over, the recorder's round, the engine's
# decision inside the record transaction (on SQLite in the store's worker thread). A count
# without them measured a window that missed part of the path.
ANCHORS = (
    "effectusd.dispatcher.pipeline",
    "effectusd.dispatcher.recorder",
    "effectusd.core.engine",
)


async def test_a_warm_mid_chain_success_stays_within_the_paths_budget(store_url: str) -> None:
    path = await measure(store_url)
    missed = sorted(set(ANCHORS) - set(path.modules))
    assert not missed, f"the window missed part of the path ({missed}):\n{path.report()}"
    budget = PATH_BUDGET[path.store]
    modules, functions = path.counts()
    assert modules <= budget.modules and functions <= budget.functions, (
        f"the outcome's path is over its budget of {budget.modules} modules, "
        f"{budget.functions} functions:\n{path.report()}"
    )


def test_the_design_quotes_the_paths_budget() -> None:
    """docs/design.md gives the path's length as this test measures it, not as a drawing
    counts it: the budget and the figures quoted there move together."""
    pg, lite = PATH_BUDGET["postgres"], PATH_BUDGET["sqlite"]
    quoted = (
        f"**{pg.modules} effectusd modules and {pg.functions} functions** on PostgreSQL and "
        f"**{lite.modules} modules and {lite.functions} functions** on SQLite"
    )
    design = " ".join((Path(PACKAGE) / "docs" / "design.md").read_text().split())
    assert quoted in design, f"docs/design.md section 7 should quote {PATH_BUDGET}"


async def _main() -> None:
    import tempfile

    import psycopg

    from tests.conftest import create_database, drop_database, migrated_sqlite

    url = create_database("effectusd_path")
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            backends.migrate(conn)
        print((await measure(url)).report())
    finally:
        drop_database(url)
    with tempfile.TemporaryDirectory() as folder:
        print((await measure(migrated_sqlite(Path(folder)))).report())


if __name__ == "__main__":
    asyncio.run(_main())
