"""Package list for setuptools: the auditor packages plus policies/ and templates/, which live at the
top of the repository and ship inside the wheel as auditor._policies and auditor._templates
(pyproject.toml maps the directories); migrations/ likewise as auditor._migrations. And the
compiled parts:

* the optional C extension auditor/_fastyaml.c (the loader's common case against the system
  libyaml; Debian: libyaml-dev). Without a compiler or the headers the package installs without it
  and auditor.yamlio does the same work in Python (tests compare the two);
* the optional C extension auditor/_faststat.c (an incremental re-scan's stats of every file,
  without os.stat's stat_result per path); without it, os.stat (tests compare the two);
* the audit's hot modules (auditor/native.py NATIVE_MODULES) compiled by mypyc, mypy's compiler
  of type-annotated Python to C extensions (the code passes mypy --strict, which mypyc needs):
  one shared library, auditor._native__mypyc, and a small extension per module. About a fifth
  off a cold scan's CPU (docs/architecture.md#compiled-modules). Built when a C compiler works
  and AUDITOR_PURE_PYTHON_BUILD is not set; all or nothing (a module compiled and another not
  would call each other's stale code).
  auditor/native.py runs the Python sources instead when they changed after the build (an editable
  install being edited) or AUDITOR_PURE_PYTHON=1 says so; the build records what it compiled in
  auditor/_native.json for that check.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def _native_module() -> ModuleType:
    """auditor/native.py, which lists the modules to compile (it imports only the standard library;
    the package itself cannot be imported before it is built)."""
    spec = importlib.util.spec_from_file_location("_auditor_native", ROOT / "auditor" / "native.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NATIVE = _native_module()
"""auditor/native.py: the modules to compile, mypyc's group, where the manifest goes and what it
holds (the same module reads them back at run time)."""
NATIVE_SOURCES = [str(NATIVE.source(name).relative_to(ROOT)) for name in NATIVE.NATIVE_MODULES]
MANIFEST = NATIVE.MANIFEST.relative_to(ROOT)


class BuildExt(build_ext):
    """build_ext that adds the mypyc extensions when they can be built (see the module docstring)
    and records what they were compiled from."""

    BUILDING = frozenset({"build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop"})
    """Commands that build extensions (egg_info, dist_info and sdist also finalize build_ext, to
    list sources: mypyc's code generation is not run for them)."""

    def finalize_options(self) -> None:
        self._native: list[Extension] = []
        if (
            os.environ.get("AUDITOR_PURE_PYTHON_BUILD")
            or not self.BUILDING.intersection(self.distribution.commands)
            or not self._compiler_works()
        ):
            super().finalize_options()
            return
        try:
            from mypyc.build import mypycify  # build requirement (pyproject.toml)
        except ImportError:  # a build without isolation, in an environment without mypy
            print("mypyc is not installed: building the pure-Python package", file=sys.stderr)
            super().finalize_options()
            return

        # An isolated build has none of the package's dependencies, and mypyc refuses code that
        # does not type-check: checked here without pyproject's --strict settings, what the
        # dependencies type as Any (the same code runs; `mypy --strict` with every stub is CI's).
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp, "mypy.ini")
            config.write_text("[mypy]\nignore_missing_imports = True\n", encoding="utf-8")
            flags = [f"--config-file={config}"]
            self._native = mypycify([*flags, *NATIVE_SOURCES], group_name=NATIVE.GROUP, opt_level="3")
        # Before setuptools' own finalizing, which takes the distribution's extensions.
        self.distribution.ext_modules = [*(self.distribution.ext_modules or []), *self._native]
        super().finalize_options()

    def _compiler_works(self) -> bool:
        """Whether this machine compiles and links a C extension (else: the pure-Python package)."""
        from setuptools._distutils.ccompiler import new_compiler
        from setuptools._distutils.sysconfig import customize_compiler

        compiler = new_compiler()
        customize_compiler(compiler)
        with tempfile.TemporaryDirectory() as tmp:
            source = Path(tmp, "probe.c")
            source.write_text("#include <Python.h>\nint probe(void) { return 0; }\n")
            try:
                objects = compiler.compile(
                    [str(source)], output_dir=tmp, include_dirs=[sysconfig.get_paths()["include"]]
                )
                compiler.link_shared_object(objects, str(Path(tmp, "probe.so")))
            except Exception:
                return False
        return True

    def run(self) -> None:
        super().run()
        if self.inplace:
            self._remove_stale_extensions()
        if not self._native:
            return
        # What was compiled, beside it: auditor/native.py runs these sources when they differ.
        manifest = {
            "modules": {
                name: hashlib.sha256(NATIVE.source(name).read_bytes()).hexdigest()
                for name in NATIVE.NATIVE_MODULES
            }
        }
        where = ROOT if self.inplace else Path(self.build_lib)
        target = where / MANIFEST
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")

    def _remove_stale_extensions(self) -> None:
        """In place (an editable install), remove the extensions of modules no longer compiled: an
        extension beside its source is imported instead of it."""
        built = {Path(self.get_ext_fullpath(ext.name)).resolve() for ext in self.extensions}
        for found in (ROOT / "auditor").rglob("*.so"):
            if found.resolve() not in built:
                found.unlink()

    def get_outputs(self) -> list[str]:
        outputs = super().get_outputs()
        if getattr(self, "_native", None):
            outputs.append(str((ROOT if self.inplace else Path(self.build_lib)) / MANIFEST))
        return outputs


setup(
    packages=[
        *find_packages(include=["auditor", "auditor.*"]),
        "auditor._policies",
        "auditor._templates",
        "auditor._migrations",
        "auditor._migrations.versions",
    ],
    ext_modules=[
        Extension("auditor._fastyaml", ["auditor/_fastyaml.c"], libraries=["yaml"], optional=True),
        Extension("auditor._faststat", ["auditor/_faststat.c"], optional=True),
    ],
    cmdclass={"build_ext": BuildExt},
)
