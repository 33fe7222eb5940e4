"""Prometheus metrics of one daemon (its own registry, so tests and bench runs don't clash)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.outcomes = Counter(
            "effectusd_outcomes_total",
            "Recorded attempt outcomes.",
            ["destination", "verb", "direction", "outcome"],
            registry=r,
        )
        self.call_seconds = Histogram(
            "effectusd_call_duration_seconds",
            "Duration of destination calls.",
            ["destination", "verb"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.enqueue_to_dispatch_seconds = Histogram(
            "effectusd_enqueue_to_dispatch_seconds",
            "Time from a dispatch row's creation to its claim (database clock).",
            ["destination"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.ready_depth = Gauge(
            "effectusd_ready_queue_depth", "Dispatches due now and not yet claimed.", registry=r
        )
        self.oldest_ready_age = Gauge(
            "effectusd_oldest_ready_age_seconds",
            "Age of the oldest due dispatch (0 when none).",
            registry=r,
        )
        self.sagas = Gauge(
            "effectusd_sagas", "Live and blocked sagas by state.", ["state"], registry=r
        )
        self.in_flight = Gauge(
            "effectusd_in_flight_calls", "Calls under way.", ["destination"], registry=r
        )
        self.reclaims = Counter(
            "effectusd_lease_reclaims_total", "Expired leases settled by this daemon.", registry=r
        )
        self.late_completions = Counter(
            "effectusd_late_completions_total",
            "Completions whose guard failed (kept as evidence, changed nothing).",
            registry=r,
        )
        self.fencing_acquisitions = Counter(
            "effectusd_fencing_acquisitions_total", "Fencing tokens granted.", registry=r
        )
        self.fencing_conflicts = Counter(
            "effectusd_fencing_conflicts_total",
            "Dispatches held back because a resource was leased by another.",
            registry=r,
        )

        self.recorder_failures = Counter(
            "effectusd_recorder_failures_total",
            "Outcome batches whose recording failed (retried, or split to find a poison).",
            ["kind"],  # transient | deterministic
            registry=r,
        )
        self.write_ahead_failures = Counter(
            "effectusd_write_ahead_failures_total",
            "Write-aheads that failed; their claims were left to the reclaim.",
            registry=r,
        )
        self.poison_isolated = Counter(
            "effectusd_poison_isolated_total",
            "Completions the store could not record, settled alone into blocked_unknown.",
            registry=r,
        )
        self.loop_failures = Counter(
            "effectusd_loop_failures_total",
            "Unexpected errors in a background loop (claim, reclaim, recorder), survived.",
            ["loop"],
            registry=r,
        )

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
