"""Liveness under poison: one more destination, one bad row or one stuck loop never stops
the daemon for everyone else (real daemon, real PostgreSQL or SQLite, real HTTP)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.destination import running
from tests.support.harness import client_for, make_config, run_until_idle, serial_plan


def destinations_config(base_url: str, count: int, **sections: Any) -> Any:
    names = [f"d{i:02}" for i in range(count)]
    return make_config(
        base_url,
        {f"v-{name}": {"destination": name} for name in names},
        destinations={name: {"base_url": base_url} for name in names},
        **sections,
    )


@pytest.mark.parametrize("count", [6, 20])
async def test_every_destination_with_work_is_called_with_default_limits(
    store_url: str, count: int
) -> None:
    """Defaults: 64 slots overall, 16 per destination, so C is below the sum of limits."""
    with running() as dest:
        config = destinations_config(dest.base_url, count)
        assert config.dispatcher.concurrency < sum(
            d.max_concurrency for d in config.destinations.values()
        )
        client = client_for(config, store_url)
        sagas = [
            client.submit(serial_plan(f"p-{verb}", [verb, verb]), execution_id=verb).saga_id
            for verb in config.verbs
        ]
        await run_until_idle(config, store_url)

        assert [client.get(saga)["state"] for saga in sagas] == ["completed"] * count
        called = {r.path for r in dest.requests}
        assert called == {f"/{verb}" for verb in config.verbs}
