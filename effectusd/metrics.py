"""Prometheus metrics for the daemon (filled in by the dispatcher)."""
