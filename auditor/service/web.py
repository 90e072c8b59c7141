"""Web pages served by `auditor serve`: the fleet overview (`/`), a target's overview
(`/targets/{name}`), its cluster map (`/targets/{name}/map`) and group maps
(`/targets/{name}/groups/{namespace}/{workload}`), findings with filters sorted by severity then
cost (`/findings`), a finding with its map, history and source link (`/findings/{id}`) and its
proposed fix (`/findings/{id}/fix`). The overview's "Admission" section lists the admission
webhook's latest denials and warnings and counts its answers of the last 24 hours (by the store's
clock). Server-rendered HTML (Jinja, autoescaped) and SVG; no script and
no external asset; usable at phone width.

Maps and fixes need the target's manifests: they come from `Analyser` (the runner: a fresh read of
the target, never recorded as a run), kept per target until its next run."""

from __future__ import annotations

import base64
import hashlib
import re
import threading
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, Protocol, TypeVar

from fastapi import FastAPI, HTTPException, Path, Query, Request
from fastapi.responses import HTMLResponse, Response
from markupsafe import Markup

from auditor import templating
from auditor.audit.connectivity import connectivity
from auditor.gitops.git import GitError
from auditor.remediation.fix import FIXABLE
from auditor.reports import clustermap, links, overview, zonemap
from auditor.rules import RULES
from auditor.service import wire
from auditor.service.runner import Analysis, FixPreview
from auditor.store.records import (
    AdmissionDecisionRecord,
    AdmissionSummary,
    FindingRecord,
    RunRecord,
    Scope,
    TargetRecord,
)
from auditor.store.repository import FindingFilter, Store

EVERYTHING = Scope(None, None)

Name = Annotated[str | None, Query(max_length=253, pattern=r"^[\w./:@-]*$")]
Choice = Annotated[str | None, Query(max_length=20, pattern=r"^[a-z-]*$")]
TargetName = Annotated[str, Path(max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
K8sName = Annotated[str, Path(max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]
PER_PAGE = 100
ADMISSION_SHOWN = 20  # denials and warnings listed on the overview
ADMISSION_WINDOW = timedelta(hours=24)  # the overview counts the webhook's answers of this long
K = TypeVar("K")
V = TypeVar("V")
# Two zones and a shut door, as the tab's icon (browsers ask for /favicon.ico).
FAVICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
    '<rect x="1" y="3" width="6" height="10" rx="1" '
    'fill="#1d4f91"/><rect x="9" y="3" width="6" height="10" rx="1" fill="#1d4f91"/>'
    '<rect x="7" y="7" width="2" height="2" fill="#c62828"/></svg>'
)


def seen(finding: FindingRecord | None, scope: Scope) -> FindingRecord | None:
    """The finding if the caller's scope covers it, else None (another team's: not found)."""
    if finding is not None and not scope.sees(finding.target, finding.workload.namespace):
        return None
    return finding


def found(value: V | None, what: str) -> V:
    """`value`, or a 404 saying there is no such `what`."""
    if value is None:
        raise HTTPException(404, f"no such {what}")
    return value


class Analyser(Protocol):
    def analyse(self, target_name: str) -> Analysis: ...

    def preview_fix(self, target_name: str, fingerprint: str) -> FixPreview: ...


def line_chart(points: Sequence[tuple[str, float]], unit: str = "", label: str = "") -> str:
    """A small SVG line chart (x: run times, y: value), labels escaped."""
    from xml.sax.saxutils import escape

    w, h, pad = 720, 220, 48
    if not points:
        return (
            '<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 720 60">'
            '<text x="10" y="30">no runs yet</text></svg>'
        )
    top = max(v for _, v in points) or 1.0
    step = (w - 2 * pad) / max(1, len(points) - 1)
    coords = [(pad + i * step, h - pad - (v / top) * (h - 2 * pad)) for i, (_, v) in enumerate(points)]
    path = " ".join(f"{'M' if i == 0 else 'L'}{x:.1f},{y:.1f}" for i, (x, y) in enumerate(coords))
    dots = "".join(
        f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3">'
        f"<title>{escape(when)}: {value:,.2f}{escape(unit)}</title></circle>"
        for (x, y), (when, value) in zip(coords, points, strict=True)
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {w} {h}" width="100%" '
        f'role="img" aria-label="{escape(label)}">'
        f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="#999"/>'
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="#999"/>'
        f'<text x="4" y="{pad}" font-size="11">{top:,.0f}</text>'
        f'<text x="4" y="{h - pad}" font-size="11">0</text>'
        f'<text x="{pad}" y="{h - 10}" font-size="11">{escape(points[0][0][:10])}</text>'
        f'<text x="{w - pad - 70}" y="{h - 10}" font-size="11">{escape(points[-1][0][:10])}</text>'
        f'<path d="{path}" fill="none" stroke="#1565c0" stroke-width="2"/>{dots}</svg>'
    )


def _style_hashes() -> tuple[str, ...]:
    """CSP sources for the pages' own <style> blocks (the page's and the maps'), by hash: a style
    injected into a page would not match, and no 'unsafe-inline' is needed."""
    env = templating.sandbox("web", autoescape=True)
    html = env.get_template("base.html.j2").render(targets=[])
    blocks = [*re.findall(r"<style>(.*?)</style>", html, re.DOTALL), zonemap.STYLE, clustermap.STYLE]
    digests = (hashlib.sha256(b.encode()).digest() for b in sorted(set(blocks)))
    return tuple(f"'sha256-{base64.b64encode(d).decode()}'" for d in digests)


def content_security_policy() -> str:
    """The pages' policy: nothing loads but their own styles (by hash) and same-origin images
    (a favicon); no script at all; the filter form posts back to this origin; no framing."""
    return "; ".join(
        (
            "default-src 'none'",
            "style-src " + " ".join(_style_hashes()),
            "img-src 'self'",
            "form-action 'self'",
            "base-uri 'none'",
            "frame-ancestors 'none'",
        )
    )


class _Analyses:
    """The last analysis of each target, until the target has a newer run (one at a time per
    target: a second request waits for the first instead of reading the target again)."""

    def __init__(self, analyser: Analyser | None, store: Store, keep: int = 2) -> None:
        self.analyser, self.store, self.keep = analyser, store, keep
        self.cache: dict[str, tuple[int | None, Analysis]] = {}
        self.fixes: dict[tuple[str, str], tuple[int | None, FixPreview]] = {}
        self.locks: dict[str, threading.Lock] = {}
        self.guard = threading.Lock()

    def get(self, target: str) -> Analysis:
        analyser = self._analyser("maps")
        return self._kept(self.cache, target, target, self.keep, lambda: analyser.analyse(target))

    def fix(self, target: str, fingerprint: str) -> FixPreview:
        """A fix preview, kept like the analysis until the target's next run."""
        analyser = self._analyser("fix previews")
        read = lambda: analyser.preview_fix(target, fingerprint)  # noqa: E731
        return self._kept(self.fixes, (target, fingerprint), target, 100, read)

    def _analyser(self, what: str) -> Analyser:
        if self.analyser is None:
            raise HTTPException(503, f"{what} need the target's manifests: this server has no runner")
        return self.analyser

    def _kept(
        self, cache: dict[K, tuple[int | None, V]], key: K, target: str, keep: int, read: Callable[[], V]
    ) -> V:
        """`read()`, or what it gave since the target's last run (the `keep` latest are kept)."""
        runs = self.store.runs(target, 1).items
        last = runs[0].id if runs else None
        with self.guard:
            lock = self.locks.setdefault(target, threading.Lock())
        with lock:
            hit = cache.get(key)
            if hit is not None and hit[0] == last:
                return hit[1]
            try:
                value = read()
            except (ValueError, OSError, GitError) as exc:
                raise HTTPException(409, f"cannot read target {target}: {exc}") from None
            with self.guard:
                cache[key] = (last, value)
                while len(cache) > keep:
                    cache.pop(next(iter(cache)))
            return value


@dataclass(frozen=True, slots=True)
class Evidence:
    """A target, the revision of its last successful run (of its last 20) and that run."""

    target: TargetRecord
    revision: str | None
    last_run: RunRecord | None


def _item(f: FindingRecord) -> overview.Item:
    w = f.workload
    return overview.Item(
        f.id,
        f.target,
        f.rule,
        f.severity,
        f.status,
        w.kind,
        w.namespace,
        w.name,
        w.file,
        w.line,
        f.estimated_monthly_cost_usd,
    )


@dataclass(frozen=True, slots=True)
class AdmissionView:
    """The overview's "Admission" section: the answers of the last ADMISSION_WINDOW and the latest
    denials and warnings (dry runs among them, marked)."""

    summary: AdmissionSummary
    recent: list[AdmissionDecisionRecord]

    @property
    def shown(self) -> bool:
        return bool(self.recent or self.summary.outcomes or self.summary.dry_run)


def admission_view(store: Store, scope: Scope = EVERYTHING) -> AdmissionView:
    """The counts are of every answer (counts name nothing); the answers listed, of `scope`."""
    summary = store.admission_summary(store.clock() - ADMISSION_WINDOW, denied_limit=0)
    latest = [
        d
        for outcome in ("denied", "warned")
        for d in store.admission_decisions(outcome=outcome, limit=ADMISSION_SHOWN, scope=scope).items
    ]
    latest.sort(key=lambda d: (d.at, d.id), reverse=True)
    return AdmissionView(summary, latest[:ADMISSION_SHOWN])


def mount(app: FastAPI, store: Store, analyser: Analyser | None = None) -> None:
    env = templating.sandbox("web", autoescape=True)
    env.filters["iso"] = wire.iso
    rules = [r.META.id for r in RULES]
    analyses = _Analyses(analyser, store)

    def scope_of(request: Request) -> Scope:
        """What the caller may see (the principal the API's middleware authenticated; everything
        when reads are open)."""
        principal = getattr(request.state, "principal", None)
        return principal.scope if principal is not None else EVERYTHING

    def visible_targets(scope: Scope) -> list[Any]:
        return [t for t in store.targets() if scope.sees_target(t.name)]

    def page(template: str, scope: Scope, **values: Any) -> HTMLResponse:
        return HTMLResponse(env.get_template(template).render(targets=visible_targets(scope), **values))

    def every(flt: FindingFilter, scope: Scope) -> list[FindingRecord]:
        out: list[FindingRecord] = []
        cursor = None
        while True:
            result = store.findings(flt, 5000, cursor, scope)
            out.extend(result.items)
            if result.next_cursor is None:
                return out
            cursor = result.next_cursor

    def evidence(scope: Scope) -> dict[str, Evidence]:
        """Per target the caller sees: its location and the revision of its last successful run."""
        out = {}
        for t in visible_targets(scope):
            last = next((r for r in store.runs(t.name, 20).items if r.status == "succeeded"), None)
            out[t.name] = Evidence(t, last.revision if last else None, last)
        return out

    def trends(names: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        return {n: [wire.record_json(r) for r in store.trend(n)] for n in names}

    def analysis(name: str, scope: Scope) -> Analysis:
        if name not in {t.name for t in visible_targets(scope)}:
            raise HTTPException(404, "no such target")
        return analyses.get(name)

    def source_link(e: Evidence | None, revision: str | None, file: str, line: int) -> str | None:
        if e is None or e.target.kind != "git":
            return None
        return links.file_url(e.target.location, revision, file, line)

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return Response(FAVICON, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def fleet_page(request: Request) -> HTMLResponse:
        scope = scope_of(request)
        items = [_item(f) for f in every(FindingFilter(), scope)]
        runs = trends([t.name for t in visible_targets(scope)])
        fleet = overview.overview(items, runs)
        per_target = {
            n: overview.overview([i for i in items if i.target == n], {n: r}, 0) for n, r in runs.items()
        }
        chart = line_chart(
            [(p.label, float(p.findings)) for p in fleet.trend], label="active findings over runs"
        )
        cost = line_chart([(p.label, p.cost) for p in fleet.trend], " USD", "monthly cost over runs")
        return page(
            "overview.html.j2",
            scope,
            o=fleet,
            per_target=per_target,
            info=evidence(scope),
            findings_chart=Markup(chart),
            cost_chart=Markup(cost),
            admission=admission_view(store, scope),
        )

    @app.get("/findings", response_class=HTMLResponse, include_in_schema=False)
    def findings_page(
        request: Request,
        target: Name = None,
        rule: Name = None,
        severity: Choice = None,
        status: Choice = None,
        namespace: Name = None,
        page_no: Annotated[int, Query(alias="page", ge=1, le=100000)] = 1,
    ) -> HTMLResponse:
        if severity and severity not in overview.SEVERITIES:
            raise HTTPException(422, "unknown severity")
        if status and status not in ("new", "open", "reopened", "waived", "resolved"):
            raise HTTPException(422, "unknown status")
        flt = FindingFilter(target or None, rule or None, severity or None, status or None, namespace or None)
        scope = scope_of(request)
        rows = every(flt, scope)
        by_id = {f.id: f for f in rows}
        ordered = sorted(map(_item, rows), key=overview.order)
        start = (page_no - 1) * PER_PAGE
        shown = [by_id[i.id] for i in ordered[start : start + PER_PAGE]]
        info = evidence(scope)
        urls = {}
        for f in shown:
            e = info.get(f.target)
            urls[f.id] = source_link(e, e.revision if e else None, f.workload.file, f.workload.line)
        query = {
            k: v for k in ("target", "rule", "severity", "status", "namespace") if (v := getattr(flt, k))
        }
        more = start + PER_PAGE < len(ordered)
        next_url = "/findings?" + urllib.parse.urlencode({**query, "page": page_no + 1}) if more else ""
        return page(
            "findings.html.j2",
            scope,
            items=shown,
            urls=urls,
            total=len(ordered),
            first=start + 1,
            f=flt,
            rules=rules,
            next_url=next_url,
        )

    @app.get("/findings/{finding_id}", response_class=HTMLResponse, include_in_schema=False)
    def finding_page(request: Request, finding_id: Annotated[int, Path(ge=1, le=2**62)]) -> HTMLResponse:
        scope = scope_of(request)
        item = found(seen(store.finding(finding_id), scope), "finding")
        w, detail = item.workload, item.detail or {}
        title = f"{w.kind} {w.namespace}/{w.name}"
        # The group's map from every stored finding of the same workload (a fresh read of the
        # target draws the whole group: the link under the map).
        siblings = [
            f
            for f in every(FindingFilter(item.target, namespace=w.namespace), scope)
            if f.workload.name == w.name
            and f.workload.kind == w.kind
            and f.status != "resolved"
            and f.id != finding_id
        ][:30]
        details = [
            detail,
            *(d.detail for d in map(store.finding, (s.id for s in siblings)) if d and d.detail),
        ]
        drawn = zonemap.svg(zonemap.from_findings(title, details)) if detail.get("edge") else ""
        e = evidence(scope).get(item.target)
        revision = next((h.revision for h in reversed(item.history or ()) if h.revision), None)
        return page(
            "finding.html.j2",
            scope,
            item=item,
            map=Markup(drawn),
            source_url=source_link(e, revision, w.file, w.line),
            revision=revision,
            can_read=analyser is not None and e is not None and e.target.kind != "cluster",
            fixable=item.rule in FIXABLE and item.status != "resolved",
        )

    @app.get("/findings/{finding_id}/fix", response_class=HTMLResponse, include_in_schema=False)
    def fix_page(request: Request, finding_id: Annotated[int, Path(ge=1, le=2**62)]) -> HTMLResponse:
        scope = scope_of(request)
        item = found(seen(store.finding(finding_id), scope), "finding")
        return page("fix.html.j2", scope, item=item, preview=analyses.fix(item.target, item.fingerprint))

    @app.get("/targets/{name}", response_class=HTMLResponse, include_in_schema=False)
    def target_page(request: Request, name: TargetName) -> HTMLResponse:
        scope = scope_of(request)
        info = evidence(scope)
        if name not in info:
            raise HTTPException(404, "no such target")
        runs = store.trend(name)
        items = [_item(f) for f in every(FindingFilter(name), scope)]
        o = overview.overview(items, trends([name]))
        findings_chart = line_chart(
            [(wire.iso(r.finished_at) or "", float(r.findings)) for r in runs], label="findings over runs"
        )
        cost_chart = line_chart(
            [(wire.iso(r.finished_at) or "", float(r.estimated_monthly_cost_usd or 0)) for r in runs],
            " USD",
            "monthly cost over runs",
        )
        return page(
            "target.html.j2",
            scope,
            name=name,
            t=info[name],
            runs=runs,
            o=o,
            findings_chart=Markup(findings_chart),
            cost_chart=Markup(cost_chart),
        )

    @app.get("/targets/{name}/map", response_class=HTMLResponse, include_in_schema=False)
    def cluster_map_page(request: Request, name: TargetName) -> HTMLResponse:
        scope = scope_of(request)
        if scope.targets is not None and name not in scope.targets:
            raise HTTPException(404, "no such target")  # the whole cluster: its teams only
        a = analysis(name, scope)
        cmap = connectivity(a.inventory, "TCP", a.inventory.settings.network.ephemeral_ports)
        groups = clustermap.straddlers(a.result.groups) if a.result.groups is not None else []
        drawn = clustermap.svg(cmap, groups, f"cluster map of {name}")
        return page(
            "clustermap.html.j2",
            scope,
            name=name,
            map=Markup(drawn),
            straddlers=groups[:200],
            more=len(groups) - 200,
            revision=a.revision,
            cmap=cmap,
        )

    @app.get(
        "/targets/{name}/groups/{namespace}/{workload}", response_class=HTMLResponse, include_in_schema=False
    )
    def group_page(request: Request, name: TargetName, namespace: K8sName, workload: K8sName) -> HTMLResponse:
        scope = scope_of(request)
        if not scope.sees(name, namespace):
            raise HTTPException(404, f"no group {namespace}/{workload} in target {name}")
        a = analysis(name, EVERYTHING)
        groups = a.result.groups
        found = (
            [g for g in groups.groups if g.workload.namespace == namespace and g.workload.name == workload]
            if groups is not None
            else []
        )
        if not found or groups is None:
            raise HTTPException(404, f"no group {namespace}/{workload} in target {name}")
        maps = [Markup(zonemap.svg(zonemap.from_group(groups, g, a.result.findings))) for g in found]
        return page("group.html.j2", scope, name=name, groups=found, maps=maps, revision=a.revision)
