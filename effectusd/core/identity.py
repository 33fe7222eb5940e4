"""The identities of docs/design.md section 2. Tests pin each with fixed vectors."""

from __future__ import annotations

import hashlib
import re

from effectusd.core.canonical import canonical_hash, sha256_hex
from effectusd.core.states import Direction

SAGA_TAG = "effectusd/saga/v1"
KEY_TAG = "effectusd/key/v1"
SAGA_ID_CHARS = 64  # a SHA-256 in lowercase hex
_SAGA_ID_PREFIX = re.compile(rf"[0-9a-f]{{1,{SAGA_ID_CHARS}}}")


def tagged_hash(tag: str, *components: str) -> str:
    """H(tag, c1..cn): the tag, a 0x00 byte, then each component length-prefixed (8-byte BE)."""
    digest = hashlib.sha256()
    digest.update(tag.encode("ascii"))
    digest.update(b"\x00")
    for component in components:
        data = component.encode("utf-8")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


def saga_id(namespace: str, execution_id: str, plan_id: str) -> str:
    return tagged_hash(SAGA_TAG, namespace, execution_id, plan_id)


def saga_id_prefix(text: str) -> str | None:
    """A saga id, or the start of one, as a person writes it (any case, spaces around, the
    "…" `sagas list` prints after a shortened id) in the form ids are stored; None when no
    saga id can start so (not hex digits, or longer than an id)."""
    wanted = text.strip().rstrip("…. ").lower()
    return wanted if _SAGA_ID_PREFIX.fullmatch(wanted) else None


def idempotency_key(namespace: str, saga: str, effect_id: str, direction: Direction) -> str:
    """The same for every attempt of one dispatch: the attempt is never an input."""
    way = direction if type(direction) is Direction else Direction(direction)
    return tagged_hash(KEY_TAG, namespace, saga, effect_id, way.value)


def argument_hash(canonical_args: bytes) -> str:
    return sha256_hex(canonical_args)


__all__ = [
    "argument_hash",
    "canonical_hash",
    "idempotency_key",
    "saga_id",
    "saga_id_prefix",
    "tagged_hash",
]
