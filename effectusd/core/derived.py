"""Frozen models whose values derived from their fields are worked out once.

A frozen pydantic model may keep what it derives from its fields in ``functools.cached_property``
(written to the instance's ``__dict__``; pydantic leaves it out of the fields, their equality
and dumps). ``model_copy`` copies that ``__dict__``, so a copy made with changes would keep the
values of the fields it changed: it drops the names ``_DERIVED`` lists, to be worked out again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

from pydantic import BaseModel


class DerivedOnce(BaseModel):
    _DERIVED: ClassVar[tuple[str, ...]] = ()  # the model's cached_property names

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        copy = super().model_copy(update=update, deep=deep)
        for name in self._DERIVED:
            copy.__dict__.pop(name, None)
        return copy
