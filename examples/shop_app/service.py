"""What both destination services share: serve a kit app on SQLite from the command line, and
read a typed argument (a wrong one is a permanent failure: retrying cannot fix it)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TypeVar

import uvicorn
from starlette.applications import Starlette

from effectusd.destination import EffectusRequest, PermanentFailure, SqliteMutation
from effectusd.destination.asgi import SqliteSetup, effectus_app

T = TypeVar("T", str, int)


def argument(request: EffectusRequest, name: str, kind: type[T]) -> T:
    value = request.arguments.get(name) if isinstance(request.arguments, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise PermanentFailure(f"{name}: required {kind.__name__}")
    return value


def serve(name: str, port: int, routes: Mapping[str, SqliteMutation], setup: SqliteSetup) -> None:
    parser = argparse.ArgumentParser(description=f"the example shop's {name} service")
    parser.add_argument("--port", type=int, default=port, help="0 picks a free port")
    parser.add_argument("--database-url", default=f"sqlite:///{name}.db")
    args = parser.parse_args()
    app: Starlette = effectus_app(args.database_url, routes, setup=setup)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="info")
