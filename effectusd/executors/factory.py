"""The executor for a destination, by its configured ``transport``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from effectusd.config import DestinationConfig
from effectusd.executors.aiohttp_executor import AiohttpExecutor
from effectusd.executors.asyncio_executor import AsyncioExecutor
from effectusd.executors.base import BaseHttpExecutor
from effectusd.executors.httpx_executor import HttpxExecutor

EXECUTOR_CLASSES: dict[str, type[BaseHttpExecutor[Any, Any]]] = {
    "httpx": HttpxExecutor,
    "aiohttp": AiohttpExecutor,
    "asyncio": AsyncioExecutor,
}


def executor_for(
    name: str, config: DestinationConfig, *, environ: Mapping[str, str] | None = None
) -> BaseHttpExecutor[Any, Any]:
    return EXECUTOR_CLASSES[config.transport](name, config, environ=environ)
