"""`@value(frozen=True)`: the audit's hot internal value classes, immutable to the type checker and
fast to make.

A `@dataclass(frozen=True)` sets each field through `object.__setattr__` in its `__init__`: four
times slower than a plain one, and a cold scan of 20,000 objects makes over half a million such
values (endpoints, port sets, verdict segments, label selectors, placement results). A class
decorated `@value(frozen=True[, order=True])` is, to mypy and to mypyc (auditor/native.py), exactly
`@dataclass(frozen=True[, order=True])` — `value` *is* `dataclasses.dataclass` under TYPE_CHECKING
— so mypy (run --strict on the whole package, in CI) refuses an assignment to a field, and mypyc
compiles it as a native dataclass whose `==` is the dataclass's. At run time it is the same
dataclass without the per-field `object.__setattr__` (immutability is the type checker's): slotted
when run from source; with mypyc's fixed native layout when compiled (no `slots=True` there, which
would rebuild the class mypyc made). Equality and the hash are the dataclass's, from the fields (a
class's own `__hash__` is kept).

Also for the values an incremental scan reads back by the thousand from its cache (findings and
their references, sources, load errors, workload references, group entries, roles and edges):
unpickling a fragment is a constructor call per object. What is built once or handed to other
code as configuration (policy packs, settings, stored runs) stays `@dataclass(frozen=True)`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

T = TypeVar("T")
__all__ = ["value"]

if TYPE_CHECKING:
    # What mypy and mypyc see: dataclasses' own decorator (mypyc recognises it by this name only).
    from dataclasses import dataclass as value
else:

    def value(cls: type[T] | None = None, /, *, frozen: bool = False, order: bool = False) -> Any:
        """At run time: `@dataclass(frozen=True, ...)`'s class without the frozen `__init__` and
        `__setattr__` (see the module docstring); `frozen=True` is required, for the checker."""
        if not frozen:
            raise TypeError("a value class is frozen to the type checker: write @value(frozen=True)")

        def wrap(c: type[T]) -> type[T]:
            own_hash = "__hash__" in c.__dict__
            # A class mypyc compiled (it calls this on its native class, and keeps that class).
            native = "__mypyc_attrs__" in c.__dict__
            made: Callable[[type[T]], type[T]] = dataclasses.dataclass(
                slots=not native, order=order, unsafe_hash=not own_hash
            )
            return made(c)

        return wrap if cls is None else wrap(cls)
