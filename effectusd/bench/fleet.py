"""`bench --stores N`: N scratch databases on the one server, each a store of its own with its
own namespace, the sagas split evenly among them, one daemon process serving them all (the
fleet, docs/design.md section 10; docs/performance.md, "Many stores: the scale model")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from effectusd.config import Config
from effectusd.core.stores import Store
from effectusd.dispatcher.daemon import Daemon
from effectusd.dispatcher.fleet import Fleet
from effectusd.executors.protocol import Executor


def split_sagas(sagas: int, stores: int) -> list[int]:
    """``sagas`` dealt evenly among ``stores``; when they do not divide, the first stores take
    one more each."""
    if stores < 1:
        raise ValueError("stores: at least one")
    base, extra = divmod(sagas, stores)
    return [base + (1 if index < extra else 0) for index in range(stores)]


def bench_stores(urls: Sequence[str], namespace: str) -> list[Store]:
    """The stores the bench serves: one URL is the single store (no label, the configured
    namespace: today's bench); several are labelled s0, s1, … each with a namespace of its own."""
    if len(urls) == 1:
        return [Store(None, urls[0], namespace)]
    return [Store(f"s{index}", url, f"{namespace}-s{index}") for index, url in enumerate(urls)]


def store_config(config: Config, store: Store) -> Config:
    """``config`` as an application submitting into ``store`` holds it: its namespace."""
    return config.model_copy(update={"namespace": store.namespace})


def serving(
    config: Config, stores: Sequence[Store], executors: Mapping[str, Executor]
) -> Daemon | Fleet:
    """What serves ``stores`` in this process: a Daemon for one, as `run` serves one; a Fleet
    for several, as `run` serves ``[database.stores]``."""
    if len(stores) == 1:
        return Daemon(config, stores[0].url, executors=executors)
    return Fleet(config, stores, executors=executors)


def is_listening(runner: Daemon | Fleet) -> bool:
    """Every store served and listening for notifications."""
    daemons = [part.daemon for part in runner.parts] if isinstance(runner, Fleet) else [runner]
    return all(daemon.started and daemon.listening for daemon in daemons)
