"""Prometheus metrics of one daemon (its own registry, so tests and bench runs don't clash)."""

from __future__ import annotations

from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase

M = TypeVar("M", bound=MetricWrapperBase)

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Metrics:
    """Every metric the daemon exports. Names, help texts and labels are what the docs, the
    contrib alerts and the dashboard query: change them only together."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._declare_work()
        self._declare_guards()
        self._declare_failures()
        # Children by label values, for the metrics every step touches: labels() validates,
        # joins and locks each time. Label values are destinations, verbs and classes: a
        # bounded set.
        self._children: dict[tuple[int, tuple[str, ...]], MetricWrapperBase] = {}

    def child(self, metric: M, *values: str) -> M:
        """``metric.labels(*values)``, looked up once per metric and values."""
        key = (id(metric), values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found  # type: ignore[return-value]  # labels() returns the metric's own type

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def outcome_totals(self) -> dict[str, int]:
        """Recorded attempt outcomes by class, summed over every other label (the console's
        outcome rates)."""
        totals: dict[str, int] = {}
        for family in self.outcomes.collect():
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    outcome = sample.labels["outcome"]
                    totals[outcome] = totals.get(outcome, 0) + int(sample.value)
        return totals

    def _declare_work(self) -> None:
        """What flows through: outcomes, latencies, the backlog and the calls under way."""
        self.outcomes = self._counter(
            "effectusd_outcomes_total",
            "Recorded attempt outcomes.",
            ("destination", "verb", "direction", "outcome"),
        )
        self.call_seconds = self._histogram(
            "effectusd_call_duration_seconds",
            "Duration of destination calls.",
            ("destination", "verb"),
        )
        self.enqueue_to_dispatch_seconds = self._histogram(
            "effectusd_enqueue_to_dispatch_seconds",
            "Time from a dispatch row's creation to its claim (database clock).",
            ("destination",),
        )
        self.ready_depth = self._gauge(
            "effectusd_ready_queue_depth", "Dispatches due now and not yet claimed."
        )
        self.oldest_ready_age = self._gauge(
            "effectusd_oldest_ready_age_seconds", "Age of the oldest due dispatch (0 when none)."
        )
        self.sagas = self._gauge("effectusd_sagas", "Live and blocked sagas by state.", ("state",))
        self.in_flight = self._gauge(
            "effectusd_in_flight_calls", "Calls under way.", ("destination",)
        )
        self.waiting_for_slot = self._gauge(
            "effectusd_claims_waiting_for_slot",
            "Next steps claimed while their destination was full, waiting in the daemon.",
            ("destination",),
        )

    def _declare_guards(self) -> None:
        """The guards at work: expired leases, late answers, fencing."""
        self.reclaims = self._counter(
            "effectusd_lease_reclaims_total", "Expired leases settled by this daemon."
        )
        self.late_completions = self._counter(
            "effectusd_late_completions_total",
            "Completions whose guard failed (kept as evidence, changed nothing).",
        )
        self.fencing_acquisitions = self._counter(
            "effectusd_fencing_acquisitions_total", "Fencing tokens granted."
        )
        self.probes = self._counter(
            "effectusd_probes_total",
            "Reconciliation probes of blocked dispatches, by what each did: scheduled, "
            "committed, not_committed, kept_blocked, given_up, moved_on, failed.",
            ("verb", "answer"),
        )
        self.http_refused = self._counter(
            "effectusd_http_connections_refused_total",
            "Connections to the HTTP server refused for want of room: busy (answered 503 past "
            "the connection cap), crowded (closed waiting for their request, for newer ones).",
            ("reason",),
        )
        self.fencing_conflicts = self._counter(
            "effectusd_fencing_conflicts_total",
            "Dispatches held back because a resource was leased by another.",
        )
        self.waiting_for_destination = self._counter(
            "effectusd_destination_waits_total",
            "Calls answered by waiting for the destination: retried under retry.give_up_after "
            "because the call was never sent (sent=no: connection refused, connect timeout, "
            "DNS, TLS) or was refused as known not committed (sent=yes).",
            ("destination", "sent"),
        )

    def _declare_failures(self) -> None:
        """Failures the daemon survived."""
        self.recorder_failures = self._counter(
            "effectusd_recorder_failures_total",
            "Outcome batches whose recording failed (retried, or split to find a poison).",
            ("kind",),  # transient | deterministic
        )
        self.write_ahead_failures = self._counter(
            "effectusd_write_ahead_failures_total",
            "Write-aheads that failed; their claims were left to the reclaim.",
        )
        self.poison_isolated = self._counter(
            "effectusd_poison_isolated_total",
            "Completions the store could not record, settled alone into blocked_unknown.",
        )
        self.loop_failures = self._counter(
            "effectusd_loop_failures_total",
            "Unexpected errors in a background loop (claim, reclaim, recorder), survived.",
            ("loop",),
        )

    def _counter(self, name: str, documentation: str, labels: tuple[str, ...] = ()) -> Counter:
        return Counter(name, documentation, labels, registry=self.registry)

    def _gauge(self, name: str, documentation: str, labels: tuple[str, ...] = ()) -> Gauge:
        return Gauge(name, documentation, labels, registry=self.registry)

    def _histogram(self, name: str, documentation: str, labels: tuple[str, ...]) -> Histogram:
        return Histogram(
            name, documentation, labels, buckets=LATENCY_BUCKETS, registry=self.registry
        )
