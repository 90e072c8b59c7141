"""Pausing Python's cyclic garbage collector during a bulk load and audit.

Loading tens of thousands of manifests (or 150,000 pods from an API server) allocates millions of
objects that live until the audit ends; the collector's full passes walk all of them again and
again — measured at 40-45 % of a large scan — while finding nothing to free (parsed YAML and JSON
hold no cycles). Automatic collection is paused for the audit and resumed after; one explicit
collection then frees whatever cycles were made.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused(*, resume: bool = True) -> Iterator[None]:
    """Automatic collection off for the block, back on after it unless `resume` is False.

    `resume=False` is for one-shot commands whose process ends with the block: everything the
    audit allocated still sits in the youngest generation, so the first pass after re-enabling
    walks all of it (a few tenths of a second on a large scan) just before the process exits.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled and resume:
            gc.enable()


def freeze(*, collect: bool = False) -> None:
    """Move every object alive now out of the collector's reach (gc.freeze), for a long-running
    process that holds a large, long-lived heap: the admission webhook's warm model is hundreds of
    MiB of JSON dicts that live for hours, and a full collection walks all of them (half a second
    at 50,000 pods) while every answer in flight waits. Frozen objects are still freed by
    reference counting when dropped (the model's objects hold no cycles); only cyclic garbage
    alive at the moment of a freeze is kept. `collect`: collect first (once, at start-up)."""
    if collect:
        gc.collect()
    gc.freeze()
