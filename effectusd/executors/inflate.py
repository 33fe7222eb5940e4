"""An answer's content codings undone in bounded steps, for the transports that decode bodies
themselves (``asyncio`` and ``httpx``; aiohttp decodes its own, bounded per chunk).

We offer gzip and deflate (``ACCEPT_ENCODING``). Each layer hands on at most ``most`` bytes at
a time, so a body that compresses a thousandfold is never held inflated: the reader counts what
comes out and stops past its limit. ``deflate`` is read zlib-wrapped, as specified, or raw, as
some servers send it, told apart by its first byte (a zlib stream's says method 8, deflate).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from typing import Any

ACCEPT_ENCODING = "gzip, deflate"
_GZIP = zlib.MAX_WBITS | 16
_CODINGS = frozenset({"gzip", "x-gzip", "deflate"})


class UndecodableBody(Exception):
    """A body in a coding we did not offer, or that does not decode."""


class _Layer:
    """One coding undone; a deflate layer picks its wrapping at its first byte."""

    __slots__ = ("coding", "decoder")

    def __init__(self, coding: str) -> None:
        self.coding = coding
        self.decoder: Any = None if coding == "deflate" else zlib.decompressobj(_GZIP)

    def decompress(self, data: bytes, most: int) -> bytes:
        if self.decoder is None:
            wrapped = data[0] & 0x0F == 8  # zlib's header names method 8; raw deflate does not
            self.decoder = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        try:
            out: bytes = self.decoder.decompress(data, most)
        except zlib.error:
            raise UndecodableBody() from None
        return out

    @property
    def eof(self) -> bool:
        return self.decoder is not None and bool(self.decoder.eof)

    @property
    def unconsumed_tail(self) -> bytes:
        tail: bytes = self.decoder.unconsumed_tail
        return tail


class Inflater:
    """A body's codings undone, the last applied first, fed as it arrives."""

    __slots__ = ("_layers", "_received")

    def __init__(self, codings: Iterable[str]) -> None:
        """UndecodableBody for a coding we did not offer."""
        self._layers = []
        self._received = 0
        for coding in reversed([name.strip().lower() for name in codings]):
            if coding in ("", "identity"):
                continue
            if coding not in _CODINGS:
                raise UndecodableBody()
            self._layers.append(_Layer(coding))

    def feed(self, data: bytes, most: int) -> Iterator[bytes]:
        """What ``data`` decodes to, in pieces of at most ``most`` bytes."""
        self._received += len(data)
        return _through(self._layers, data, most)

    def close(self) -> None:
        """UndecodableBody if a stream was cut before its end (an empty body is empty)."""
        if self._received and not all(layer.eof for layer in self._layers):
            raise UndecodableBody()


def _through(layers: list[_Layer], data: bytes, most: int) -> Iterator[bytes]:
    """``data`` through every layer, never more than ``most`` bytes out of a layer at once."""
    if not layers:
        if data:
            yield data
        return
    head, rest = layers[0], layers[1:]
    out = b""
    # A full output may leave decoded bytes inside zlib even with no input left to feed.
    while data or len(out) == most:
        out = head.decompress(data, most)
        data = head.unconsumed_tail
        yield from _through(rest, out, most)
        if head.eof:
            return


def inflated(raw: bytes, codings: Iterable[str], limit: int) -> bytes | None:
    """A whole body with its codings undone; None once it decodes past ``limit`` bytes."""
    inflater = Inflater(codings)
    chunks: list[bytes] = []
    size = 0
    for chunk in inflater.feed(raw, limit + 1):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    inflater.close()
    return b"".join(chunks)
