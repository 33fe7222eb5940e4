"""The fencing authority in the configuration (``[fencing] url``) and the ``{store}`` placeholder
of fencing templates: what is refused at load and why (never quoting a URL or a value), and
how a resource is named on the authority. No database is opened."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from effectusd.cli import main
from effectusd.config import ConfigError, load_config, parse_config
from effectusd.core.contracts import VerbContract
from effectusd.core.templates import TemplateError
from effectusd.fencing.authority import carry, store_resource

SECRET = "pa55word-never-shown"


def config(verbs: dict[str, Any], stores: int = 2, **fencing: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "destinations": {"d": {"base_url": "http://127.0.0.1:9"}},
        "verbs": {name: {"destination": "d", "path": f"/{name}", **v} for name, v in verbs.items()},
        "fencing": fencing,
    }
    if stores > 1:
        data["database"] = {
            "stores": {
                f"s{n}": {"url": f"postgresql://app:{SECRET}@db/s{n}", "namespace": f"n{n}"}
                for n in range(stores)
            }
        }
    else:
        data["database"] = {"url": f"postgresql://app:{SECRET}@db/s0"}
    return data


FENCED = {"pay": {"fencing": ["account:{args.account}"]}, "note": {}}


def refusal(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(data, "effectusd.toml")
    message = str(caught.value)
    assert SECRET not in message
    return message


def test_several_stores_with_a_fenced_verb_and_no_authority_are_refused_saying_why() -> None:
    message = refusal(config(FENCED))

    assert message.startswith("effectusd.toml: fencing.url: verb(s) pay are fenced")
    assert "lists 2 stores" in message
    assert "interleave" in message
    assert "set fencing.url" in message


def test_several_stores_without_fenced_verbs_need_no_authority() -> None:
    assert parse_config(config({"note": {}})).fencing.url is None


def test_one_store_with_fenced_verbs_needs_no_authority() -> None:
    loaded = parse_config(config(FENCED, stores=1))

    assert loaded.fencing.url is None
    assert loaded.verbs["pay"].fencing == ("account:{args.account}",)


def test_several_stores_with_an_authority_load() -> None:
    url = f"postgresql://app:{SECRET}@authority/fencing"

    assert parse_config(config(FENCED, url=url)).fencing.url == url


def test_an_authority_in_a_store_database_is_refused_by_the_store_label() -> None:
    message = refusal(config(FENCED, url="postgresql://other:pw@DB:5432/s1"))

    assert "fencing.url: names the same database as store 's1'" in message


def test_an_authority_in_the_one_store_database_is_refused() -> None:
    message = refusal(config(FENCED, stores=1, url=f"postgresql://app:{SECRET}@db/s0"))

    assert "fencing.url: names the same database as [database] url;" in message


def test_a_sqlite_authority_is_refused() -> None:
    message = refusal(config(FENCED, url="sqlite:///fencing.db"))

    assert "fencing.url: names a SQLite database; the fencing authority is PostgreSQL" in message


def test_the_refusal_holds_when_an_environment_url_names_the_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "effectusd.toml"
    path.write_text(
        '[fencing]\nurl = "postgresql://a@authority/f"\n'
        '[database.stores.s0]\nurl = "postgresql://a@db/s0"\nnamespace = "n0"\n'
        '[database.stores.s1]\nurl = "postgresql://a@db/s1"\nnamespace = "n1"\n'
        '[destinations.d]\nbase_url = "http://127.0.0.1:9"\n'
        '[verbs.pay]\ndestination = "d"\npath = "/p"\nfencing = ["a:{args.x}"]\n'
    )
    monkeypatch.setenv("EFFECTUSD_DATABASE_URL", f"s1=postgresql://a:{SECRET}@authority/f")

    with pytest.raises(ConfigError) as caught:
        load_config(path)

    assert "EFFECTUSD_DATABASE_URL: fencing.url: names the same database as store 's1'" in str(
        caught.value
    )
    assert SECRET not in str(caught.value)


def verb(*fencing: str) -> VerbContract:
    return VerbContract(name="pay", destination="d", path="/pay", fencing=fencing)


def test_store_is_kept_as_written_in_a_resource_until_the_authority_names_the_store() -> None:
    resources = verb("tenant:{store}:{args.account}", "merchant:{args.m}").resolve_fencing(
        {"account": "7", "m": "shared"}, {}
    )

    assert resources == ["merchant:shared", "tenant:{store}:7"]
    assert [store_resource(r, "east") for r in resources] == ["merchant:shared", "tenant:east:7"]
    assert [store_resource(r, None) for r in resources] == resources


def test_a_value_holding_the_store_placeholder_is_refused_by_its_key_not_its_value() -> None:
    with pytest.raises(TemplateError) as caught:
        verb("account:{args.account}").resolve_fencing({"account": "x{store}y-secret"}, {})

    assert "args.account" in str(caught.value)
    assert "secret" not in str(caught.value)


def test_store_is_refused_in_a_path_naming_the_template() -> None:
    with pytest.raises(ValueError, match=r"'/pay/\{store\}'.*must be \{args.NAME\}"):
        VerbContract(name="pay", destination="d", path="/pay/{store}")


def test_a_misspelt_store_placeholder_names_the_template_and_what_is_allowed() -> None:
    with pytest.raises(ValueError, match=r"'a:\{stores\}'.*\{store\}"):
        verb("a:{stores}")


def test_carry_raises_each_named_resource_to_the_highest_token_of_the_store() -> None:
    operation = carry([("tenant:{store}:7", 5), ("acct:1", 9), ("tenant:east:7", 8)], "east")

    statement, params = next(operation)

    assert statement == "raise_fence_counters"
    assert params == {"resources": ["acct:1", "tenant:east:7"], "tokens": [9, 8]}
    with pytest.raises(StopIteration):
        operation.send([])


def test_carry_of_a_store_that_granted_nothing_runs_no_statement() -> None:
    with pytest.raises(StopIteration):
        next(carry([], "east"))


def test_check_and_run_refuse_several_stores_fencing_without_an_authority(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EFFECTUSD_DATABASE_URL", raising=False)
    path = tmp_path / "effectusd.toml"
    path.write_text(
        f'[database.stores.s0]\nurl = "postgresql://a:{SECRET}@db/s0"\nnamespace = "n0"\n'
        f'[database.stores.s1]\nurl = "postgresql://a:{SECRET}@db/s1"\nnamespace = "n1"\n'
        '[destinations.d]\nbase_url = "http://127.0.0.1:9"\n'
        '[verbs.pay]\ndestination = "d"\npath = "/p"\nfencing = ["a:{args.x}"]\n'
    )
    plan = tmp_path / "plan.json"
    plan.write_text('{"steps": []}')

    for args in (["check", str(plan)], ["run", "--store", "s0"]):
        result = CliRunner().invoke(main, ["--config", str(path), *args])

        assert result.exit_code == 3, result.output
        assert "fencing.url: verb(s) pay are fenced" in result.output
        assert SECRET not in result.output
