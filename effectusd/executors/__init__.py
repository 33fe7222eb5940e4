"""Executors carry out one invocation against a destination and classify what happened."""

from effectusd.executors.protocol import CallResult, Executor, FencingGrant, Invocation

__all__ = ["CallResult", "Executor", "FencingGrant", "Invocation"]
