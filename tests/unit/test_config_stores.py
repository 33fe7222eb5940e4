"""Several stores in one configuration ([database.stores.LABEL]): what is refused at load and
why (naming labels, never a URL), and how --database-url and EFFECTUSD_DATABASE_URL rank
against the tables. No database is opened: every refusal comes before one would be."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from effectusd.cli import main
from effectusd.cli.app import Context
from effectusd.config import ConfigError, load_config
from effectusd.core.stores import Store, database_key, env_urls, labelled_url

SECRET = "pa55word-never-shown"


def write(tmp_path: Path, stores: dict[str, tuple[str, str]], extra: str = "") -> Path:
    lines = [extra]
    for label, (url, namespace) in stores.items():
        lines += [f'[database.stores."{label}"]', f'url = "{url}"', f'namespace = "{namespace}"']
    path = tmp_path / "effectusd.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def pg(database: str, host: str = "db1") -> str:
    return f"postgresql://app:{SECRET}@{host}:5432/{database}"


def refused(path: Path, monkeypatch: pytest.MonkeyPatch, env: str | None = None) -> str:
    if env is None:
        monkeypatch.delenv("EFFECTUSD_DATABASE_URL", raising=False)
    else:
        monkeypatch.setenv("EFFECTUSD_DATABASE_URL", env)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert SECRET not in message
    return message


def test_each_store_is_loaded_with_its_label_url_and_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EFFECTUSD_DATABASE_URL", raising=False)
    path = write(tmp_path, {"east": (pg("e"), "tenant-e"), "west": (pg("w"), "tenant-w")})

    assert load_config(path).stores() == [
        Store("east", pg("e"), "tenant-e"),
        Store("west", pg("w"), "tenant-w"),
    ]


def test_without_stores_the_one_store_is_the_database_url_and_top_level_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EFFECTUSD_DATABASE_URL", raising=False)
    path = write(tmp_path, {}, f'namespace = "shop"\n[database]\nurl = "{pg("one")}"')

    assert load_config(path).stores() == [Store(None, pg("one"), "shop")]


def test_two_stores_with_one_namespace_are_refused_naming_both_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, {"east": (pg("e"), "same"), "west": (pg("w"), "same")})

    message = refused(path, monkeypatch)

    assert "east and west have one namespace" in message
    assert "idempotency keys" in message


def test_two_stores_on_one_database_are_refused_however_the_url_is_spelt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other_spelling = "postgresql://ops@DB1/orders"  # another user, the default port
    path = write(tmp_path, {"east": (pg("orders"), "e"), "west": (other_spelling, "w")})

    assert "east and west name one database" in refused(path, monkeypatch)


def test_a_sqlite_store_among_several_is_refused_and_alone_is_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    several = write(tmp_path, {"east": (pg("e"), "e"), "local": ("sqlite:///x.db", "l")})
    assert "local: its url names a SQLite database; several stores are PostgreSQL" in refused(
        several, monkeypatch
    )

    alone = write(tmp_path, {"local": ("sqlite:///x.db", "l")})
    assert load_config(alone).stores() == [Store("local", "sqlite:///x.db", "l")]


@pytest.mark.parametrize("label", ["East", "1st", "a b", "x" * 33, ""])
def test_a_label_outside_the_pattern_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, label: str
) -> None:
    path = write(tmp_path, {label: (pg("e"), "e")})

    message = refused(path, monkeypatch)

    assert f"{label!r} is not a store label" in message


def test_database_url_beside_stores_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, {"east": (pg("e"), "e")}, f'[database]\nurl = "{pg("one")}"')

    assert "url and stores: give one of them" in refused(path, monkeypatch)


def test_a_store_without_a_namespace_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "effectusd.toml"
    path.write_text(f'[database.stores.east]\nurl = "{pg("e")}"\n')

    assert "database.stores.east.namespace: Field required" in refused(path, monkeypatch)


# -- EFFECTUSD_DATABASE_URL and --database-url ------------------------------------------------


def test_the_environment_url_overrides_the_single_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, {}, f'[database]\nurl = "{pg("file")}"')
    monkeypatch.setenv("EFFECTUSD_DATABASE_URL", pg("env"))

    assert load_config(path).database.url == pg("env")


def test_a_bare_environment_url_with_stores_is_refused_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, {"east": (pg("e"), "e"), "west": (pg("w"), "w")})

    message = refused(path, monkeypatch, env=pg("env"))

    assert message.startswith("EFFECTUSD_DATABASE_URL: a bare URL names one store")
    assert "east, west" in message and "LABEL=URL" in message


def test_label_equals_url_overrides_that_store_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, {"east": (pg("e"), "e"), "west": (pg("w"), "w")})
    monkeypatch.setenv("EFFECTUSD_DATABASE_URL", f"west={pg('w2', host='db2')}")

    assert [store.url for store in load_config(path).stores()] == [pg("e"), pg("w2", "db2")]


def test_environment_lines_of_label_equals_url_override_each_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # what `run --processes N` hands its children for several stores
    path = write(tmp_path, {"east": (pg("e"), "e"), "west": (pg("w"), "w")})
    lines = f"east={pg('e2', host='db3')}\nwest={pg('w2', host='db2')}"
    monkeypatch.setenv("EFFECTUSD_DATABASE_URL", lines)

    urls = [store.url for store in load_config(path).stores()]

    assert urls == [pg("e2", "db3"), pg("w2", "db2")]


def test_a_keyword_string_over_lines_stays_one_url() -> None:
    assert env_urls("host=db1\ndbname=shop") == ["host=db1\ndbname=shop"]


def test_repeated_database_url_options_override_their_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EFFECTUSD_DATABASE_URL", raising=False)
    path = write(tmp_path, {"east": (pg("e"), "e"), "west": (pg("w"), "w")})
    options = [f"east={pg('e2')}", f"west={pg('w2')}"]

    stores = Context(str(path), options).config.stores()

    assert [store.url for store in stores] == [pg("e2"), pg("w2")]


def test_an_override_that_makes_two_stores_one_database_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, {"east": (pg("e"), "e"), "west": (pg("w"), "w")})

    message = refused(path, monkeypatch, env=f"west={pg('e')}")

    assert "EFFECTUSD_DATABASE_URL: database.stores: east and west name one database" in message


def test_an_override_of_an_unknown_label_is_refused_naming_the_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, {"east": (pg("e"), "e")})

    message = refused(path, monkeypatch, env=f"north={pg('n')}")

    assert "no store 'north'; stores: east" in message


def test_a_libpq_keyword_string_is_a_bare_url_not_a_label() -> None:
    assert labelled_url("host=db1 dbname=orders") == (None, "host=db1 dbname=orders")
    assert labelled_url("east=postgresql://db1/x") == ("east", "postgresql://db1/x")


def test_database_keys_ignore_user_password_case_and_default_port() -> None:
    assert database_key(pg("x")) == database_key("postgresql://other@db1/x")
    assert database_key("postgresql://db1:5433/x") != database_key("postgresql://db1/x")
    assert database_key("postgresql://db1/x") != database_key("postgresql://db1/y")


# -- the command line refuses them at load: exit 3, labels named, URLs never ----------------


def test_the_command_line_refuses_one_namespace_twice_with_exit_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, {"east": (pg("e"), "same"), "west": (pg("w"), "same")})
    env = {"EFFECTUSD_CONFIG": None, "EFFECTUSD_DATABASE_URL": None}

    for command in (["migrate"], ["sagas", "list"], ["run"]):
        result = CliRunner().invoke(main, ["--config", str(path), *command], env=env)

        assert result.exit_code == 3, result.output
        assert "east and west have one namespace" in result.stderr
        assert SECRET not in result.output


def test_a_bare_database_url_option_with_stores_exits_3(tmp_path: Path) -> None:
    path = write(tmp_path, {"east": (pg("e"), "e"), "west": (pg("w"), "w")})
    env = {"EFFECTUSD_CONFIG": None, "EFFECTUSD_DATABASE_URL": None}

    result = CliRunner().invoke(
        main, ["--config", str(path), "--database-url", pg("x"), "sagas", "list"], env=env
    )

    assert result.exit_code == 3
    assert "--database-url: a bare URL names one store" in result.stderr
    assert SECRET not in result.output


@pytest.mark.parametrize("client_class", ["Client", "AsyncClient"])
def test_a_client_of_a_config_with_stores_must_be_given_its_own_store_url(
    client_class: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import effectusd

    monkeypatch.delenv("EFFECTUSD_DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)  # the SQLite default, if it were used, would be made here
    path = write(tmp_path, {"east": (pg("e"), "tenant-e"), "west": (pg("w"), "tenant-w")})
    cls = getattr(effectusd, client_class)

    with pytest.raises(ConfigError) as from_file:
        cls.from_config_file(str(path))
    with pytest.raises(ConfigError) as from_config:
        cls(load_config(path))
    named = cls(load_config(path), database_url=pg("e"))

    for message in (str(from_file.value), str(from_config.value)):
        assert "database.stores" in message and "east, west" in message
        assert "database_url" in message and SECRET not in message
    assert named.database_url == pg("e")
    assert not (tmp_path / "effectusd.db").exists()
