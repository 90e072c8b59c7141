"""Whether the audit runs its mypyc-compiled modules or their Python sources.

A build with a working C compiler compiles the audit's hot modules (setup.py NATIVE_MODULES) to C
extensions that sit beside their sources and are imported instead of them. `install()` (run by
auditor/__init__.py, before any of them is imported) has them imported from source instead when

* AUDITOR_PURE_PYTHON is set (to anything but "" or "0"): to step through the code with a
  debugger, or to compare the two (tests/test_native.py does, over the corpora), or
* a source differs from the one compiled (auditor/_native.json, written by the build, holds each
  module's SHA-256): an editable install being edited runs what is on disk, never a stale build —
  `pip install -e .` again compiles it anew.

All or nothing: compiled modules call each other directly, so one module from source and the rest
compiled would run the old code of the one. Checking reads and hashes the 38 sources (about 1 MB,
a millisecond). NATIVE_MODULES is the list setup.py compiles.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "_native.json"
ENV = "AUDITOR_PURE_PYTHON"
GROUP = "auditor._native"
"""mypyc's group: its shared library is `_native__mypyc` in the package (setup.py builds it)."""

NATIVE_MODULES = (
    "auditor.inventory",
    "auditor.sources.objects",
    "auditor.audit.scan",
    "auditor.model.cost",
    "auditor.model.findings",
    "auditor.model.labels",
    "auditor.model.objects",
    "auditor.model.scheduling",
    "auditor.model.source",
    "auditor.workloads.adapters",
    "auditor.workloads.dataports",
    "auditor.workloads.edges",
    "auditor.workloads.operators",
    "auditor.workloads.podspec",
    "auditor.workloads.replicas",
    "auditor.workloads.scheduling",
    "auditor.placement.coupling",
    "auditor.placement.filters",
    "auditor.placement.observed",
    "auditor.placement.podfilters",
    "auditor.placement.pods",
    "auditor.placement.resources",
    "auditor.reachability.adminpolicy",
    "auditor.reachability.calico",
    "auditor.reachability.cilium",
    "auditor.reachability.cni",
    "auditor.reachability.endpoints",
    "auditor.reachability.engine",
    "auditor.reachability.identity",
    "auditor.reachability.matrix",
    "auditor.reachability.netpol",
    "auditor.reachability.policy",
    "auditor.reachability.ports",
    "auditor.reachability.specs",
    "auditor.rules.model",
    "auditor.rules.groups",
    "auditor.reports.json_report",
)
"""Compiled by mypyc. Not: auditor/model/values.py (its `@value` is a dataclass_transform function
mypyc cannot apply), model/pickling.py (assigns __reduce__ to classes), the rules' modules (their
option classes are read by annotation at run time), the loader (YamlMap subclasses dict; its hot
part is C already), the cache and incremental scans (pickled classes and restricted unpicklers),
reachability/calico_selector.py (slotted dataclasses under an ABC: mypyc's class fails to build at
import; and it is not hot)."""

_state: dict[str, str] = {"mode": "pure", "why": "not compiled"}


class SourceFirst:
    """Finds the compiled modules' Python sources (under `package`, the auditor's directory)
    ahead of their extensions. A meta path finder by protocol (`find_spec`), not by subclassing
    importlib.abc.MetaPathFinder: importing importlib.abc pulls in importlib.resources, tempfile,
    shutil, random, bz2 and lzma, 6 ms of every start for a base class that adds nothing here."""

    def __init__(self, package: Path, modules: Sequence[str]) -> None:
        self.package = package
        self.modules = frozenset(modules)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.modules:
            return None
        return importlib.util.spec_from_file_location(fullname, _source(self.package, fullname))


def _source(package: Path, module: str) -> Path:
    return package.joinpath(*module.split(".")[1:]).with_suffix(".py")


def source(module: str) -> Path:
    """The source file of one of the auditor's modules (an absolute path, whatever the working
    directory: a module imported through a relative sys.path entry has a relative __file__)."""
    return _source(HERE, module)


def _compiled(package: Path, modules: Sequence[str]) -> bool:
    """Whether every module listed has its extension beside its source."""
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    for name in modules:
        source = _source(package, name)
        if not any(source.with_suffix(suffix).exists() for suffix in suffixes):
            return False
    return True


def _stale(package: Path, recorded: Mapping[str, str]) -> str | None:
    """The first module whose source is not the one compiled, or None."""
    for name, digest in recorded.items():
        try:
            found = hashlib.sha256(_source(package, name).read_bytes()).hexdigest()
        except OSError:
            return name
        if found != digest:
            return name
    return None


def decide(package: Path, environ: Mapping[str, str]) -> tuple[str, str]:
    """("compiled" or "pure", why) for the auditor's package directory `package`: "compiled" only
    when its mypyc build is there, whole, made from the sources beside it, and `environ` does not
    ask for the sources."""
    if not any(package.glob(GROUP.rpartition(".")[2] + "__mypyc*")):
        return "pure", "not compiled"
    if environ.get(ENV, "") not in ("", "0"):
        return "pure", f"{ENV} is set"
    try:
        manifest = json.loads((package / MANIFEST.name).read_text(encoding="utf-8"))
        recorded = {str(name): str(digest) for name, digest in manifest["modules"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        recorded = {}
    if set(recorded) != set(NATIVE_MODULES):
        return (
            "pure",
            f"{MANIFEST.name} does not list the modules compiled (pip install -e . builds them again)",
        )
    if not _compiled(package, NATIVE_MODULES):
        return "pure", "the build did not compile every module"
    stale = _stale(package, recorded)
    if stale is not None:
        return "pure", f"{stale} changed after the build (pip install -e . compiles it again)"
    return "compiled", f"{len(recorded)} modules compiled by mypyc"


def install() -> None:
    """Decide, once per process, and route the imports (see the module docstring)."""
    mode, why = decide(HERE, os.environ)
    if mode == "pure" and why != "not compiled":
        sys.meta_path.insert(0, SourceFirst(HERE, NATIVE_MODULES))
    _state.update(mode=mode, why=why)


def mode() -> tuple[str, str]:
    """("compiled" or "pure", why): what this process runs."""
    return _state["mode"], _state["why"]
