"""Fencing providers: leases on resources and monotonic tokens (docs/design.md section 8)."""

from effectusd.fencing.protocol import FenceBusy, FenceHolder, FencingProvider, Grants

__all__ = ["FenceBusy", "FenceHolder", "FencingProvider", "Grants"]
