"""Executors carry out one invocation against a destination and classify what happened."""

from effectusd.executors.protocol import Executor, FencingGrant, Invocation

__all__ = ["Executor", "FencingGrant", "Invocation"]
