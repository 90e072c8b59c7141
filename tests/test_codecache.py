"""The code cache of the auditor's dataclass methods (auditor/codecache.py): a process that reads
it defines every class exactly as one that compiles their methods; it is written where Python
writes bytecode and only then; a damaged file is ignored; other packages' classes are left alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# Every auditor dataclass, and what its generated methods are made of: the same in every process.
PROBE = r"""
import dataclasses, json, sys
import auditor.cli, auditor.sources.incremental, auditor.reports.sarif
from auditor import codecache
out = {}
for name, module in sorted(sys.modules.items()):
    if not name.startswith("auditor"):
        continue
    for attr, cls in sorted(vars(module).items()):
        if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == name:
            methods = {}
            for method in ("__init__", "__repr__", "__eq__", "__hash__", "__lt__", "__setattr__"):
                fn = cls.__dict__.get(method)
                code = getattr(fn, "__code__", None)
                if code is not None:
                    methods[method] = [code.co_code.hex(), repr(code.co_consts), repr(code.co_names),
                                       code.co_filename, fn.__qualname__, repr(fn.__annotations__)]
            out[f"{name}.{attr}"] = methods
print(json.dumps({"classes": out, "compiled": codecache._state.changed,
                  "entries": len(codecache._code), "path": codecache.cache_path()}))
"""


def probe(prefix: Path, *flags: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(prefix)
    done = subprocess.run(
        [sys.executable, *flags, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    found: dict[str, object] = json.loads(done.stdout)
    return found


def test_classes_from_the_cache_are_the_compiled_ones(tmp_path: Path) -> None:
    prefix = tmp_path / "pycache"
    cold = probe(prefix)
    path = Path(str(cold["path"]))
    assert str(path).startswith(str(prefix)) and path.is_file(), "written where bytecode goes"
    assert cold["compiled"] is True and len(cold["classes"]) > 100  # type: ignore[arg-type]
    warm = probe(prefix)
    assert warm["compiled"] is False, "every text was found in the cache"
    assert warm["classes"] == cold["classes"]
    assert not list(path.parent.glob("*.tmp")), "written whole, then renamed"


def test_not_written_without_bytecode_and_a_damaged_file_is_ignored(tmp_path: Path) -> None:
    prefix = tmp_path / "pycache"
    reference = probe(prefix, "-B")
    path = Path(str(reference["path"]))
    assert not path.exists(), "-B: no bytecode, no cache"
    path.parent.mkdir(parents=True, exist_ok=True)
    for damage in (b"", b"\x00garbage", b"\xe3" + os.urandom(300)):
        path.write_bytes(damage)
        again = probe(prefix)
        assert again["classes"] == reference["classes"] and again["compiled"] is True
        assert probe(prefix)["compiled"] is False, "rewritten whole after the damaged one"


def test_other_packages_dataclasses_are_compiled_as_usual() -> None:
    import dataclasses

    from auditor import codecache

    before = len(codecache._code)

    @dataclasses.dataclass(frozen=True)
    class Local:
        x: int
        y: str = "y"

    assert (
        Local(1) == Local(1, "y")
        and repr(Local(2))
        == "test_other_packages_dataclasses_are_compiled_as_usual.<locals>.Local(x=2, y='y')"
    )
    assert len(codecache._code) == before


def test_the_program_saves_it_though_it_leaves_without_teardown(tmp_path: Path) -> None:
    """`auditor scan` ends with os._exit after a one-shot audit (cli.leave): no atexit runs, so
    it saves the cache itself."""
    prefix = tmp_path / "pycache"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(prefix)
    done = subprocess.run(
        [sys.executable, "-m", "auditor", "scan", "--example", "seed-lab/before", "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    assert json.loads(done.stdout)["findings"], "the report was flushed before leaving"
    assert list(prefix.rglob("_dataclass_code.*.marshal")), "saved by cli.leave"
