"""The README's quick start needs nothing but Python: `make demo` runs on SQLite files with no
database URL set, and any attempt to reach PostgreSQL fails the run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Loaded by every Python process of the demo (the shop too): a PostgreSQL connection attempt
# raises, so the demo can only pass if nothing in it needs a PostgreSQL server.
NO_POSTGRES = """
import psycopg

def _refuse(*args, **kwargs):
    raise RuntimeError("the quick start tried to connect to PostgreSQL")

psycopg.connect = _refuse
psycopg.Connection.connect = classmethod(_refuse)
psycopg.AsyncConnection.connect = classmethod(_refuse)
"""


def test_the_demo_runs_without_a_database_url_and_without_postgresql(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(NO_POSTGRES)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"EFFECTUSD_DATABASE_URL", "SHOP_DATABASE_URL", "EFFECTUSD_CONFIG"}
        and not key.startswith("PG")
    }
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    env["PGHOST"] = "127.0.0.1"
    env["PGPORT"] = "9"  # discard: nothing listens there
    guard = subprocess.run(
        [sys.executable, "-c", "import psycopg; psycopg.connect('postgresql:///postgres')"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "tried to connect to PostgreSQL" in guard.stderr  # the guard is really in place
    demo = subprocess.run(
        [sys.executable, str(ROOT / "contrib" / "demo.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    out = demo.stdout
    assert "effectusd's store: sqlite:///.demo/effectusd.db" in out
    assert "saga that completes" in out and "saga that is declined and compensated" in out
    completed, compensated = out.split("saga that is declined and compensated")
    assert "completed" in completed.split("saga that completes")[1]
    assert "compensated" in compensated
    assert "(released)" in out  # the shop undid the declined order's reservation
    assert (ROOT / ".demo" / "effectusd.db").exists()
