"""Claim latency: the daemon's claim statement on an empty outbox, over one batch of ready
rows and over a large backlog of them."""

from __future__ import annotations

import time
from typing import Any

from effectusd.backends.connections import PostgresConnection
from effectusd.backends.postgres import connect
from effectusd.backends.postgres.migrations import migrate as migrate_set
from effectusd.backends.postgres.runner import sql as named_sql
from effectusd.bench import database
from effectusd.bench.database import drop_database, scratch_database
from effectusd.bench.measures import percentile
from effectusd.config import Config
from effectusd.dispatcher.assembly import new_owner_id
from effectusd.dispatcher.capacity import Capacity
from effectusd.store.postgres.dispatch import claim_ready_params
from effectusd.store.sql import POSTGRES_MIGRATIONS, POSTGRES_STATEMENTS

CLAIM_SAMPLES = 300
CLAIM_WARMUP = 15  # past psycopg's prepare threshold and the server's generic-plan choice
CLAIM_BUDGET_S = 60.0  # a slow claim stops the sampling here, once CLAIM_MIN_SAMPLES are in
CLAIM_MIN_SAMPLES = 30
BACKLOG_CHUNK = 100_000


def claim_latency(
    server_url: str, config: Config, backlog: int, progress: Any
) -> dict[str, list[float]]:
    """Milliseconds per claim_ready.sql, with the daemon's parameters, in a scratch database of
    its own (dropped afterwards): on an empty outbox ("empty"), over exactly one batch of ready
    rows ("batch": the same work per claim as over the backlog, so backlog/batch isolates the
    backlog's cost) and over ``backlog`` ready rows. Each claim runs in a transaction that is
    rolled back, so the rows stay ready."""
    url = scratch_database(server_url)
    try:
        with connect(url) as conn:  # autocommit, like the daemon's
            migrate_set(conn, POSTGRES_MIGRATIONS)
            params = claim_params(config)
            batch = min(backlog, sum(params["limits"]))
            timings = {"empty": time_claims(conn, params, 0, "an empty outbox", progress)}
            build_backlog(conn, config, range(1, batch + 1), backlog, progress)
            timings["batch"] = time_claims(conn, params, batch, f"{batch} ready rows", progress)
            build_backlog(conn, config, range(batch + 1, backlog + 1), backlog, progress)
            what = f"{backlog:,} ready rows"
            timings["backlog"] = time_claims(conn, params, batch, what, progress)
    finally:
        drop_database(server_url, url)
    return timings


def claim_params(config: Config) -> dict[str, Any]:
    """What the daemon's first claim passes: the free capacity of an idle pipeline, an owner
    id, the lease margin, the live verbs, and the write-ahead of what it claims (as Daemon.run
    and PostgresDispatchStore.claim build them)."""
    capacity = Capacity(
        limits={name: d.max_concurrency for name, d in config.destinations.items()},
        total_limit=config.dispatcher.concurrency,
    )
    registry = config.registry()
    return claim_ready_params(
        list(capacity.free().items()),
        capacity.room,
        new_owner_id(),
        config.dispatcher.lease_margin.total_seconds(),
        registry.live_limits(),
        registry.live_pins(),
        write_ahead=True,
    )


def time_claims(
    conn: PostgresConnection, params: dict[str, Any], expect: int, what: str, progress: Any
) -> list[float]:
    query = named_sql(POSTGRES_STATEMENTS, "claim_ready")
    timings: list[float] = []
    give_up = time.monotonic() + CLAIM_BUDGET_S
    for index in range(CLAIM_WARMUP + CLAIM_SAMPLES):
        with conn.transaction(force_rollback=True):  # the claimed rows stay ready
            started = time.perf_counter()
            claimed = len(conn.execute(query, params).fetchall())
            elapsed_ms = (time.perf_counter() - started) * 1000
        if claimed != expect:
            raise RuntimeError(
                f"claim_ready claimed {claimed} row(s) over {what}, expected {expect}: the "
                "claim latency would not be measuring a claim"
            )
        if index >= CLAIM_WARMUP:
            timings.append(elapsed_ms)
        if time.monotonic() > give_up and len(timings) >= CLAIM_MIN_SAMPLES:
            break
    p99 = percentile(timings, 99)
    progress(f"claim latency over {what}: {len(timings)} claims, p99 {p99:.2f} ms")
    return timings


def build_backlog(
    conn: PostgresConnection, config: Config, rows: range, total: int, progress: Any
) -> None:
    """Backlog rows ``rows`` (of ``total``): queued dispatches of the config's first verb, one
    running saga and one started step each, by INSERT … SELECT generate_series in chunks; then
    VACUUM ANALYZE, the state autovacuum reaches soon after such a burst."""
    verb_name, verb = next(iter(config.verbs.items()))
    params = {
        "namespace": config.namespace,
        "verb": verb_name,
        "destination": verb.destination,
        "path": verb.path,
        "total": total,
    }
    started = time.perf_counter()
    for first in range(rows.start, rows.stop, BACKLOG_CHUNK):
        last = min(first + BACKLOG_CHUNK, rows.stop) - 1
        conn.execute(database.sql("backlog"), {**params, "first": first, "last": last})
        progress(f"backlog: {last:,}/{total:,} ready rows ({time.perf_counter() - started:.0f} s)")
    conn.execute(database.sql("vacuum_analyze"))
