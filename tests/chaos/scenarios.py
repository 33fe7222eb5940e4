"""The chaos scenarios (the short list CI runs, the long one `make chaos` runs) and what a
run reports."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from effectusd.faults import POINTS
from tests.chaos.hostile import BEHAVIOURS

# Every chaos daemon's [dispatcher] concurrency: the calls one holds at once.
DAEMON_CONCURRENCY = 32


@dataclass
class Scenario:
    name: str
    sagas: int = 40
    steps: int = 3
    delivery: str = "at_least_once"
    # the destination: kit (honours the contract), plain (the control), or lookup (plain, but
    # honouring deadlines and answering a lookup: tests/chaos/probes.py)
    mode: str = "kit"
    daemons: int = 1
    faults: tuple[str, ...] = ()  # fault points the daemons die at, chosen at random
    external_kills: int = 0  # SIGKILLs from outside, at random moments
    stall_after_commit: float = 0.0
    reset_after_commit: float = 0.0
    restart_postgres: bool = False
    pause_daemon: bool = False  # SIGSTOP one daemon past its leases, then SIGCONT
    fail_every: int = 4  # every Nth saga's last step fails permanently (compensation)
    timeout_s: float = 240.0
    expect_duplicates: bool = False  # the control: this scenario must show duplicates
    store: str = "postgres"  # the daemons' store: postgres, or sqlite (one file, one host)
    healthy: int = 1  # kit destinations, each its own process
    # hostile.py behaviours, one destination each; with any, half the sagas are hostile
    hostile: tuple[str, ...] = ()
    fan_out: bool = False  # parallel steps: tests/chaos/fan_out.py's plans and checks
    # PostgreSQL fails over mid-drain (tests/failover): "synchronous" or "asynchronous"
    # replication; the plans take a fenced step and an at_most_once one
    failover: str = ""
    # The kit keeps answers this many seconds (0: its default) and its ledger is pruned all
    # through the run while an operator retries blocked sagas (tests/chaos/retention.py)
    retention: float = 0.0
    withhold_issued_at: bool = False  # that row's control: the kit never sees the issue time
    # Verbs probe what became of blocked keys (tests/chaos/probes.py); the drive and the
    # settling daemon wait until no blocked dispatch has a probe to come. Mode lookup: always.
    probes: bool = False
    # The dispatcher's lease margin and each kit destination's max_concurrency (0: 16, or 4
    # in a failover row). A margin of 3 s fits two of the kit's 1 s calls with one to spare:
    # next steps then wait in the daemon for a full destination's slot (docs/design.md
    # section 7, step 5); with 1 s none do.
    lease_margin: float = 1.0
    max_concurrency: int = 0
    # Several stores ([database.stores]), each daemon serving every one; each store runs
    # ``sagas`` sagas under the same execution ids (tests/chaos/stores.py)
    stores: int = 1


@dataclass
class Report:
    scenario: str
    sagas: int = 0
    kills: int = 0
    restarts: int = 0
    duplicates: int = 0
    lost: int = 0
    states: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0
    details: dict[str, object] = field(default_factory=dict)  # a scenario's own figures

    @property
    def blocked(self) -> dict[str, int]:
        return {s: n for s, n in self.states.items() if s.startswith("blocked_")}

    def blocked_cell(self) -> str:
        """The blocked states' counts and, of an at_most_once row that has some, how many a
        daemon's death blocked, per death."""
        cell = ", ".join(f"{k} {n}" for k, n in sorted(self.blocked.items()))
        if not cell:
            return "-"
        if "blocked_by_deaths" in self.details:
            by_deaths = self.details["blocked_by_deaths"]
            cell += f" ({by_deaths} by deaths, {self.details['blocked_per_death']} per death)"
        return cell


def format_table(reports: list[Report]) -> str:
    head = (
        "| scenario | sagas | kills | restarts | duplicates | lost | blocked | ok |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    rows = [
        f"| {r.scenario} | {r.sagas} | {r.kills} | {r.restarts} | {r.duplicates} | {r.lost} | "
        f"{r.blocked_cell()} | {'yes' if not r.violations else 'NO'} |"
        for r in reports
    ]
    return "\n".join([head, *rows])


def ledger_pruned(sagas: int, kills: int) -> list[Scenario]:
    """The retention row and its control, at a size."""
    return [
        Scenario(
            name,
            sagas=sagas,
            daemons=2,
            healthy=3,
            external_kills=kills,  # kill -9 at random moments, in-flight calls left uncertain
            stall_after_commit=0.1,
            reset_after_commit=0.1,
            retention=20.0,  # past the daemons' own retries, short of the operator's
            withhold_issued_at=control,
            expect_duplicates=control,
            timeout_s=120 if sagas < 100 else 900,
        )
        for name, control in (
            ("kit ledger pruned mid-run, operator retries old blocked dispatches", False),
            ("control: the same, the key's issue time withheld from the kit", True),
        )
    ]


# The at_most_once row through the kit, its verbs probing the kit's ledger (long run only).
# A stored refusal is probed 422 "refused", not committed: the retry under the key gets it
# replayed (tests/integration/test_probes_kit.py).
KIT_PROBES = Scenario(
    "at_most_once, kit, probes",
    sagas=120,
    delivery="at_most_once",
    faults=tuple(sorted(POINTS)),
    stall_after_commit=0.1,
    reset_after_commit=0.1,
    probes=True,
    timeout_s=900,
)

SHORT = [
    *(Scenario(f"kill at {point}", faults=(point,)) for point in sorted(POINTS)),
    Scenario(
        "three daemons racing, random kills",
        sagas=150,
        daemons=3,
        faults=tuple(sorted(POINTS)),
        external_kills=6,
    ),
    Scenario("commit then stall or reset", stall_after_commit=0.1, reset_after_commit=0.1),
    # Next steps born claimed while their destination is full wait in the daemon for its
    # slot, written ahead: daemons dying at every point, with calls in flight and claims
    # waiting, leave attempts that may have been sent, retried under the same key.
    Scenario(
        "next steps waiting for a full destination's slot, kills at every point",
        daemons=2,
        faults=tuple(sorted(POINTS)),
        external_kills=4,
        stall_after_commit=0.05,
        reset_after_commit=0.05,
        lease_margin=3.0,
        max_concurrency=2,
    ),
    Scenario("postgres restarted mid-run", sagas=60, daemons=2, restart_postgres=True),
    Scenario("paused daemon wakes after reclaim", sagas=40, daemons=2, pause_daemon=True),
    Scenario(
        "at_most_once, plain destination",
        delivery="at_most_once",
        mode="plain",
        faults=tuple(sorted(POINTS)),
        stall_after_commit=0.1,
        reset_after_commit=0.1,
    ),
    Scenario(
        "control: at_least_once, plain destination",
        mode="plain",
        stall_after_commit=0.15,
        reset_after_commit=0.15,
        expect_duplicates=True,
    ),
    # The same invariants with the daemons on one SQLite file (one host).
    Scenario("sqlite: kills at every point", faults=tuple(sorted(POINTS)), store="sqlite"),
    Scenario(
        "sqlite: two daemons racing, random kills, commit then stall or reset",
        sagas=80,
        daemons=2,
        faults=tuple(sorted(POINTS)),
        external_kills=4,
        stall_after_commit=0.05,
        reset_after_commit=0.05,
        store="sqlite",
    ),
    # Parallel steps: a fan-out of three then a join, one branch failing in every fourth
    # saga, two daemons dying at every fault point (issue 17).
    Scenario(
        "fan-out: kills at every point",
        sagas=30,  # the long run (make chaos) takes three times as many
        daemons=2,
        faults=tuple(sorted(POINTS)),
        external_kills=4,
        fan_out=True,
    ),
    # The kit's ledger pruned all through the run while an operator sends blocked sagas again,
    # most of them once their keys were pruned (tests/chaos/retention.py, issue 30), and its
    # control, which withholds the key's issue time from the kit (it then mutates twice). At
    # 16 sagas and 6 kills the control once showed no duplicate on a loaded machine (its kills
    # all landed where nothing had committed): 24 and 8 leave it more to show.
    *ledger_pruned(sagas=24, kills=8),
    # at_most_once against a plain destination that honours deadlines and offers a lookup,
    # daemons dying at every point: its verbs' probes settle every blocked key, none runs
    # twice (tests/chaos/probes.py, issue 30).
    Scenario(
        "at_most_once, plain destination with deadlines and a lookup, probes",
        sagas=16,  # the long run takes three times as many
        delivery="at_most_once",
        mode="lookup",
        daemons=2,
        faults=tuple(sorted(POINTS)),
        external_kills=4,
        stall_after_commit=0.1,
        reset_after_commit=0.1,
        probes=True,
        timeout_s=120,
    ),
    # Two stores served by every daemon, each store's sagas under the same execution ids in
    # its own namespace, daemons dying at every point and from outside (issue 48).
    Scenario(
        "two stores, each daemon serving both, kills at every point",
        sagas=30,  # per store
        daemons=2,
        faults=tuple(sorted(POINTS)),
        external_kills=4,
        stall_after_commit=0.05,
        reset_after_commit=0.05,
        stores=2,
        timeout_s=180,
    ),
    # Healthy sagas must all complete while hostile sagas beside them meet destinations that
    # answer what the store cannot hold, send stray responses, stall, reset, or bomb.
    Scenario(
        "hostile destinations beside healthy ones",
        sagas=72,
        daemons=2,
        healthy=3,
        hostile=BEHAVIOURS,
        timeout_s=120,
    ),
]


LONG = [
    Scenario(
        "three daemons, 1,000 sagas, random kills",
        sagas=1000,
        daemons=3,
        faults=tuple(sorted(POINTS)),
        external_kills=30,
        stall_after_commit=0.03,
        reset_after_commit=0.03,
        timeout_s=1200,
    ),
    *(replace(s, sagas=s.sagas * 3, timeout_s=900) for s in SHORT if not s.retention),
    *ledger_pruned(sagas=120, kills=18),
    KIT_PROBES,
]
