"""Types of the optional C extension auditor/_faststat.c (see there and incremental._stats)."""

from typing import Literal, overload

@overload
def stats(paths: list[str], directories: Literal[False]) -> list[tuple[int, int, int, int, int]] | None: ...
@overload
def stats(paths: list[str], directories: Literal[True]) -> list[tuple[int, int, int, int]] | None: ...
