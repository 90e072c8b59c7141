"""The mypyc build (setup.py, auditor/native.py): where it is built, it is what runs, it reports
byte for byte what the Python sources report, its cache entries are the sources' and the other way
round, and a source edited after the build runs as edited."""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from auditor import native
from auditor.resources import examples_dir

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"

_BUILD = native.decide(native.HERE, {})
compiled_only = pytest.mark.skipif(
    _BUILD[0] != "compiled", reason=f"the mypyc build is not in use here ({_BUILD[1]})"
)


def _auditor(*args: str, pure: bool, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != native.ENV}
    if pure:
        env[native.ENV] = "1"
    return subprocess.run(
        [sys.executable, "-m", "auditor", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


def _both(args: list[str], tmp_path: Path, output: str = "--output") -> tuple[str, str]:
    """The reports of `auditor ARGS` compiled and from source (exit codes and stderr equal too)."""
    reports = []
    runs = []
    for pure in (False, True):
        out = tmp_path / f"{'pure' if pure else 'compiled'}.out"
        run = _auditor(*args, output, str(out), pure=pure, cwd=tmp_path)
        assert run.returncode in (0, 1, 3), run.stderr
        runs.append((run.returncode, run.stderr))
        reports.append(out.read_text(encoding="utf-8"))
    assert runs[0] == runs[1]
    return reports[0], reports[1]


def test_the_build_is_used_where_ci_requires_it() -> None:
    """.ci/run has a C compiler and sets AUDITOR_REQUIRE_NATIVE: there the suite runs compiled."""
    if not os.environ.get("AUDITOR_REQUIRE_NATIVE"):
        pytest.skip("AUDITOR_REQUIRE_NATIVE is not set")
    assert native.mode() == ("compiled", f"{len(native.NATIVE_MODULES)} modules compiled by mypyc")
    from auditor.reachability import engine

    assert not engine.__file__.endswith(".py")


CORPORA = {
    "seed-lab-before": [str(examples_dir() / "seed-lab" / "before")],
    "seed-lab-after": [str(examples_dir() / "seed-lab" / "after")],
    "workloads": [str(DATA / "workloads")],
    "scheduler": [str(DATA / "scheduler")],
    "netpol": [str(DATA / "netpol")],
}


@compiled_only
@pytest.mark.parametrize("corpus", sorted(CORPORA))
def test_compiled_and_source_scans_report_the_same(corpus: str, tmp_path: Path) -> None:
    compiled, pure = _both(
        ["scan", *CORPORA[corpus], "--format", "json", "--fail-on", "none", "--no-cache"], tmp_path
    )
    assert compiled == pure
    assert json.loads(compiled)["summary"]


@compiled_only
def test_compiled_and_source_scans_of_a_generated_repository(generated: Path, tmp_path: Path) -> None:
    compiled, pure = _both(
        ["scan", str(generated), "--format", "json", "--fail-on", "none", "--no-cache"], tmp_path
    )
    assert compiled == pure
    assert json.loads(compiled)["findings"]  # the comparison covers findings, not an empty report


@compiled_only
def test_compiled_and_source_connectivity_maps_are_the_same(tmp_path: Path) -> None:
    compiled, pure = _both(["connectivity", "--example", "seed-lab/before", "--format", "json"], tmp_path)
    assert compiled == pure and json.loads(compiled)


@compiled_only
def test_cache_entries_are_shared_between_the_build_and_the_sources(repo: Path, tmp_path: Path) -> None:
    """A cache one writes, the other reads (the snapshot's key names the sources, not the build):
    after an edit, each re-scan through the other's cache reports what a cold scan reports."""
    cache = tmp_path / "cache"
    scan = ["scan", str(repo), "--format", "json", "--fail-on", "none", "--jobs", "1"]
    for writer, reader in ((False, True), (True, False)):
        filled = _auditor(
            *scan,
            "--cache-dir",
            str(cache),
            "--output",
            str(tmp_path / "fill.json"),
            pure=writer,
            cwd=tmp_path,
        )
        assert filled.returncode in (0, 1), filled.stderr
        victim = sorted(p for p in repo.rglob("*.yaml") if "replicas: " in p.read_text(encoding="utf-8"))[0]
        text = victim.read_text(encoding="utf-8")
        victim.write_text(text.replace("replicas: ", "replicas: 1", 1), encoding="utf-8")
        again = _auditor(
            *scan, "--cache-dir", str(cache), "--output", str(tmp_path / "re.json"), pure=reader, cwd=tmp_path
        )
        cold = _auditor(
            *scan, "--no-cache", "--output", str(tmp_path / "cold.json"), pure=reader, cwd=tmp_path
        )
        assert again.returncode == cold.returncode, again.stderr
        assert (tmp_path / "re.json").read_text() == (tmp_path / "cold.json").read_text()


@compiled_only
def test_the_environment_asks_for_the_sources(tmp_path: Path) -> None:
    code = "import auditor.native as n, auditor.reachability.engine as e; print(n.mode()[0], e.__file__)"
    env = {**os.environ, native.ENV: "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    mode, where = out.stdout.split()
    assert mode == "pure" and where.endswith("engine.py")


# --- the decision, on a package directory made up for it ---------------------------------------


def _package(tmp_path: Path, *, manifest: bool = True, extensions: bool = True) -> Path:
    """A package directory laid out as a build leaves it: sources, the shared library, an extension
    per module, the manifest of the sources' digests."""
    package = tmp_path / "auditor"
    package.mkdir(parents=True)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (package / f"_native__mypyc{suffix}").write_bytes(b"")
    digests = {}
    for name in native.NATIVE_MODULES:
        source = package.joinpath(*name.split(".")[1:]).with_suffix(".py")
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(f"# {name}\n", encoding="utf-8")
        digests[name] = hashlib.sha256(source.read_bytes()).hexdigest()
        if extensions:
            source.with_suffix(suffix).write_bytes(b"")
    if manifest:
        (package / "_native.json").write_text(json.dumps({"modules": digests}), encoding="utf-8")
    return package


def test_a_whole_current_build_is_used(tmp_path: Path) -> None:
    assert native.decide(_package(tmp_path), {})[0] == "compiled"


def test_no_build_means_the_sources(tmp_path: Path) -> None:
    package = tmp_path / "plain"
    package.mkdir()
    assert native.decide(package, {}) == ("pure", "not compiled")


def test_the_environment_variable_wins(tmp_path: Path) -> None:
    package = _package(tmp_path)
    assert native.decide(package, {native.ENV: "1"}) == ("pure", f"{native.ENV} is set")
    assert native.decide(package, {native.ENV: "0"})[0] == "compiled"


def test_an_edited_source_runs_from_source(tmp_path: Path) -> None:
    package = _package(tmp_path)
    edited = package / "reachability" / "engine.py"
    edited.write_text(edited.read_text() + "# edited\n", encoding="utf-8")
    mode, why = native.decide(package, {})
    assert mode == "pure" and "auditor.reachability.engine changed" in why


def test_a_build_without_its_manifest_or_a_module_runs_from_source(tmp_path: Path) -> None:
    assert native.decide(_package(tmp_path / "a", manifest=False), {})[0] == "pure"
    assert native.decide(_package(tmp_path / "b", extensions=False), {}) == (
        "pure",
        "the build did not compile every module",
    )


def test_source_first_finds_the_sources(tmp_path: Path) -> None:
    package = _package(tmp_path)
    finder = native.SourceFirst(package, native.NATIVE_MODULES)
    spec = finder.find_spec("auditor.reachability.engine", None)
    assert spec is not None and spec.origin == str(package / "reachability" / "engine.py")
    assert finder.find_spec("auditor.cli", None) is None


def test_setup_compiles_what_native_lists() -> None:
    """setup.py reads its list from auditor/native.py: one list, and every entry a module."""
    text = (ROOT / "setup.py").read_text(encoding="utf-8")
    assert "NATIVE = _native_module()" in text and "in NATIVE.NATIVE_MODULES" in text
    for name in native.NATIVE_MODULES:
        assert (ROOT / Path(*name.split("."))).with_suffix(".py").is_file(), name


def test_compiled_dataclasses_set_their_non_argument_fields() -> None:
    """mypyc's compiled __init__ leaves a field that is not an __init__ argument unset unless it has
    a default_factory: each such field of a compiled module's dataclasses is set in __post_init__
    (an attribute read would raise AttributeError only where the build is used)."""
    import ast

    missing = []
    for name in native.NATIVE_MODULES:
        tree = ast.parse((ROOT / Path(*name.split("."))).with_suffix(".py").read_text(encoding="utf-8"))
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            post = next(
                (f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__post_init__"), None
            )
            set_there = {c.value for c in ast.walk(post) if isinstance(c, ast.Constant)} if post else set()
            for stmt in cls.body:
                if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.value, ast.Call)):
                    continue
                keywords = {k.arg: k.value for k in stmt.value.keywords}
                init = keywords.get("init")
                if (
                    not (isinstance(init, ast.Constant) and init.value is False)
                    or "default_factory" in keywords
                ):
                    continue
                field_name = ast.unparse(stmt.target)
                if field_name not in set_there:
                    missing.append(f"{name}.{cls.name}.{field_name}")
    assert not missing, missing
