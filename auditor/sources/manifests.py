"""Read manifests from the file system: raw YAML through the one loader, Kustomize directories
rendered with `kubectl kustomize`, Helm charts with `helm template` (each when the tool is
installed; otherwise the directory is reported as skipped, with the reason).

Files inside a kustomization or chart directory are not read raw: the rendered output is what
reaches a cluster. Only kustomizations that no other scanned kustomization includes are rendered,
so a base is audited through its overlays, once each. Rendered objects keep the file and line of
the source document they came from when it can be found.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from auditor import yamlio
from auditor.config import Settings
from auditor.inventory import Inventory, build_inventory
from auditor.model.source import LoadError, SourceRef
from auditor.progress import Progress, silent

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
RENDER_TIMEOUT_S = 120


@dataclass(frozen=True, slots=True)
class Tools:
    """External renderers; None when not installed."""

    kubectl: str | None = None
    helm: str | None = None

    @staticmethod
    def detect() -> Tools:
        return Tools(shutil.which("kubectl"), shutil.which("helm"))


@dataclass
class Collected:
    documents: list[yamlio.Document] = field(default_factory=list)
    errors: list[LoadError] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _under(path: Path, roots: set[Path]) -> Path | None:
    if not roots:
        return None
    for parent in (path, *path.parents):
        if parent in roots:
            return parent
    return None


def _kustomization_file(root: Path) -> Path:
    return next(root / n for n in KUSTOMIZATION_FILES if (root / n).is_file())


def _included(root: Path) -> set[Path]:
    """Directories a kustomization pulls in (resources, bases, components)."""
    docs, _ = yamlio.load_file(_kustomization_file(root), str(root))
    out: set[Path] = set()
    data = docs[0].data if docs else None
    if isinstance(data, dict):
        for key in ("resources", "bases", "components"):
            for entry in data.get(key) or []:
                if isinstance(entry, str) and "://" not in entry:
                    target = (root / entry).resolve()
                    if target.is_dir():
                        out.add(target)
    return out


def _run(cmd: list[str], cwd: Path) -> tuple[int, str, str]:
    try:
        proc = subprocess.run(
            cmd,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=RENDER_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {RENDER_TIMEOUT_S} s"
    except OSError as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


def _origin(index: dict[tuple[str, str], SourceRef], data: object, fallback: SourceRef) -> SourceRef:
    if isinstance(data, dict):
        meta = data.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        found = index.get((str(data.get("kind")), str(name)))
        if found is not None:
            return found
    return fallback


def _render(
    kind: str, root: Path, display: str, cmd: list[str], sources: list[yamlio.Document], out: Collected
) -> None:
    code, stdout, stderr = _run(cmd, root)
    anchor = SourceRef(display, 1)
    if code != 0:
        detail = " ".join(stderr.strip().split())[:600] or f"exit status {code}"
        out.errors.append(LoadError(display, 1, f"{kind} build failed: {detail}"))
        return
    docs, errors = yamlio.load_text(stdout, f"{display} (rendered)")
    out.errors.extend(errors)
    # Point rendered objects back at the document they came from (kind + name), for SARIF and fixes.
    index: dict[tuple[str, str], SourceRef] = {}
    for d in sources:
        if isinstance(d.data, dict) and isinstance(d.data.get("metadata"), dict):
            index.setdefault((str(d.data.get("kind")), str(d.data["metadata"].get("name"))), d.source)
    via = display if kind == "Kustomize" else f"helm:{display}"
    out.documents.extend(
        yamlio.Document(d.data, dataclasses.replace(_origin(index, d.data, anchor), via=via)) for d in docs
    )


def collect(
    paths: Sequence[Path], tools: Tools, progress: Progress = silent, jobs: int | None = None
) -> Collected:
    """Every document under `paths`: raw files, rendered Kustomize directories and Helm charts.
    `jobs`: worker processes for reading files (None: one per CPU for a large tree; see
    yamlio.load_files)."""
    out = Collected()
    files, errors = yamlio.discover_files(list(paths))
    out.errors.extend(errors)
    resolved = [(p, p, display) for p, display in files]  # discover_files resolves them
    displays = {real: display for real, _, display in resolved}
    kroots = {p.parent for p, _, _ in resolved if p.name in KUSTOMIZATION_FILES}
    charts = {p.parent for p, _, _ in resolved if p.name == "Chart.yaml"}
    included: set[Path] = set()
    for root in kroots:
        included |= _included(root)
    raw_by_root: dict[Path, list[yamlio.Document]] = {r: [] for r in kroots | charts}
    owners: dict[Path, tuple[Path | None, Path | None]] = {}  # directory -> (chart, kustomization)
    to_read: list[tuple[Path, str]] = []
    read_for: list[Path | None] = []  # the kustomization each file belongs to, if any
    for real, path, display in resolved:
        owner = owners.get(real.parent)
        if owner is None:
            owner = owners[real.parent] = (_under(real.parent, charts), _under(real.parent, kroots))
        chart, kroot = owner
        if chart is not None:
            continue  # chart templates are Go templates, not YAML
        to_read.append((path, display))
        read_for.append(kroot)
    loaded = yamlio.load_files(to_read, jobs=jobs)
    for n, (kroot, (docs, errs)) in enumerate(zip(read_for, loaded, strict=True), 1):
        progress("reading manifests", n, len(to_read))
        if kroot is not None:
            raw_by_root[kroot].extend(docs)
            out.errors.extend(errs)
            continue
        out.documents.extend(docs)
        out.errors.extend(errs)
    for root in sorted(kroots - included):
        display = displays.get(_kustomization_file(root).resolve(), str(_kustomization_file(root)))
        if tools.kubectl is None:
            out.notes.append(f"Kustomize directory {display} skipped: kubectl is not installed")
            continue
        sources = [d for r in (root, *sorted(included)) for d in raw_by_root.get(r, [])]
        _render("Kustomize", root, display, [tools.kubectl, "kustomize", str(root)], sources, out)
    for chart in sorted(charts):
        display = displays.get((chart / "Chart.yaml").resolve(), str(chart / "Chart.yaml"))
        if _under(chart.parent, charts) is not None:
            continue  # a subchart renders with its parent
        if tools.helm is None:
            out.notes.append(f"Helm chart {display} skipped: helm is not installed")
            continue
        _render("Helm", chart, display, [tools.helm, "template", chart.name, str(chart)], [], out)
    return out


def load_inventory(
    paths: Sequence[Path],
    settings: Settings,
    tools: Tools | None = None,
    progress: Progress = silent,
    jobs: int | None = None,
) -> Inventory:
    collected = collect(paths, tools or Tools.detect(), progress, jobs)
    inv = build_inventory(collected.documents, settings, collected.errors)
    inv.notes[:0] = collected.notes
    return inv
