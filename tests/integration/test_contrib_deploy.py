"""The deployment recipes in contrib/ hold together (docs/operations.md section 7).

The systemd unit passes `systemd-analyze verify`; the compose file's effectusd.toml loads with
the loader the CLI uses and checks examples/checkout.json as `effectusd check` does; and the
compose file, the Containerfile and the unit agree with that config and with the daemon's stop
bounds. No image is built here (no registry to pull python:3.11-slim or postgres:15 from), so
the Containerfile is checked as text.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from click.testing import CliRunner

from effectusd.cli import main
from effectusd.config import Config, DispatcherConfig, load_config
from effectusd.core.database_url import PostgresDatabase, parse_database_url
from effectusd.core.durations import parse_duration
from effectusd.dispatcher.daemon import CLOSE_BOUND_S, LOOP_STOP_S, RECORD_DRAIN_S
from tests.support import required

ROOT = Path(__file__).resolve().parents[2]
CONTRIB = ROOT / "contrib"
UNIT = CONTRIB / "systemd/effectusd.service"
CONTAINERFILE = CONTRIB / "container/Containerfile"
COMPOSE_DIR = CONTRIB / "compose"
INSTALLED_EFFECTUSD = "/opt/effectusd/bin/effectusd"  # where the unit expects the install
# What a stop may take on top of shutdown_grace before the daemon has exited (daemon.py).
DRAIN_OVERHEAD = timedelta(seconds=LOOP_STOP_S + RECORD_DRAIN_S + CLOSE_BOUND_S)


# --- systemd -------------------------------------------------------------------------------


def systemd_analyze() -> str:
    """The systemd-analyze binary (tests.support.required: skips locally, fails in CI)."""
    found = shutil.which("systemd-analyze")
    if found is None:
        required.missing("systemd-analyze is needed to verify contrib/systemd")
    return found


def verify_problems(unit_text: str, directory: Path) -> str:
    """What `systemd-analyze verify` says about the unit, with its binary pointed at this
    venv's effectusd (verify insists that ExecStart exists). It exits 0 even for a misspelled
    key or an unparsable value, only printing them, so any output at all is a problem."""
    here = Path(sys.executable).parent / "effectusd"
    assert here.is_file(), f"no effectusd next to {sys.executable}"
    unit = directory / "effectusd.service"
    unit.write_text(unit_text.replace(INSTALLED_EFFECTUSD, str(here)), encoding="utf-8")
    done = subprocess.run(
        [systemd_analyze(), "verify", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=directory,
        check=False,
    )
    output = (done.stdout + done.stderr).strip()
    return f"exit {done.returncode}: {output}" if done.returncode else output


def unit_settings(text: str) -> dict[str, list[str]]:
    """Every Key=value of the unit, all values of repeated keys, in order."""
    settings: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def test_the_systemd_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    unit_text = UNIT.read_text(encoding="utf-8")
    assert INSTALLED_EFFECTUSD in unit_text
    assert verify_problems(unit_text, tmp_path) == ""


def test_the_verify_check_reports_a_misspelled_key_and_a_bad_value(tmp_path: Path) -> None:
    unit_text = UNIT.read_text(encoding="utf-8")
    broken = re.sub(
        r"^TimeoutStopSec=.*$", "TimeoutStopSec=a-minute", unit_text, flags=re.MULTILINE
    ).replace("KillSignal=", "KillSignl=")
    assert broken != unit_text
    problems = verify_problems(broken, tmp_path)
    assert "KillSignl" in problems and "a-minute" in problems


def test_the_unit_runs_the_daemon_with_secrets_by_reference_and_waits_out_its_drain() -> None:
    settings = unit_settings(UNIT.read_text(encoding="utf-8"))
    [start] = settings["ExecStart"]
    assert start.startswith(f"{INSTALLED_EFFECTUSD} --config /etc/effectusd/effectusd.toml run")
    assert settings["ExecStartPre"] == [
        f"{INSTALLED_EFFECTUSD} --config /etc/effectusd/effectusd.toml migrate"
    ]
    assert settings["EnvironmentFile"] == ["/etc/effectusd/effectusd.env"]
    assert not any(k == "Environment" or "PASSWORD" in k.upper() for k in settings)
    assert settings["KillSignal"] == ["SIGTERM"]
    assert settings["Restart"] == ["on-failure"]
    [stop] = settings["TimeoutStopSec"]
    assert parse_duration(stop) > DispatcherConfig().shutdown_grace + DRAIN_OVERHEAD
    for hardening in ("NoNewPrivileges", "ProtectHome", "PrivateTmp", "DynamicUser"):
        assert settings[hardening] == ["yes"], hardening
    assert settings["ProtectSystem"] == ["strict"]
    assert settings["StateDirectory"] == ["effectusd"]


def test_the_example_env_file_names_the_database_url_the_daemon_reads() -> None:
    env = (CONTRIB / "systemd/effectusd.env.example").read_text(encoding="utf-8")
    url = re.search(r"^EFFECTUSD_DATABASE_URL=(\S+)$", env, re.MULTILINE)
    assert url is not None
    assert isinstance(parse_database_url(url.group(1)), PostgresDatabase)


def secret_variables(config: dict[str, Any]) -> set[str]:
    """The environment variables a (parsed TOML) config takes secrets from: each
    destination's bearer_token_env and each console token's env."""
    names = {
        destination["bearer_token_env"]
        for destination in config.get("destinations", {}).values()
        if "bearer_token_env" in destination
    }
    tokens = config.get("console", {}).get("tokens", {})
    return names | {token["env"] for token in tokens.values()}


def documented_configs() -> list[dict[str, Any]]:
    """Every TOML example of docs/configuration.md and docs/operations.md, and the compose
    stack's configuration."""
    blocks = []
    for doc in ("configuration.md", "operations.md"):
        text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
        blocks += re.findall(r"```toml\n(.*?)```", text, re.DOTALL)
    blocks.append((COMPOSE_DIR / "effectusd.toml").read_text(encoding="utf-8"))
    return [tomllib.loads(block) for block in blocks]


def test_the_example_env_file_lists_every_secret_variable_the_documented_configs_name() -> None:
    env = (CONTRIB / "systemd/effectusd.env.example").read_text(encoding="utf-8")
    listed = set(re.findall(r"^#? ?([A-Z][A-Z0-9_]*)=", env, re.MULTILINE))
    wanted = set().union(*(secret_variables(config) for config in documented_configs()))

    assert {"PAYMENTS_TOKEN", "EFFECTUSD_CONSOLE_TOKEN_ONCALL"} <= wanted  # the docs' own
    assert wanted | {"EFFECTUSD_DATABASE_URL"} <= listed, sorted(wanted - listed)


# --- compose and its configuration ---------------------------------------------------------


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((COMPOSE_DIR / "compose.yaml").read_text())
    return loaded


def compose_config() -> Config:
    return load_config(COMPOSE_DIR / "effectusd.toml")


def mounted_config_path(service: dict[str, Any]) -> str:
    """Where the service mounts contrib/compose/effectusd.toml."""
    targets = [
        volume.split(":")[1]
        for volume in service["volumes"]
        if (COMPOSE_DIR / volume.split(":")[0]).resolve() == COMPOSE_DIR / "effectusd.toml"
    ]
    assert len(targets) == 1, service["volumes"]
    return str(targets[0])


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_compose_config_loads_and_checks_the_example_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("EFFECTUSD_DATABASE_URL", raising=False)
    config = compose_config()
    assert config.verbs == load_config(ROOT / "examples/effectusd.toml").verbs
    config_file, plan_file = COMPOSE_DIR / "effectusd.toml", ROOT / "examples/checkout.json"
    result = CliRunner().invoke(
        main, ["--config", str(config_file), "check", "--json", str(plan_file)]
    )
    assert result.exit_code == 0, result.output
    checked = json.loads(result.output)
    assert checked["ok"] is True and checked["steps"] == ["reserve", "charge", "ship"]


def test_the_compose_services_start_in_order_and_the_daemon_reads_the_mounted_config() -> None:
    services = compose()["services"]
    assert set(services) == {"postgres", "migrate", "effectusd", "shop"}
    assert services["postgres"]["image"] == "postgres:15"
    assert "pg_isready" in services["postgres"]["healthcheck"]["test"]
    assert any(v.endswith(":/var/lib/postgresql/data") for v in services["postgres"]["volumes"])
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    daemon = services["effectusd"]
    assert daemon["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    for name, verb in (("migrate", "migrate"), ("effectusd", "run")):
        command = services[name]["command"]
        assert command[-1] == verb
        assert option(command, "--config") == mounted_config_path(services[name])


def test_every_password_in_the_compose_file_is_a_reference_to_the_environment() -> None:
    services = compose()["services"]
    for name, service in services.items():
        for key, value in service["environment"].items():
            if "PASSWORD" in key:
                assert re.fullmatch(r"\$\{POSTGRES_PASSWORD(:\?[^}]*)?\}", value), (name, key)
            elif "TOKEN" in key:
                assert re.fullmatch(rf"\$\{{{key}:\?[^}}]*\}}", value), (name, key)
            elif "://" in value:
                assert urlsplit(value).password is None, (name, key)
    url = services["effectusd"]["environment"]["EFFECTUSD_DATABASE_URL"]
    database = parse_database_url(url)
    assert isinstance(database, PostgresDatabase)
    assert urlsplit(url).hostname == "postgres"


def test_the_destinations_are_the_shop_service_on_the_port_it_listens_on() -> None:
    shop = compose()["services"]["shop"]
    listens = int(option(shop["command"], "--port"))
    assert option(shop["command"], "--host") == "0.0.0.0"  # reachable from the daemon
    assert urlsplit(shop["environment"]["SHOP_DATABASE_URL"]).path == "/shop"
    assert "CREATE DATABASE shop" in (COMPOSE_DIR / "initdb/shop.sql").read_text()
    destinations = compose_config().destinations
    assert destinations
    for name, destination in destinations.items():
        url = urlsplit(destination.base_url)
        assert (url.hostname, url.port) == ("shop", listens), name
        assert destination.timeout < compose_config().dispatcher.shutdown_grace, name


def test_compose_serves_the_console_behind_a_token_it_passes_by_reference() -> None:
    config = compose_config()
    environment = compose()["services"]["effectusd"]["environment"]

    assert config.console.enabled and config.observability.http_port is not None
    # Beyond the container's loopback (the published port reaches it), so tokens are a must.
    assert config.observability.http_host == "0.0.0.0" and config.console.tokens
    assert any(token.scope == "write" for token in config.console.tokens.values())
    for token in config.console.tokens.values():
        assert environment[token.env].startswith(f"${{{token.env}:?")
    assert "EFFECTUSD_CONSOLE_TOKEN_ONCALL=$(openssl rand -base64 32)" in (
        COMPOSE_DIR / "compose.yaml"
    ).read_text(encoding="utf-8")


def test_the_daemon_container_may_finish_its_drain_before_it_is_killed() -> None:
    daemon = compose()["services"]["effectusd"]
    grace = compose_config().dispatcher.shutdown_grace
    assert parse_duration(daemon["stop_grace_period"]) > grace + DRAIN_OVERHEAD


# --- the Containerfile ---------------------------------------------------------------------


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    lines = [
        line
        for line in CONTAINERFILE.read_text(encoding="utf-8").splitlines()
        if not line.lstrip().startswith("#")
    ]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    found = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last_from:]


def test_the_image_is_python_slim_runs_effectusd_as_a_user_and_stops_with_sigterm() -> None:
    steps = instructions()
    assert all(args.split()[0] == "python:3.11-slim" for word, args in steps if word == "FROM")
    stage = dict(final_stage())
    user = stage["USER"]
    assert user not in ("root", "0") and not user.startswith(("root:", "0:"))
    assert json.loads(stage["ENTRYPOINT"]) == ["effectusd"]
    assert stage["STOPSIGNAL"] == "SIGTERM"
    installs = " ".join(args for word, args in steps if word == "RUN")
    assert "pip wheel" in installs and "pip install" in installs
    for word, args in steps:
        if word == "COPY" and not args.startswith("--from"):
            for source in args.split()[:-1]:
                assert (ROOT / source).exists(), f"COPY {source}: not in the build context"


def test_the_image_runs_the_daemon_on_the_port_its_healthcheck_probes() -> None:
    # Whatever config is mounted: `run` alone opens no port unless the config sets one.
    stage = dict(final_stage())
    command = json.loads(stage["CMD"])
    probed = re.search(r"http://127\.0\.0\.1:(\d+)/healthz", stage["HEALTHCHECK"])

    assert command[0] == "run" and probed is not None
    assert option(command, "--http-port") == probed.group(1) == stage["EXPOSE"]


def test_the_healthcheck_asks_the_port_the_compose_config_serves_health_on() -> None:
    stage = dict(final_stage())
    port = compose_config().observability.http_port
    assert port is not None
    assert f"http://127.0.0.1:{port}/healthz" in stage["HEALTHCHECK"]
    assert stage["EXPOSE"] == str(port)
    assert compose_config().observability.http_host == "0.0.0.0"
    assert f"127.0.0.1:{port}:{port}" in compose()["services"]["effectusd"]["ports"]


def test_compose_builds_the_containerfile_with_what_the_shop_runs() -> None:
    services = compose()["services"]
    build = services["effectusd"]["build"]
    assert (COMPOSE_DIR / build["context"]).resolve() == ROOT
    assert (COMPOSE_DIR / build["context"] / build["dockerfile"]).resolve() == CONTAINERFILE
    assert build["args"]["EXTRAS"] == "[destination]"  # the shop needs the destination kit
    shop_script = services["shop"]["entrypoint"][-1]
    copies = [args.split() for word, args in final_stage() if word == "COPY"]
    assert ["contrib/kit_shop_service.py", shop_script] in copies
    env = dict(final_stage())["ENV"]
    config_path = mounted_config_path(services["effectusd"])
    assert f"EFFECTUSD_CONFIG={config_path}" in env
