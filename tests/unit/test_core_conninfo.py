"""The database URL parsed once, where it is read, as libpq parses it: the same parameters as
psycopg's conninfo_to_dict for every form a person writes, and a fixed text that quotes
nothing for every form libpq refuses."""

from __future__ import annotations

import pytest
from psycopg import ProgrammingError
from psycopg.conninfo import conninfo_to_dict

from effectusd.core.conninfo import ConninfoError, conninfo_params

SECRET = "S3cr3t-pw"


@pytest.mark.parametrize(
    "text",
    [
        "postgresql:///effectusd",
        "postgresql://u@db1:5432,db2:5432/app?target_session_attrs=read-write",
        "postgresql://h1,h2/db",
        "postgresql://h1,h2:5433/db",
        "postgresql://h:/db",
        f"postgres://u:{SECRET}%40x@[::1]:5432/d%20b?sslmode=disable&application_name=a%26b",
        "postgresql://[::1],[fe80::1]:5/db",
        "postgresql://%2Fvar%2Frun%2Fpostgresql/db",
        "postgresql://u:@h/db",
        "postgresql://@h",
        "postgresql://h?",
        "postgresql://h/?ssl=true",
        f"postgresql://u:{SECRET}:x@h/db",
        "postgresql://h/db?options=-c%20x%3Dy",
        "host=a port=1 dbname=x",
        "host = a  dbname =x",
        f"host=a password='{SECRET} \\' c' dbname=x",
        "password=a\\ b host=h",
        "password='' host=h",
        "host=127.0.0.1,db port=1,5432 user=u dbname=d",
    ],
)
def test_the_parameters_are_libpqs(text: str) -> None:
    assert conninfo_params(text) == conninfo_to_dict(text)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (f"postgresql://app:{SECRET}%zz@h/db", "a % is not followed by two hexadecimal digits"),
        (f"postgresql://app:50%{SECRET}@h/db", "a % is not followed by two hexadecimal digits"),
        (f"postgresql://app:{SECRET}%@h/db", "a % is not followed by two hexadecimal digits"),
        (f"postgresql://app:{SECRET}@[127.0.0.1/db", "has no closing ]"),
        (f"postgresql://app:{SECRET}@[]/db", "is empty"),
        (f"postgresql://app:{SECRET}@[::1]x/db", "followed by neither"),
        (f"host=h password={SECRET} more dbname=d", "a keyword is not followed by ="),
        (f"host=h password='{SECRET}", "a quoted value has no closing quote"),
        (f"postgresql://app:{SECRET}@h/db?sslmode", "a query parameter has no ="),
        (f"postgresql://app:{SECRET}@h/db?a=b=c", "a second ="),
        (f"postgresql://app:{SECRET}%00@h/db", "%00"),
    ],
)
def test_what_libpq_refuses_is_refused_with_a_fixed_text(text: str, reason: str) -> None:
    with pytest.raises(ProgrammingError):
        conninfo_to_dict(text)

    with pytest.raises(ConninfoError) as refused:
        conninfo_params(text)

    assert reason in str(refused.value)
    assert SECRET not in str(refused.value) and "app" not in str(refused.value)
