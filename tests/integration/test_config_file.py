"""The TOML configuration file refused by name: the file, the key and the reason, never a
secret value (reserved headers, unknown destinations, credentials in URLs or headers)."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import pytest
from pydantic import BaseModel, ValidationError

from effectusd.config import (
    Config,
    ConfigError,
    ConsoleConfig,
    DestinationConfig,
    DispatcherConfig,
    FencingConfig,
    load_config,
)

VALID_TOML = """
[destinations.payments]
base_url = "http://127.0.0.1:9"
{headers}
[verbs."payments.charge"]
destination = "{destination}"
path = "/charges"
"""


@pytest.mark.parametrize(
    "header",
    [
        "Transfer-Encoding",
        "Content-Encoding",
        "connection",
        "Keep-Alive",
        "Upgrade",
        "TE",
        "Trailer",
        "Proxy-Connection",
    ],
)
def test_config_refuses_framing_and_connection_headers_that_would_fail_every_call(
    tmp_path: Path, header: str
) -> None:
    # Transfer-Encoding: chunked or Content-Encoding: gzip on a plain body made every call
    # fail, perhaps after it left, so the saga blocked as if the call might have happened.
    path = tmp_path / "effectusd.toml"
    headers = f'headers = {{ "X-Team" = "t", "{header}" = "{CONFIG_SECRET}" }}'
    path.write_text(VALID_TOML.format(headers=headers, destination="payments"))

    with pytest.raises(ConfigError) as refused:
        load_config(path)

    message = str(refused.value)
    assert message.startswith(f"{path}: destinations.payments.headers: {header}: framing")
    assert "X-Team" not in message and CONFIG_SECRET not in message


@pytest.mark.parametrize("header", ["Content-Length", "Host"])
def test_config_refuses_the_headers_the_transport_computes_as_reserved(
    tmp_path: Path, header: str
) -> None:
    path = tmp_path / "effectusd.toml"
    headers = f'headers = {{ "{header}" = "{CONFIG_SECRET}" }}'
    path.write_text(VALID_TOML.format(headers=headers, destination="payments"))

    with pytest.raises(ConfigError, match=f"destinations.payments.headers: .*{header}"):
        load_config(path)


@pytest.mark.parametrize(
    ("headers", "destination", "key", "reasons"),
    [
        pytest.param(
            'headers = { "Idempotency-Key" = "k", "X-Team" = "checkout" }',
            "payments",
            "destinations.payments.headers",
            ["reserved header", "Idempotency-Key"],
            id="idempotency-key-header",
        ),
        pytest.param(
            'headers = { "X-Effectus-Foo" = "bar" }',
            "payments",
            "destinations.payments.headers",
            ["reserved header", "X-Effectus-Foo"],
            id="x-effectus-header",
        ),
        pytest.param(
            'headers = { "x-effectus-saga-id" = "forged" }',
            "payments",
            "destinations.payments.headers",
            ["reserved header", "x-effectus-saga-id"],
            id="reserved-header-in-lower-case",
        ),
        pytest.param(
            "",
            "paymnets",
            "verbs.payments.charge.destination",
            ["'paymnets' is not a configured destination"],
            id="undefined-destination",
        ),
    ],
)
def test_config_error_names_the_file_the_key_and_the_reason(
    tmp_path: Path, headers: str, destination: str, key: str, reasons: list[str]
) -> None:
    path = tmp_path / "effectusd.toml"
    path.write_text(VALID_TOML.format(headers=headers, destination=destination))

    with pytest.raises(ConfigError) as refused:
        load_config(path)

    message = str(refused.value)
    assert str(path) in message
    assert key in message
    for reason in reasons:
        assert reason in message


CONFIG_SECRET = "SECRET-c0nf1g-value"


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        pytest.param("Authorization", "bearer_token_env", id="authorization"),
        pytest.param("authorization", "bearer_token_env", id="authorization-lower-case"),
        pytest.param("Proxy-Authorization", "bearer_token_env", id="proxy-authorization"),
        pytest.param("Proxy-Anything", "bearer_token_env", id="any-proxy-header"),
        pytest.param("Cookie", "bearer_token_env", id="cookie"),
        pytest.param("X-Api-Key", "bearer_token_env", id="x-api-key"),
        pytest.param("x-apikey", "bearer_token_env", id="apikey"),
        pytest.param("X-Auth-Token", "bearer_token_env", id="token"),
        pytest.param("X-Client-Secret", "bearer_token_env", id="secret"),
        pytest.param(" X-Team", "not a valid header name", id="leading-space"),
        pytest.param("X-Team ", "not a valid header name", id="trailing-space"),
        pytest.param("X Team", "not a valid header name", id="inner-space"),
        pytest.param("X-Team\\u0001", "not a valid header name", id="control-character"),
    ],
)
def test_config_refuses_inline_credentials_and_malformed_header_names_never_showing_the_value(
    tmp_path: Path, header: str, reason: str
) -> None:
    path = tmp_path / "effectusd.toml"
    headers = f'headers = {{ "{header}" = "{CONFIG_SECRET}" }}'
    path.write_text(VALID_TOML.format(headers=headers, destination="payments"))

    with pytest.raises(ConfigError) as refused:
        load_config(path)

    message = str(refused.value)
    assert str(path) in message
    assert "destinations.payments.headers" in message
    assert reason in message
    assert CONFIG_SECRET not in message


def test_config_refuses_a_header_value_with_control_characters_never_showing_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "effectusd.toml"
    headers = f'headers = {{ "X-Team" = "{CONFIG_SECRET}\\r\\nX-Forged: 1" }}'
    path.write_text(VALID_TOML.format(headers=headers, destination="payments"))

    with pytest.raises(ConfigError) as refused:
        load_config(path)

    message = str(refused.value)
    assert "destinations.payments.headers" in message and "control characters" in message
    assert CONFIG_SECRET not in message


@pytest.mark.parametrize(
    "base_url",
    [
        f"https://svc:{CONFIG_SECRET}@payments.example",
        f"http://{CONFIG_SECRET}@127.0.0.1:9",
        f"https://svc:{CONFIG_SECRET}@payments.example/api",
    ],
    ids=["user-and-password", "user-only", "with-path"],
)
def test_config_refuses_credentials_in_base_url_never_showing_them(
    tmp_path: Path, base_url: str
) -> None:
    path = tmp_path / "effectusd.toml"
    path.write_text(
        VALID_TOML.format(headers="", destination="payments").replace(
            'base_url = "http://127.0.0.1:9"', f'base_url = "{base_url}"'
        )
    )

    with pytest.raises(ConfigError) as refused:
        load_config(path)

    message = str(refused.value)
    assert "destinations.payments.base_url" in message
    assert "bearer_token_env" in message
    assert CONFIG_SECRET not in message


def test_the_config_template_used_by_the_error_cases_is_itself_valid(tmp_path: Path) -> None:
    path = tmp_path / "effectusd.toml"
    path.write_text(
        VALID_TOML.format(headers='headers = { "X-Team" = "t" }', destination="payments")
    )

    config = load_config(path)

    assert config.destinations["payments"].headers == {"X-Team": "t"}
    assert config.verbs["payments.charge"].destination == "payments"


def test_a_removed_key_still_loads_with_a_warning_naming_the_file_and_the_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # fencing.lease_ttl was accepted and never read; a file that still holds it must load.
    path = tmp_path / "effectusd.toml"
    path.write_text('[fencing]\nprovider = "store"\nlease_ttl = "97s"\n')

    with caplog.at_level(logging.WARNING, logger="effectusd.config"):
        config = load_config(path)

    assert config.fencing.provider == "store"
    assert "lease_ttl" not in FencingConfig.model_fields
    [warning] = [r.getMessage() for r in caplog.records if r.name == "effectusd.config"]
    assert warning.startswith(f"{path}: fencing.lease_ttl is ignored")
    assert "97s" not in warning


def test_a_misspelt_key_is_still_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "effectusd.toml"
    path.write_text('[fencing]\nlease_tl = "60s"\n')

    with pytest.raises(ConfigError, match=r"fencing\.lease_tl: Extra inputs are not permitted"):
        load_config(path)


def test_the_registry_holds_the_configs_verbs_destination_timeouts_and_fence_wait_limit(
    tmp_path: Path,
) -> None:
    path = tmp_path / "effectusd.toml"
    path.write_text(
        VALID_TOML.format(headers='timeout = "7s"', destination="payments")
        + '[verbs."payments.refund"]\ndestination = "payments"\npath = "/refunds"\ntimeout = "2s"\n'
    )
    config = load_config(path)

    registry = config.registry()

    assert set(registry.verbs) == {"payments.charge", "payments.refund"}
    assert registry.timeout_for(registry.verbs["payments.charge"]) == timedelta(seconds=7)
    assert registry.timeout_for(registry.verbs["payments.refund"]) == timedelta(seconds=2)
    assert registry.fence_wait_limit == config.fence_wait_limit() == timedelta(minutes=5)


# --- durations: a unit always -----------------------------------------------------------------

VERB = 'verbs."payments.charge"'
# The table keys that name a destination and a verb in the files these tests write.
NAMES = {"destinations": "payments", "verbs": "payments.charge"}


def _types(annotation: Any) -> list[Any]:
    """The types an annotation allows, through Annotated and unions."""
    if get_origin(annotation) is Annotated:
        return _types(get_args(annotation)[0])
    if get_origin(annotation) in (Union, UnionType):
        return [kind for arg in get_args(annotation) for kind in _types(arg)]
    return [annotation]


def duration_keys(annotation: Any, where: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key under ``annotation`` (a model, and the models and tables inside it) that
    holds a timedelta: a key added later is tested below without anyone listing it."""
    keys = []
    for kind in _types(annotation):
        if kind is timedelta:
            keys.append(where)
        elif get_origin(kind) is dict:
            keys += duration_keys(get_args(kind)[1], (*where, NAMES.get(where[-1], "x")))
        elif isinstance(kind, type) and issubclass(kind, BaseModel):
            for name, field in kind.model_fields.items():
                keys += duration_keys(field.annotation, (*where, name))
    return keys


DURATION_KEYS = duration_keys(Config)


def test_the_duration_keys_tested_are_every_one_the_file_has() -> None:
    assert {
        ("dispatcher", "lease_margin"),
        ("dispatcher", "poll_interval"),
        ("dispatcher", "shutdown_grace"),
        ("fencing", "wait_limit"),
        ("observability", "unhealthy_after"),
        ("console", "session_ttl"),
        ("destinations", "payments", "timeout"),
        ("destinations", "payments", "connect_timeout"),
        ("destinations", "payments", "clock_skew"),
        ("verbs", "payments.charge", "timeout"),
        ("verbs", "payments.charge", "retry", "initial_backoff"),
        ("verbs", "payments.charge", "retry", "max_backoff"),
        ("verbs", "payments.charge", "probe", "after"),
        ("verbs", "payments.charge", "probe", "every"),
    } <= set(DURATION_KEYS)


def config_setting(key: tuple[str, ...], value: str) -> str:
    """A valid file with one destination and one verb (and its probe), setting ``key``."""
    tables = {
        "[destinations.payments]": ['base_url = "http://127.0.0.1:9"'],
        f"[{VERB}]": ['destination = "payments"', 'path = "/charges"'],
        f"[{VERB}.probe]": ['path = "/charges/{key}"'],
    }
    *where, name = key
    header = ".".join(f'"{part}"' if "." in part else part for part in where)
    tables.setdefault(f"[{header}]", []).append(f"{name} = {value}")
    return "\n".join(f"{table}\n" + "\n".join(lines) for table, lines in tables.items()) + "\n"


@pytest.mark.parametrize("key", DURATION_KEYS, ids=".".join)
@pytest.mark.parametrize("value", ["2000", '"2000"', '" 2000 "'])
def test_a_duration_without_a_unit_is_refused_naming_the_key_and_showing_the_fix(
    tmp_path: Path, key: tuple[str, ...], value: str
) -> None:
    # A bare number was seconds: lease_margin = 2000 meant 33 minutes, not 2 seconds.
    path = tmp_path / "effectusd.toml"
    path.write_text(config_setting(key, value))

    with pytest.raises(ConfigError) as refused:
        load_config(path)

    assert str(refused.value) == (
        f'{path}: {".".join(key)}: a duration needs a unit: write "2000s" or "2000ms" '
        "(ms, s, m, h, d)"
    )


@pytest.mark.parametrize("key", DURATION_KEYS, ids=".".join)
@pytest.mark.parametrize("value", ['"2000ms"', '"2s"'])
def test_a_duration_with_its_unit_loads(tmp_path: Path, key: tuple[str, ...], value: str) -> None:
    path = tmp_path / "effectusd.toml"
    path.write_text(config_setting(key, value))

    node: object = load_config(path)
    for part in key:
        node = node[part] if isinstance(node, dict) else getattr(node, part)

    assert node == timedelta(seconds=2)


@pytest.mark.parametrize(
    ("model", "fields", "field"),
    [
        (DispatcherConfig, {}, "lease_margin"),
        (DispatcherConfig, {}, "poll_interval"),
        (DestinationConfig, {"base_url": "http://127.0.0.1:9"}, "timeout"),
        (ConsoleConfig, {}, "session_ttl"),
    ],
)
@pytest.mark.parametrize("value", [2000, 2.5, "2000"])
def test_a_config_built_in_python_refuses_a_bare_number_naming_the_field(
    model: type[BaseModel], fields: dict[str, Any], field: str, value: object
) -> None:
    with pytest.raises(ValidationError) as refused:
        model(**fields, **{field: value})

    [error] = refused.value.errors()
    assert error["loc"] == (field,) and "a duration needs a unit" in error["msg"]
    built = model(**fields, **{field: timedelta(milliseconds=2000)})
    assert getattr(built, field) == timedelta(seconds=2)


def test_answers_is_declared_by_default_takes_http_and_refuses_anything_else_by_key(
    tmp_path: Path,
) -> None:
    path = tmp_path / "effectusd.toml"
    path.write_text(VALID_TOML.format(headers="", destination="payments"))
    assert load_config(path).destinations["payments"].answers == "declared"
    path.write_text(VALID_TOML.format(headers='answers = "http"', destination="payments"))
    assert load_config(path).destinations["payments"].answers == "http"
    path.write_text(
        VALID_TOML.format(headers=f'answers = "{CONFIG_SECRET}"', destination="payments")
    )
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    message = str(refused.value)
    assert "destinations.payments.answers" in message and "'declared' or 'http'" in message
    assert CONFIG_SECRET not in message


def test_a_config_file_starting_with_a_utf8_byte_order_mark_loads_as_without_it(
    tmp_path: Path,
) -> None:
    # Editors on Windows save UTF-8 with a BOM: it is still UTF-8 text, and the same settings.
    path = tmp_path / "effectusd.toml"
    text = VALID_TOML.format(headers="", destination="payments")
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())

    config = load_config(path)

    assert config.destinations["payments"].base_url == "http://127.0.0.1:9"
    assert list(config.verbs) == ["payments.charge"]


@pytest.mark.parametrize("opening", ["a = ", 'a = { b = { c = "d" } }\ne = '])
def test_a_toml_array_nested_100000_deep_is_one_config_error_naming_the_file(
    tmp_path: Path, opening: str
) -> None:
    path = tmp_path / "effectusd.toml"
    path.write_text(opening + "[" * 100_000 + "]" * 100_000 + "\n")

    with pytest.raises(ConfigError) as refused:
        load_config(path)

    message = str(refused.value)
    assert message.startswith(f"{path}: not valid TOML: ")
    assert "nested too deeply" in message and "\n" not in message
