"""What the ledger knows of one key, for ``GET <mount>/keys/{key}`` (asgi.py): a caller that
lost an answer asks instead of guessing.

- ``committed``: 200, the key took effect: with the stored answer (its status, outcome class,
  fencing acknowledgement and JSON body), the one every replay would give;
- ``refused``: 422, the stored answer is a refusal (a ``PermanentFailure``): nothing took
  effect under the key and nothing will, since every retry under it replays the refusal; with
  the stored answer, as for ``committed``. Never a 2xx, so that a probe that reads a 2xx as
  "it took effect" cannot take a refusal for an effect;
- ``in_progress``: 409, a request's transaction holds the key now; ask again;
- ``unknown``: 404, no answer stored and no transaction open: the key never arrived, rolled
  back, was forgotten, or was pruned after its retention.

The check for an open transaction comes before the read of the ledger, so an answer committed
before the probe began is always seen. Like a replay, the answer exposes what the key stored;
serve the route only where a replay may be asked for. The decisions are written once here;
ledger.py and sqlite.py run the steps on their database, as they do an Exchange's.
"""

from __future__ import annotations

from collections.abc import Generator
from enum import StrEnum
from typing import Any

from effectusd.core.canonical import canonical_bytes, parse_json
from effectusd.core.states import OutcomeClass
from effectusd.core.wire import is_hex64
from effectusd.destination.exchange import Query
from effectusd.destination.replies import Reply, error_reply

KEY = "key"  # the path parameter errors name


class KeyState(StrEnum):
    COMMITTED = "committed"
    REFUSED = "refused"
    IN_PROGRESS = "in_progress"
    UNKNOWN = "unknown"


STATUS = {
    KeyState.COMMITTED: 200,
    KeyState.REFUSED: 422,
    KeyState.IN_PROGRESS: 409,
    KeyState.UNKNOWN: 404,
}


def bad_key_reply() -> Reply:
    return error_reply(400, OutcomeClass.PERMANENT, f"{KEY}: expected 64 lowercase hex digits")


def probe_steps(key: str) -> Generator[Query, Any, Reply]:
    """The statements to run (each sent back its first row) and the probe's answer."""
    if not is_hex64(key):
        return bad_key_reply()  # nothing run: every key the kit stores is one
    (held,) = yield Query("probe_key_held", {KEY: key})
    row = yield Query("probe_key", {KEY: key})
    if row is None:
        state = KeyState.IN_PROGRESS if held else KeyState.UNKNOWN
        return _answer(key, state)
    stored, status, body, outcome, acknowledged = row
    if stored != "completed":  # only seen where a mutation ended the kit's transaction itself
        return _answer(key, KeyState.IN_PROGRESS)
    answer = {
        "status": status,
        "outcome": outcome,
        "fencing_acknowledged": bool(acknowledged),  # SQLite stores booleans as 0/1
        "body": parse_json(bytes(body)),
    }
    # The ledger stores successes and refusals only (docs/design.md section 9); a 2xx is a
    # success whatever else the answer says (section 5), anything else a refusal.
    took_effect = 200 <= int(status) < 300
    return _answer(key, KeyState.COMMITTED if took_effect else KeyState.REFUSED, answer)


def _answer(key: str, state: KeyState, answer: dict[str, Any] | None = None) -> Reply:
    document: dict[str, Any] = {KEY: key, "state": state.value}
    if answer is not None:
        document["answer"] = answer
    return Reply(STATUS[state], canonical_bytes(document))
