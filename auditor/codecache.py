"""The code `dataclasses` compiles for the auditor's classes, kept beside the package's bytecode.

Python caches the bytecode of modules (`__pycache__`), but not the methods `dataclasses` writes
as text and compiles each time a class is defined (`__init__`, `__repr__`, `__eq__`, `__hash__`,
...): for the auditor's 160 classes that compiling was 0.1 s of every process's start — a sixth
of an incremental re-scan, most of `auditor --help`.

`install()` (run by `auditor/__init__.py`, before any of the auditor's classes is defined) has
dataclasses look each such text of an auditor module up here first. The text is the key, and
the code found is what compiling that very text gives (compiled as `exec` compiles it there: no
inherited future flags, file name ``<string>``), so a class that changed misses and is compiled
as before. Texts compiled in a process are saved when it exits, where and when Python writes
bytecode: beside the package's (or under ``PYTHONPYCACHEPREFIX``), not under ``-B`` or
``PYTHONDONTWRITEBYTECODE``, written whole under a temporary name and renamed into place. The
file is exactly as trusted as the bytecode beside it; one that cannot be read, or holds
anything but texts and code, is ignored. Other packages' dataclasses are left alone.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import dataclasses
import importlib.util
import marshal
import os
import sys
from pathlib import Path
from types import CodeType
from typing import Any

PREFIX = "auditor."
"""Modules whose dataclasses' code is cached."""
MAX_ENTRIES = 4096
"""Past this many texts (classes that changed leave theirs behind), only those used are kept."""

_code: dict[str, CodeType] = {}
_used: set[str] = set()


class _State:
    path = ""  # the cache file ("": none)
    changed = False  # a text was compiled since it was read or written
    installed = False


_state = _State()


def cache_path() -> str:
    """Where the cache is read and written: beside the package's bytecode ("" when Python
    writes no bytecode for this interpreter)."""
    here = Path(__file__).resolve().with_name("_dataclass_code.py")
    try:
        pyc = importlib.util.cache_from_source(str(here))
    except (NotImplementedError, ValueError):
        return ""
    return pyc.removesuffix(".pyc") + ".marshal"


def _read(path: str) -> dict[str, CodeType]:
    try:
        found = marshal.loads(Path(path).read_bytes())  # (marshal.load reads a file piece by piece)
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if not isinstance(found, dict):
        return {}
    return {t: c for t, c in found.items() if isinstance(t, str) and isinstance(c, CodeType)}


def _exec(source: Any, globals: Any = None, locals: Any = None, /, **kwargs: Any) -> Any:
    """`exec` as dataclasses calls it: an auditor module's text run from its cached code."""
    name = globals.get("__name__", "") if isinstance(globals, dict) else ""
    if not isinstance(source, str) or kwargs or not name.startswith(PREFIX):
        return builtins.exec(source, globals, locals, **kwargs)
    code = _code.get(source)
    if code is None:
        code = _code[source] = compile(source, "<string>", "exec", dont_inherit=True)
        _state.changed = True
    _used.add(source)
    return builtins.exec(code, globals, locals)


def save() -> None:
    """Write the texts compiled in this process (nothing when none was, or bytecode is not
    written)."""
    path = _state.path
    if not _state.changed or not path or sys.dont_write_bytecode:
        return
    kept = _code if len(_code) <= MAX_ENTRIES else {t: c for t, c in _code.items() if t in _used}
    target = Path(path)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("xb") as handle:
            handle.write(marshal.dumps(kept))
        tmp.replace(target)
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            tmp.unlink()
        return
    _state.changed = False


def install() -> None:
    """Have dataclasses compile the auditor's classes' methods through the cache (once)."""
    if _state.installed:
        return
    _state.installed = True
    path = _state.path = cache_path()
    if path:
        _code.update(_read(path))
    dataclasses.exec = _exec  # type: ignore[attr-defined]  # the module's global `exec` name
    atexit.register(save)
