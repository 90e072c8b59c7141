"""Types of the optional C extension auditor/_faststat.c (see there and incremental.stat_changes)."""

def changes(
    paths: list[str], recorded: list[tuple[int, ...]], trusted: int, directories: bool
) -> dict[int, tuple[int, ...]] | None: ...
