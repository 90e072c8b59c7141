"""Read manifests from the file system: raw YAML through the one loader, Kustomize directories
rendered with `kubectl kustomize`, Helm charts with `helm template` (each when the tool is
installed), as docs/cli.md (`auditor scan`) and docs/config.md ("Sources") describe.

Files inside a kustomization or chart directory are not read raw: the rendered output is what
reaches a cluster; only kustomizations no other scanned one includes are rendered, so a base is
audited through its overlays. Rendered objects keep the file and line of the source document they
came from when it can be found. What could not be seen is an error entry *and* a `NotAudited`
entry: the audit is partial. The repository root of a path is the git work tree holding it, else
the path itself (its directory, for a file); the service passes its target's root.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from auditor import yamlio
from auditor.cache import DocumentCache
from auditor.inventory import Inventory
from auditor.model.source import LoadError, NotAudited, SourceRef
from auditor.progress import Progress, silent
from auditor.settings.config import Settings, SourcesSettings
from auditor.sources import kustomize
from auditor.sources.kustomize import KUSTOMIZATION_FILES
from auditor.sources.objects import build_inventory


@dataclass(frozen=True, slots=True)
class Tools:
    """External renderers; None when not installed."""

    kubectl: str | None = None
    helm: str | None = None

    @staticmethod
    def detect() -> Tools:
        import shutil  # only where a tree has something to render (2 ms of every start)

        return Tools(shutil.which("kubectl"), shutil.which("helm"))


@dataclass
class Collected:
    documents: list[yamlio.Document] = field(default_factory=list)
    errors: list[LoadError] = field(default_factory=list)
    not_audited: list[NotAudited] = field(default_factory=list)

    def skip(self, path: str, reason: str, line: int = 0) -> None:
        """`path` was not audited: an error entry and a NotAudited entry."""
        self.errors.append(LoadError(path, line, reason))
        self.not_audited.append(NotAudited(path, reason))


def _under(path: Path, roots: set[Path]) -> Path | None:
    for parent in (path, *path.parents):
        if parent in roots:
            return parent
    return None


def repository_root(path: Path) -> Path:
    """The git work tree holding `path`, else `path` (its directory, for a file); resolved."""
    start = path.resolve()
    if not start.is_dir():
        start = start.parent
    for parent in (start, *start.parents):
        if (parent / ".git").exists():
            return parent
    return start


def _boundary(directory: Path, roots: Sequence[Path]) -> Path:
    """The widest given root holding `directory`."""
    holding = [r for r in roots if directory == r or directory.is_relative_to(r)]
    return min(holding, key=lambda r: len(r.parts)) if holding else directory


def _chart_escapes(chart: Path, root: Path) -> str | None:
    """Why `chart` may not be rendered: a file or directory in it that leads outside `root`."""
    for directory, dirnames, filenames in os.walk(chart):
        for name in (*dirnames, *filenames):
            entry = Path(directory) / name
            if not entry.is_symlink():
                continue
            try:
                target = entry.resolve(strict=True)
            except (OSError, RuntimeError):
                return f"{entry.relative_to(chart)} is a broken symlink"
            if target != root and not target.is_relative_to(root):
                return f"{entry.relative_to(chart)} leads outside the repository root {root} (-> {target})"
    return None


def _origin(index: dict[tuple[str, str], SourceRef], data: object, fallback: SourceRef) -> SourceRef:
    if isinstance(data, dict):
        meta = data.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        return index.get((str(data.get("kind")), str(name)), fallback)
    return fallback


def _render(
    kind: str,
    root: Path,
    display: str,
    cmd: list[str],
    sources: list[yamlio.Document],
    out: Collected,
    limits: SourcesSettings,
) -> None:
    # Imported for a render only (its subprocess machinery is not needed by most scans).
    from auditor.sources import sandbox

    ran = sandbox.run(
        cmd,
        root,
        limits.render_timeout_seconds,
        limits.max_render_bytes,
        allow_network=kind == "Kustomize" and limits.kustomize_remote,
    )
    anchor = SourceRef(display, 1)
    if ran.code != 0:
        detail = " ".join(ran.stderr.strip().split())[:600] or f"exit status {ran.code}"
        out.skip(display, f"{kind} build failed: {detail}", 1)
        return
    docs, errors = yamlio.load_text(ran.stdout, f"{display} (rendered)")
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


_RENDERED_BY = frozenset({*KUSTOMIZATION_FILES, "Chart.yaml"})


def renders(files: Sequence[tuple[str, str]]) -> bool:
    """Whether any of these discovered files (real path, display name) makes its directory a
    Kustomize directory or a Helm chart, whose output is rendered rather than read."""
    return any(real.rpartition(os.sep)[2] in _RENDERED_BY for real, _ in files)


def collect(
    paths: Sequence[Path],
    tools: Tools | None,
    progress: Progress = silent,
    jobs: int | None = None,
    sources: SourcesSettings | None = None,
    root: Path | None = None,
    cache: DocumentCache | None = None,
) -> Collected:
    """Every document under `paths`: raw files, rendered Kustomize directories and Helm charts.
    `tools`: the renderers (None: looked up on PATH if the tree has something to render). `jobs`:
    worker processes for reading files (None: one per CPU for a large tree; see
    yamlio.load_files). `root`: the repository root nothing may be read outside of (default: each
    path's, see repository_root). `cache`: loaded files by content (auditor.cache); rendered
    Kustomize and Helm output is never cached."""
    out = Collected()
    sources = sources or SourcesSettings()
    roots = [root.resolve()] if root is not None else [repository_root(p) for p in paths]
    found, errors = yamlio.discover(list(paths))
    for e in errors:  # a path that could not be listed or read: not audited
        out.skip(e.file, e.message, e.line)
    to_read: list[tuple[Path | str, str]]
    read_for: list[Path | None]  # the kustomization each file belongs to, if any
    kroots: set[Path] = set()
    charts: set[Path] = set()
    included: set[Path] = set()
    displays: dict[Path, str] = {}
    raw_by_root: dict[Path, list[yamlio.Document]] = {}
    if not renders(found):
        # Plain files only (the common case): every one is read; no Path object per file.
        to_read, read_for = list(found), [None] * len(found)
    else:
        files = [(Path(real), display) for real, display in found]
        displays = dict(files)  # discover resolves the paths
        kroots = {p.parent for p, _ in files if p.name in KUSTOMIZATION_FILES}
        charts = {p.parent for p, _ in files if p.name == "Chart.yaml"}
        included = set().union(*map(kustomize.included, kroots))
        raw_by_root = {r: [] for r in kroots | charts}
        owners: dict[Path, tuple[Path | None, Path | None]] = {}  # directory -> (chart, kustomization)
        to_read, read_for = [], []
        for real, display in files:
            owner = owners.get(real.parent)
            if owner is None:
                owner = owners[real.parent] = (_under(real.parent, charts), _under(real.parent, kroots))
            chart, kroot = owner
            if chart is not None:
                continue  # chart templates are Go templates, not YAML
            to_read.append((real, display))
            read_for.append(kroot)
    loaded = yamlio.load_files(to_read, jobs=jobs, cache=cache)
    for n, (kroot, (_, display), (docs, errs)) in enumerate(zip(read_for, to_read, loaded, strict=True), 1):
        progress("reading manifests", n, len(to_read))
        out.errors.extend(errs)
        if kroot is not None:
            raw_by_root[kroot].extend(docs)  # read for source locations; the build decides
            continue
        out.documents.extend(docs)
        if errs:  # the file, or a document in it, could not be read
            out.not_audited.append(NotAudited(display, errs[0].message))
    # kubectl and helm are looked up on PATH only when the tree has something to render (`tools`
    # None: look them up then).
    renderer = (tools or Tools.detect()) if kroots or charts else Tools(None, None)
    for top in sorted(kroots - included):
        kfile = kustomize.kustomization_file(top) or top / KUSTOMIZATION_FILES[0]
        display = displays.get(kfile.resolve(), str(kfile))
        refusals = kustomize.check(top, _boundary(top, roots), sources.kustomize_remote)
        if refusals:
            for r in refusals:
                out.errors.append(
                    LoadError(displays.get(r.file.resolve(), str(r.file)), r.line, f"Kustomize: {r.message}")
                )
            first = refusals[0]
            where = displays.get(first.file.resolve(), str(first.file))
            out.not_audited.append(NotAudited(display, f"Kustomize build refused: {where}: {first.message}"))
            continue
        if renderer.kubectl is None:
            out.skip(display, "Kustomize directory skipped: kubectl is not installed")
            continue
        raw = [d for r in (top, *sorted(included)) for d in raw_by_root.get(r, [])]
        cmd = [renderer.kubectl, "kustomize", "--load-restrictor=LoadRestrictionsRootOnly", str(top)]
        _render("Kustomize", top, display, cmd, raw, out, sources)
    for chart in sorted(charts):
        display = displays.get((chart / "Chart.yaml").resolve(), str(chart / "Chart.yaml"))
        if _under(chart.parent, charts) is not None:
            continue  # a subchart renders with its parent
        escape = _chart_escapes(chart, _boundary(chart, roots))
        if escape is not None:
            out.skip(display, f"Helm chart refused: {escape}")
            continue
        if renderer.helm is None:
            out.skip(display, "Helm chart skipped: helm is not installed")
            continue
        # No --dependency-update and no repositories configured: charts/ is all helm reads.
        cmd = [renderer.helm, "template", chart.name, str(chart)]
        _render("Helm", chart, display, cmd, [], out, sources)
    return out


def load_inventory(
    paths: Sequence[Path],
    settings: Settings,
    tools: Tools | None = None,
    progress: Progress = silent,
    jobs: int | None = None,
    root: Path | None = None,
    stream: tuple[str, Sequence[yamlio.Document], Sequence[LoadError]] | None = None,
    cache: DocumentCache | None = None,
    manifests: bool = False,
) -> Inventory:
    """`stream`: documents read from a stream besides the paths (`auditor scan -`): its name,
    documents and read errors (an error makes the audit partial, as for a file). `cache`: the
    content-addressed cache of loaded files (auditor/cache.py). `manifests`: keep the workloads'
    manifests for remediation (build_inventory)."""
    collected = collect(paths, tools, progress, jobs, settings.sources, root, cache)
    if cache is not None:
        cache.finish()
    if stream is not None:
        name, docs, errs = stream
        collected.documents.extend(docs)
        collected.errors.extend(errs)
        if errs:
            collected.not_audited.append(NotAudited(name, errs[0].message))
    inv = build_inventory(collected.documents, settings, collected.errors, manifests=manifests)
    inv.not_audited = sorted(set(collected.not_audited))
    return inv
