"""Fencing providers: leases on resources and monotonic tokens (DESIGN.md section 8)."""

from effectusd.fencing.protocol import FenceBusy, FenceHolder, FencingProvider, Grants

__all__ = ["FenceBusy", "FenceHolder", "FencingProvider", "Grants"]
