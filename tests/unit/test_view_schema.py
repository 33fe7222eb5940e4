"""The JSON Schema published in docs/schema/ is the typed views' own (``view_schemas()``), so
what ``sagas show --json`` / ``sagas list --json`` print and what the docs promise cannot drift.

After changing a view: ``.venv/bin/python -m tests.unit.test_view_schema`` rewrites the files.
"""

from __future__ import annotations

import json
from pathlib import Path

from effectusd.core.states import SagaState
from effectusd.core.views import view_schemas

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "docs" / "schema"


def text(schema: object) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def test_the_published_schemas_are_the_views_schemas() -> None:
    for name, schema in view_schemas().items():
        published = SCHEMA_DIR / name
        assert published.is_file(), f"{published} is missing: python -m tests.unit.test_view_schema"
        assert published.read_text() == text(schema), f"{name} is stale: rewrite it (see above)"
    assert sorted(p.name for p in SCHEMA_DIR.glob("*.json")) == sorted(view_schemas())


def test_the_schema_names_every_state_and_the_promised_fields() -> None:
    saga = view_schemas()["saga.json"]
    definitions = saga["$defs"]
    assert definitions["SagaState"]["enum"] == [state.value for state in SagaState]
    assert {"saga_id", "state", "steps", "timeline", "next_actions"} <= set(saga["required"])
    attempt = definitions["AttemptView"]["properties"]
    assert attempt["sent_at"]["anyOf"][0] == {"type": "string", "format": "date-time"}


def write() -> None:
    SCHEMA_DIR.mkdir(exist_ok=True)
    for name, schema in view_schemas().items():
        (SCHEMA_DIR / name).write_text(text(schema))


if __name__ == "__main__":
    write()
