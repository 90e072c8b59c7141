"""`@value`: the audit's hot internal value classes, immutable to the type checker and fast to make.

A `@dataclass(frozen=True)` sets each field through `object.__setattr__` in its `__init__`: four
times slower than a plain one, and a cold scan of 20,000 objects makes over half a million such
values (endpoints, port sets, verdict segments, label selectors, placement results). A class
decorated `@value` is a slotted, hashable dataclass whose fields mypy (run --strict on the whole
package, in CI) treats as read-only through PEP 681's `frozen_default`, so an assignment to a
field is a type error as it is for a frozen dataclass; at run time it is a plain slotted class.

Also for the values an incremental scan reads back by the thousand from its cache (findings and
their references, sources, load errors, workload references, group entries, roles and edges):
unpickling a fragment is a constructor call per object. What is built once or handed to other
code as configuration (policy packs, settings, stored runs) stays `frozen=True`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T")


@overload
def value(cls: type[T], /) -> type[T]: ...
@overload
def value(*, order: bool = False) -> Callable[[type[T]], type[T]]: ...
@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def value(cls: type[T] | None = None, /, *, order: bool = False) -> Any:
    """`@dataclass(frozen=True, slots=True[, order=True])` for the type checker; at run time the
    same class without the per-field `object.__setattr__` (see the module docstring). Equality
    and the hash are the dataclass's, from the fields (a class's own `__hash__` is kept)."""

    def wrap(c: type[T]) -> type[T]:
        own_hash = "__hash__" in c.__dict__
        return dataclasses.dataclass(slots=True, order=order, unsafe_hash=not own_hash)(c)

    return wrap if cls is None else wrap(cls)
