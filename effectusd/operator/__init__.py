"""Operator actions: resolve, retry, cancel and adopt-contract one saga; prune finished ones.

resolve, retry and cancel are store operations (generators, see effectusd.store.operations):
run one with ``store_backend(url).runner.run(conn, operation)`` (effectusd.store.sql) and it is one
transaction that locks the saga row, then its dispatch rows, checks that the state allows the
action (effectusd.core.operator_decisions), applies it and appends it to the timeline with the
actor and evidence. A refusal raises ``Refused`` and writes nothing. ``on_saga`` runs one
on the saga a person names by the start of its id.
"""

from effectusd.core.operator_decisions import RefusalKind, Refused, Resolution
from effectusd.operator.actions import resolve, retry
from effectusd.operator.adopt import VerbAdoptionReport, adopt_contract
from effectusd.operator.cancel import cancel
from effectusd.operator.locked_saga import on_saga
from effectusd.operator.prune import PruneReport, prune
from effectusd.operator.report import ActionReport

__all__ = [
    "ActionReport",
    "PruneReport",
    "RefusalKind",
    "Refused",
    "Resolution",
    "VerbAdoptionReport",
    "adopt_contract",
    "cancel",
    "on_saga",
    "prune",
    "resolve",
    "retry",
]
