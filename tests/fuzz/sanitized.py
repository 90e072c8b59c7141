"""The C extensions (auditor/_fastyaml.c, auditor/_faststat.c) built with AddressSanitizer and
UndefinedBehaviorSanitizer, for the fuzzers in this directory.

`build(directory)` compiles both with the system C compiler (gcc or clang) and
`-fsanitize=address,undefined -fno-sanitize-recover=all`: any out-of-bounds access, use after
free, double free, signed overflow, misaligned or null access aborts the process with a report
instead of going on. The interpreter itself is not instrumented, so the sanitizer runtime has to be
loaded first: `environment()` gives LD_PRELOAD (the compiler's libasan and libubsan) and the
sanitizers' options; `fuzz.py` re-executes itself under them.

`load(directory)` imports the sanitized `_fastyaml` and `_faststat` from there (not the ones the
package was built with), so the fuzzers exercise exactly these builds.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {"_fastyaml": ROOT / "auditor" / "_fastyaml.c", "_faststat": ROOT / "auditor" / "_faststat.c"}
LIBRARIES = {"_fastyaml": ["-lyaml"], "_faststat": []}
FLAGS = [
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",  # UBSan aborts on the first report (else it prints and goes on)
    "-fno-omit-frame-pointer",
    "-g",
    "-O1",
    "-fPIC",
    "-shared",
]


def compiler() -> str:
    for name in (os.environ.get("CC", ""), "gcc", "clang", "cc"):
        if name and shutil.which(name):
            return name
    raise RuntimeError("no C compiler (gcc or clang) on PATH: the sanitized build needs one")


def build(directory: Path) -> dict[str, Path]:
    """Compile both extensions into `directory` (when their sources are newer than the build)."""
    directory.mkdir(parents=True, exist_ok=True)
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    include = sysconfig.get_paths()["include"]
    cc = compiler()
    out: dict[str, Path] = {}
    for name, source in SOURCES.items():
        target = directory / f"{name}{suffix}"
        if not target.exists() or target.stat().st_mtime < source.stat().st_mtime:
            command = [cc, *FLAGS, f"-I{include}", str(source), "-o", str(target), *LIBRARIES[name]]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr}")
        out[name] = target
    return out


def runtime_libraries() -> list[str]:
    """The compiler's sanitizer runtimes, to preload into an uninstrumented interpreter."""
    cc = compiler()
    found = []
    for lib in ("libasan.so", "libubsan.so"):
        path = subprocess.run(
            [cc, f"-print-file-name={lib}"], capture_output=True, text=True, check=True
        ).stdout.strip()
        if os.path.sep in path and Path(path).exists():
            found.append(str(Path(path).resolve()))
    if not found:
        raise RuntimeError(f"{cc} has no libasan.so: install its sanitizer runtime (Debian: libasan8)")
    return found


def environment(leaks: bool = False) -> dict[str, str]:
    """The environment a sanitized run needs. `leaks`: LeakSanitizer at exit, with the
    interpreter's own never-freed allocations suppressed (suppressions.txt)."""
    env = dict(os.environ)
    env["LD_PRELOAD"] = " ".join(runtime_libraries())
    env["ASAN_OPTIONS"] = ":".join(
        [
            f"detect_leaks={int(leaks)}",
            "abort_on_error=1",
            "halt_on_error=1",
            "allocator_may_return_null=1",  # a huge allocation is a MemoryError, not a crash
            "detect_stack_use_after_return=1",
            "strict_string_checks=1",
        ]
    )
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    env["LSAN_OPTIONS"] = f"suppressions={Path(__file__).with_name('suppressions.txt')}:print_suppressions=0"
    env["PYTHONMALLOC"] = "malloc"  # every allocation through the sanitizer's allocator
    return env


def load(directory: Path) -> dict[str, ModuleType]:
    """The sanitized builds in `directory`, imported under their own names."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    modules = {}
    for name in SOURCES:
        path = directory / f"{name}{suffix}"
        loader = importlib.machinery.ExtensionFileLoader(name, str(path))
        spec = importlib.util.spec_from_file_location(name, path, loader=loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        modules[name] = module
    return modules
