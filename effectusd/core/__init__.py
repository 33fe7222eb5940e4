"""The pure core: canonical JSON, identities, plans, checking and decisions. No I/O."""
