"""The import rules docs/architecture.md states, checked on the source (every import, also the ones
inside functions), and the import cost of a scan."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "auditor"

# The I/O layers: they read files, clusters, git and databases, serve HTTP or send mail.
IO_LAYERS = (
    "auditor.store",
    "auditor.service",
    "auditor.gitops",
    "auditor.sources",
    "auditor.cli",
    "auditor.bootstrap",
    "auditor.admission",
)
# The pure core: documents in, findings out.
CORE = (
    "auditor.model",
    "auditor.workloads",
    "auditor.placement",
    "auditor.reachability",
    "auditor.rules",
    "auditor.inventory",
    "auditor.audit.scan",
    "auditor.audit.explain",
    "auditor.audit.placement_explain",
    "auditor.audit.connectivity",
)
CONFIG_LOADER = ("auditor.settings.config",)


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m == "auditor" or m.startswith("auditor.")}


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


GRAPH = {_module(p): _imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def _violations(sources: tuple[str, ...], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if _within(module, sources)
        for target in targets
        if _within(target, forbidden)
    )


def test_the_graph_is_read() -> None:
    assert len(GRAPH) > 80 and "auditor.rules.model" in GRAPH["auditor.audit.scan"]


def test_model_imports_nothing_above_it() -> None:
    bad = sorted(
        f"{m} imports {t}"
        for m, targets in GRAPH.items()
        if _within(m, ("auditor.model",))
        for t in targets
        if not _within(t, ("auditor.model",))
    )
    assert bad == []


def test_core_imports_no_io_layer() -> None:
    assert _violations(CORE, IO_LAYERS) == []


def test_rules_and_reports_import_no_store_or_config_loader() -> None:
    assert _violations(("auditor.rules", "auditor.reports"), (*IO_LAYERS, *CONFIG_LOADER)) == []


@pytest.mark.parametrize("forbidden", [("auditor.model",), ("auditor.sources",)], ids=["model", "sources"])
def test_the_checker_sees_a_violation(forbidden: tuple[str, ...]) -> None:
    # The rules above would be vacuous if the graph missed imports: these ones are known to exist.
    assert _violations(("auditor.audit.scan", "auditor.cli"), forbidden)


def test_scan_with_a_config_imports_no_database_or_service_library(tmp_path: Path) -> None:
    """`python -X importtime -m auditor scan --config FILE` lists every module it imported on stderr.

    A one-shot scan leaves through os._exit, so the check reads the interpreter's own import log
    rather than sys.modules after the program returns.
    """
    config = tmp_path / "auditor.yaml"
    config.write_text("kubernetes: {version: '1.35'}\ndatabase: {url: 'postgresql://db/auditor'}\n")
    seed = ROOT / "tests" / "data" / "seed-lab"
    command = ["-X", "importtime", "-m", "auditor", "scan", "--config", str(config), str(seed / "before")]
    done = subprocess.run(
        [sys.executable, *command, "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        timeout=120,
    )
    imported = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }
    assert "auditor" in imported and "yaml" in imported, done.stderr[-2000:]
    heavy = {"sqlalchemy", "alembic", "fastapi", "uvicorn", "apscheduler", "github", "kubernetes", "celery"}
    assert imported & heavy == set(), done.stderr[-2000:]
    assert '"placement-auditor/findings/v1"' in done.stdout
