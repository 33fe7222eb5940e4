"""The probe rule (effectusd.core.probes.decide): one answer, the verb's probe config, the
destination's promise and the times in; committed, not committed, ask again or give up out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from effectusd.config import ConfigError, parse_config
from effectusd.core.probes import ProbeAnswer, ProbeConfig, ProbeTimes, Verdict, decide

DEADLINE = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
SKEW = timedelta(seconds=5)
CONFIG = ProbeConfig(
    path="/charges/{key}", committed=(200,), not_committed=(404,), result="/charge",
    every=timedelta(minutes=1), max_probes=3,
)  # fmt: skip
SCHEMA = {"type": "object", "required": ["id"]}
LATE = DEADLINE + timedelta(seconds=6)  # past the deadline plus the skew allowance
EARLY = DEADLINE + timedelta(seconds=4)  # past the deadline, within the skew allowance

# (answer, honours_deadline, probed_at, probes so far incl. this one) -> (verdict, result, reason)
TABLE: list[tuple[ProbeAnswer, bool, datetime, int, Verdict, Any, str]] = [
    (ProbeAnswer(200, {"charge": {"id": "c-1"}}), False, EARLY, 1, Verdict.COMMITTED,
     {"id": "c-1"}, "HTTP 200: committed"),
    (ProbeAnswer(200, {"charge": {"id": "c-1"}}), True, LATE, 3, Verdict.COMMITTED,
     {"id": "c-1"}, "HTTP 200: committed"),
    (ProbeAnswer(200, {"other": 1}), True, LATE, 1, Verdict.KEEP_BLOCKED, None,
     "HTTP 200: committed, but result '/charge' is not in the answer"),
    (ProbeAnswer(200, {"charge": {"no_id": 1}}), True, LATE, 1, Verdict.KEEP_BLOCKED, None,
     "HTTP 200: committed, but the result does not match the verb's result_schema (1)"),
    (ProbeAnswer(200, None, "a JSON body that cannot be stored"), True, LATE, 1,
     Verdict.KEEP_BLOCKED, None, "HTTP 200: committed, but a JSON body that cannot be stored"),
    (ProbeAnswer(404), True, LATE, 1, Verdict.NOT_COMMITTED, None, "HTTP 404: not committed"),
    (ProbeAnswer(404), True, LATE, 3, Verdict.NOT_COMMITTED, None, "HTTP 404: not committed"),
    (ProbeAnswer(404), False, LATE, 1, Verdict.KEEP_BLOCKED, None,
     "HTTP 404: not committed, not acted on (the destination does not declare honours_deadline)"),
    (ProbeAnswer(404), True, EARLY, 1, Verdict.KEEP_BLOCKED, None,
     "HTTP 404: not committed, not acted on (asked before the deadline plus clock_skew)"),
    (ProbeAnswer(404), False, LATE, 3, Verdict.GIVE_UP, None,
     "HTTP 404: not committed, not acted on (the destination does not declare honours_deadline)"
     "; max_probes 3 spent"),
    (ProbeAnswer(409), True, LATE, 2, Verdict.KEEP_BLOCKED, None,
     "HTTP 409: neither committed nor not committed"),
    (ProbeAnswer(500), True, LATE, 3, Verdict.GIVE_UP, None,
     "HTTP 500: neither committed nor not committed; max_probes 3 spent"),
    (ProbeAnswer(None, None, "ConnectError"), True, LATE, 1, Verdict.KEEP_BLOCKED, None,
     "no answer: ConnectError"),
    (ProbeAnswer(None), True, LATE, 3, Verdict.GIVE_UP, None,
     "no answer: transport error; max_probes 3 spent"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("answer", "honours", "probed_at", "probes", "verdict", "result", "reason"), TABLE
)
def test_the_probe_rule(
    answer: ProbeAnswer,
    honours: bool,
    probed_at: datetime,
    probes: int,
    verdict: Verdict,
    result: Any,
    reason: str,
) -> None:
    decision = decide(
        answer,
        CONFIG,
        ProbeTimes(DEADLINE, probed_at, probes),
        honours_deadline=honours,
        clock_skew=SKEW,
        result_schema=SCHEMA,
    )
    assert (decision.verdict, decision.result, decision.reason) == (verdict, result, reason)
    expected_next = probed_at + CONFIG.every if verdict is Verdict.KEEP_BLOCKED else None
    assert decision.next_at == expected_next


def test_a_committed_answer_without_a_result_pointer_settles_with_no_result() -> None:
    config = CONFIG.model_copy(update={"result": None})
    decision = decide(
        ProbeAnswer(200, {"anything": 1}),
        config,
        ProbeTimes(DEADLINE, EARLY, 1),
        honours_deadline=False,
        clock_skew=SKEW,
    )
    assert (decision.verdict, decision.result) == (Verdict.COMMITTED, None)


def test_the_path_renders_the_key_arguments_and_facts_each_as_one_segment() -> None:
    config = ProbeConfig(path="/by-ref/{key}/{args.account}/{facts.region}")
    key = "ab" * 32
    rendered = config.render_path(key, {"account": "a c"}, {"region": "eu"})
    assert rendered == f"/by-ref/{key}/a%20c/eu"


def _config(probe: dict[str, Any] | None) -> dict[str, Any]:
    verb: dict[str, Any] = {"destination": "d", "path": "/charge"}
    if probe is not None:
        verb["probe"] = probe
    return {
        "destinations": {"d": {"base_url": "http://127.0.0.1:9", "honours_deadline": True}},
        "verbs": {"pay": verb},
    }


def test_the_probe_is_live_config_outside_the_contract_hash() -> None:
    probed = parse_config(_config({"path": "/charges/{key}", "every": "2m"})).verbs["pay"]
    plain = parse_config(_config(None)).verbs["pay"]
    assert probed.contract_hash == plain.contract_hash
    assert probed.legacy_contract_hash == plain.legacy_contract_hash
    assert probed.probe is not None and probed.probe.every == timedelta(minutes=2)


@pytest.mark.parametrize(
    ("probe", "error"),
    [
        ({"path": "charges"}, "verbs.pay.probe.path: must start with '/'"),
        ({"path": "/{secret}"}, "verbs.pay.probe.path: template '/{secret}': placeholder"),
        ({"path": "/{key}", "committed": [404]}, "verbs.pay.probe.committed: status code 404"),
        ({"path": "/{key}", "not_committed": [200]}, "verbs.pay.probe: status 200 is both"),
        ({"path": "/{key}", "not_committed": [700]}, "verbs.pay.probe.not_committed: status code"),
        ({"path": "/{key}", "every": "0s"}, "verbs.pay.probe.every: must be at least 1s"),
        ({"path": "/{key}", "result": "charge"}, "verbs.pay.probe.result: must be a JSON Pointer"),
        ({"path": "/{key}", "max_probes": 0}, "verbs.pay.probe.max_probes"),
        ({"path": "/{key}", "after": "soon"}, "verbs.pay.probe.after"),
    ],
)
def test_a_bad_probe_is_refused_at_load_naming_its_key_path(
    probe: dict[str, Any], error: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(_config(probe))
    assert error in str(refused.value)
