"""Reconciliation probes (docs/design.md section 7, Probes): asking a destination what became of
a key whose attempt is uncertain, and what its answer lets the engine decide.

A probe is a GET on the verb's destination; the configured statuses say what an answer means.
Everything here is pure: the daemon's probe loop (``effectusd.dispatcher.probes``) reads the
facts, sends the probe and settles through the engine what ``decide`` says.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from effectusd.core.canonical import MAX_PATH_CHARS, JsonValue
from effectusd.core.document_checks import schema_issues
from effectusd.core.durations import Duration
from effectusd.core.expressions import ResolutionError, json_pointer
from effectusd.core.identity import idempotency_key
from effectusd.core.states import Direction
from effectusd.core.templates import (
    FENCING_SCOPES,
    Placeholder,
    Template,
    TemplateError,
    encode_path_segment,
    parse_template,
)

PROBE_ACTOR = "probe"
KEY_PLACEHOLDER = "{key}"
# A key as long as every Idempotency-Key: what a probe path is checked with before its own.
KEY_STAND_IN = idempotency_key("", "", "", Direction.FORWARD)
# What the kit allows between the daemon's database clock and the service's (its clock_skew).
DEFAULT_CLOCK_SKEW = timedelta(seconds=5)
# A probe answer's body kept as evidence: its first characters, escaped (never the whole page).
EVIDENCE_BODY_CHARS = 500


class ProbeConfig(BaseModel):
    """``[verbs.NAME.probe]``: operational, like timeout and retry (not in the contract hash)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    committed: tuple[int, ...] = (200,)
    not_committed: tuple[int, ...] = (404,)
    result: str | None = None  # a JSON Pointer into a committed answer's body
    after: Duration = timedelta(seconds=30)
    every: Duration = timedelta(minutes=1)
    max_probes: int = Field(default=20, ge=1, le=10_000)

    @field_validator("path")
    @classmethod
    def _path_template(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must start with '/'")
        try:
            pieces = [parse_template(part, FENCING_SCOPES) for part in value.split(KEY_PLACEHOLDER)]
        except TemplateError as exc:
            raise ValueError(f"{exc} (or {KEY_PLACEHOLDER})") from None
        literal = sum(piece.literal_length for piece in pieces)
        if literal > MAX_PATH_CHARS:
            raise ValueError(f"is longer than the limit of {MAX_PATH_CHARS} characters")
        if len(pieces) == 1 and not pieces[0].placeholders:
            raise ValueError(
                "names no placeholder, so one answer would settle every blocked dispatch of "
                f"the verb: put {KEY_PLACEHOLDER} (the dispatch's Idempotency-Key) in it"
            )
        return value

    @field_validator("committed", "not_committed")
    @classmethod
    def _statuses(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        for code in value:
            if not 100 <= code <= 599:
                raise ValueError(f"status code {code} is not an HTTP status")
        return value

    @field_validator("committed")
    @classmethod
    def _committed_reads_a_body(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if not value:
            raise ValueError("needs at least one status")
        for code in value:
            if not 200 <= code < 300:
                raise ValueError(
                    f"status code {code} is not 2xx (a committed answer's body is the result)"
                )
        return value

    @field_validator("result")
    @classmethod
    def _pointer(cls, value: str | None) -> str | None:
        if value is not None and value and not value.startswith("/"):
            raise ValueError("must be a JSON Pointer starting with '/' (or empty)")
        return value

    @field_validator("every")
    @classmethod
    def _every(cls, value: timedelta) -> timedelta:
        if value < timedelta(seconds=1):
            raise ValueError("must be at least 1s")
        return value

    @model_validator(mode="after")
    def _disjoint(self) -> ProbeConfig:
        both = sorted(set(self.committed) & set(self.not_committed))
        if both:
            raise ValueError(f"status {both[0]} is both committed and not_committed")
        return self

    @cached_property
    def templates(self) -> tuple[Template, ...]:
        """The path between its ``{key}`` placeholders."""
        return tuple(
            parse_template(piece, FENCING_SCOPES) for piece in self.path.split(KEY_PLACEHOLDER)
        )

    @property
    def names_key(self) -> bool:
        """Whether the path names the dispatch's own key: without it, an answer is read for
        every dispatch of the verb whose arguments and facts fill the path alike."""
        return len(self.templates) > 1

    def template(self, key: str) -> Template:
        """The path with ``key`` in place of each ``{key}``: one template of arguments and
        facts, as the checks and the probe render it."""
        parts: list[str | Placeholder] = []
        for index, piece in enumerate(self.templates):
            parts += ([key] if index else []) + list(piece.parts)
        return Template(self.path, tuple(parts))

    def render_path(
        self, key: str, args: Mapping[str, JsonValue], facts: Mapping[str, JsonValue]
    ) -> str:
        """The probe's path for ``key``; TemplateError naming the placeholder (never a value)."""
        return self.template(key).render_within(
            MAX_PATH_CHARS, "probe path", args, facts, encode_path_segment
        )


class Verdict(StrEnum):
    """What one probe's answer decides."""

    COMMITTED = "committed"  # settle as success with the result
    NOT_COMMITTED = "not_committed"  # settle as known not committed: the ordinary rules apply
    KEEP_BLOCKED = "keep_blocked"  # ask again at next_at
    GIVE_UP = "give_up"  # no more probes: a person decides


@dataclass(frozen=True)
class ProbeAnswer:
    """What came back: a status (None: no answer, a transport error) and, for a committed
    status, the parsed body or why it cannot be used (``problem``: our words only)."""

    status: int | None
    body: JsonValue = None
    problem: str | None = None


@dataclass(frozen=True)
class ProbeTimes:
    deadline: datetime  # the latest attempt's lease end: at or after the deadline it sent
    probed_at: datetime  # the database clock when the probe was taken (before it was sent)
    probes: int  # how many probes of this attempt, this one included


@dataclass(frozen=True)
class ProbeDecision:
    verdict: Verdict
    reason: str
    result: JsonValue = None  # with COMMITTED: the step's result
    next_at: datetime | None = None  # with KEEP_BLOCKED: when to probe again


def first_probe_at(deadline: datetime, config: ProbeConfig) -> datetime:
    """When a blocked dispatch is first probed: its latest attempt's deadline plus ``after``."""
    return deadline + config.after


def decide(
    answer: ProbeAnswer,
    config: ProbeConfig,
    times: ProbeTimes,
    *,
    honours_deadline: bool,
    clock_skew: timedelta,
    result_schema: Mapping[str, Any] | None = None,
) -> ProbeDecision:
    """One answer in, one decision out (the table in tests/unit/test_core_probes.py)."""
    status = answer.status
    if status in config.committed:
        result, problem = _result(answer, config, result_schema)
        if problem is None:
            return ProbeDecision(Verdict.COMMITTED, f"HTTP {status}: committed", result)
        return _again(f"HTTP {status}: committed, but {problem}", config, times)
    if status in config.not_committed:
        after = times.deadline + clock_skew
        if not honours_deadline:
            why = "the destination does not declare honours_deadline"
        elif times.probed_at < after:
            why = "asked before the deadline plus clock_skew"
        else:
            return ProbeDecision(Verdict.NOT_COMMITTED, f"HTTP {status}: not committed")
        return _again(f"HTTP {status}: not committed, not acted on ({why})", config, times)
    if status is None:
        return _again(f"no answer: {answer.problem or 'transport error'}", config, times)
    return _again(f"HTTP {status}: neither committed nor not committed", config, times)


def _again(reason: str, config: ProbeConfig, times: ProbeTimes) -> ProbeDecision:
    if times.probes >= config.max_probes:
        return ProbeDecision(Verdict.GIVE_UP, f"{reason}; max_probes {config.max_probes} spent")
    return ProbeDecision(Verdict.KEEP_BLOCKED, reason, next_at=times.probed_at + config.every)


def _result(
    answer: ProbeAnswer, config: ProbeConfig, schema: Mapping[str, Any] | None
) -> tuple[JsonValue, str | None]:
    """The step's result from a committed answer, or why there is none we can use."""
    if answer.problem is not None:
        return None, answer.problem
    if config.result is None:
        return None, None
    try:
        result = json_pointer(answer.body, config.result)
    except ResolutionError:
        return None, f"result {config.result!r} is not in the answer"
    if schema is not None:
        issues = schema_issues(result, dict(schema), "result")
        if issues:
            # where and what would quote the destination's data: only how many
            return None, f"the result does not match the verb's result_schema ({len(issues)})"
    return result, None
