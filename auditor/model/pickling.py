"""Compact pickling for the frozen dataclasses the cache keeps by the thousand (findings, group
entries, sources): pickled as their class and init arguments, so unpickling is one constructor
call instead of dataclasses' per-object `__setstate__` (which looks its fields up again for every
object: a third of the time of reading an incremental scan's fragments back)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def by_fields(cls: type[T]) -> type[T]:
    """Class decorator (below @dataclass): pickle instances as `cls(*init fields)`."""
    names = tuple(f.name for f in dataclasses.fields(cls) if f.init)  # type: ignore[arg-type]

    def reduce(self: Any) -> tuple[Callable[..., T], tuple[Any, ...]]:
        return cls, tuple(getattr(self, n) for n in names)

    cls.__reduce__ = reduce  # type: ignore[method-assign]
    return cls
