"""Verb contracts (docs/design.md section 4) and their contract hash.

The contract hash pins what decides the effect a call has: which destination, which request
(method, path template, argument schema), what an answer means (result schema), delivery and
fencing. Operational tuning (timeout, retry policy, the probe) is not pinned: a live saga picks
up the loaded config's values at its next attempt, so tuning a verb never blocks the sagas using
it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from functools import cached_property
from typing import Any, ClassVar, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, field_validator

from effectusd.core.canonical import (
    MAX_FENCING_RESOURCE_CHARS,
    MAX_PATH_CHARS,
    JsonValue,
    canonical_hash,
    json_problems,
)
from effectusd.core.derived import DerivedOnce
from effectusd.core.durations import Duration, to_milliseconds
from effectusd.core.probes import KEY_STAND_IN, ProbeConfig
from effectusd.core.states import Delivery
from effectusd.core.templates import (
    FENCING_SCOPES,
    PATH_SCOPES,
    Template,
    encode_path_segment,
    parse_template,
    without_store_placeholder,
)

# What releases before the time budget used where a verb set no value: the legacy contract hash
# (``VerbContract.legacy_contract_hash``) hashes these for every field the configuration leaves
# out, so changing the defaults below never changes the hash a saga in flight pinned.
LEGACY_RETRY_DEFAULTS: dict[str, Any] = {
    "max_attempts": 5,
    "initial_backoff": timedelta(milliseconds=500),
    "max_backoff": timedelta(minutes=1),
    "multiplier": 2.0,
}


class RetryPolicy(BaseModel):
    """How a verb is retried (live: never in the contract hash). ``max_attempts`` bounds the
    requests that may have been sent while the outcome is unknown; a call never sent, or known
    not committed, is retried until ``give_up_after`` has passed since the dispatch's first
    claim (docs/design.md section 6)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_attempts: int = Field(default=5, ge=1, le=1000)
    initial_backoff: Duration = timedelta(seconds=1)
    max_backoff: Duration = timedelta(minutes=5)
    multiplier: float = Field(default=2.0, ge=1.0, le=100.0)
    give_up_after: Duration = timedelta(hours=24)

    def legacy_canonical(self) -> dict[str, JsonValue]:
        """The policy as the legacy contract hash covers it: the fields the configuration set,
        the legacy defaults for the others, and never ``give_up_after``."""
        given = self.model_fields_set
        value = {
            name: getattr(self, name) if name in given else default
            for name, default in LEGACY_RETRY_DEFAULTS.items()
        }
        return {
            "max_attempts": value["max_attempts"],
            "initial_backoff_ms": to_milliseconds(value["initial_backoff"]),
            "max_backoff_ms": to_milliseconds(value["max_backoff"]),
            "multiplier": value["multiplier"],
        }


HttpMethod = Literal["POST", "PUT", "PATCH", "DELETE"]


class VerbContract(DerivedOnce):
    """What a verb is: where it goes, how it is called and fenced (pinned by the contract
    hash), and how long a call may take and how it is retried (live: not pinned)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,127}$")
    version: int = Field(default=1, ge=1)
    destination: str
    method: HttpMethod = "POST"
    path: str = "/"
    args_schema: dict[str, Any] | None = None
    result_schema: dict[str, Any] | None = None
    delivery: Delivery = Delivery.AT_MOST_ONCE
    timeout: Duration | None = None
    retry: RetryPolicy = RetryPolicy()
    fencing: tuple[str, ...] = ()
    probe: ProbeConfig | None = None  # live, like timeout and retry: not in the hash

    @field_validator("path")
    @classmethod
    def _path_template(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("path must start with '/'")
        template = parse_template(value, PATH_SCOPES)
        if template.literal_length > MAX_PATH_CHARS:
            raise ValueError(f"path is longer than the limit of {MAX_PATH_CHARS} characters")
        return value

    @field_validator("fencing")
    @classmethod
    def _fencing_templates(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for source in value:
            template = parse_template(source, FENCING_SCOPES)
            if template.literal_length > MAX_FENCING_RESOURCE_CHARS:
                raise ValueError(
                    f"fencing template {source!r} is longer than the limit of "
                    f"{MAX_FENCING_RESOURCE_CHARS} characters for a resource"
                )
        return value

    @field_validator("args_schema", "result_schema")
    @classmethod
    def _schema_is_json(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            problems = json_problems(value, "schema")
            if problems:
                raise ValueError("; ".join(problems))
            try:
                jsonschema.Draft202012Validator.check_schema(value)
            except jsonschema.SchemaError as exc:
                raise ValueError(f"not a valid JSON Schema: {exc.message}") from None
        return value

    # The contract is frozen, so what is derived from it is computed once (hot path); a copy
    # made with changes does not inherit those values (DerivedOnce).
    _DERIVED: ClassVar[tuple[str, ...]] = (
        "path_template",
        "fencing_templates",
        "contract_hash",
        "legacy_contract_hash",
    )

    @cached_property
    def path_template(self) -> Template:
        return parse_template(self.path, PATH_SCOPES)

    @cached_property
    def fencing_templates(self) -> tuple[Template, ...]:
        return tuple(parse_template(template, FENCING_SCOPES) for template in self.fencing)

    def canonical(self) -> dict[str, JsonValue]:
        """What the contract hash covers: everything that decides the effect of a call."""
        return {
            "name": self.name,
            "version": self.version,
            "destination": self.destination,
            "method": self.method,
            "path": self.path,
            "args_schema": self.args_schema,
            "result_schema": self.result_schema,
            "delivery": self.delivery.value,
            "fencing": sorted(set(self.fencing)),  # resolved in sorted order; so is the hash
        }

    @cached_property
    def contract_hash(self) -> str:
        return canonical_hash(self.canonical())

    @cached_property
    def legacy_contract_hash(self) -> str:
        """The hash as releases before the pinned/live split computed it (timeout and retry
        included): sagas submitted then carry it, and still match while nothing changed."""
        return canonical_hash(
            {
                **self.canonical(),
                "timeout_ms": None if self.timeout is None else to_milliseconds(self.timeout),
                "retry": self.retry.legacy_canonical(),
            }
        )

    @property
    def path_templates(self) -> list[Template]:
        """Every path this verb's steps render: its own, and its probe's (with a stand-in
        key), checked alike at check and at submit."""
        probe = [] if self.probe is None else [self.probe.template(KEY_STAND_IN)]
        return [self.path_template, *probe]

    def render_path(self, args: dict[str, JsonValue]) -> str:
        return self.path_template.render_within(
            MAX_PATH_CHARS, "path", args, {}, encode_path_segment
        )

    def resolve_fencing(self, args: dict[str, JsonValue], facts: dict[str, JsonValue]) -> list[str]:
        """Fencing resources for one dispatch, deduplicated and in canonical (sorted) order."""
        if not self.fencing_templates:
            return []  # an unfenced verb
        return sorted(
            {render_fencing(template, args, facts) for template in self.fencing_templates}
        )


def render_fencing(
    template: Template, args: Mapping[str, JsonValue], facts: Mapping[str, JsonValue]
) -> str:
    return template.render_within(
        MAX_FENCING_RESOURCE_CHARS, "fencing resource", args, facts, without_store_placeholder
    )


def pinned(live: VerbContract | None, pinned_hash: str) -> bool:
    """Whether a saga pinned to ``pinned_hash`` may be dispatched under the ``live`` contract
    (None: the verb is not configured, so it may not): the one check of a pin in Python,
    wherever one is checked (the claim's own is its SQL, ``registry.live_pins``)."""
    return live is not None and pinned_hash in (live.contract_hash, live.legacy_contract_hash)
