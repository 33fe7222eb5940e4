"""What a person reads of a probe's answer, on every store: `sagas show` and the console's
saga page give each probe's status, verdict and reason, and the destination's own words."""

from __future__ import annotations

import html
import re

from effectusd.cli import render
from effectusd.console import pages
from effectusd.operator.probes import Settled
from tests.conformance.support import StoreUnderTest
from tests.conformance.test_probes import answering, blocked


async def test_show_and_the_saga_page_give_each_probe_answer_with_the_destinations_reason(
    store: StoreUnderTest,
) -> None:
    async with blocked(store, answering(404, {"error": "no such key"})) as (saga, *_, prober):
        assert await prober.once() == [Settled.KEPT_BLOCKED]
        text = render.saga_detail(store.typed_view(saga))
        page = html.unescape(re.sub(r"<[^>]+>", "", str(pages.saga_detail(store.view(saga), None))))
    answer = (
        "probe 1/2  http 404  keep_blocked: HTTP 404: not committed, not acted on (the "
        "destination does not declare honours_deadline)"
    )
    reason = "(destination's reason: no such key)"
    [line] = [line for line in text.splitlines() if answer in line]
    assert line.startswith("       probe") and reason in line
    assert answer in page and reason in page
