"""Web pages served by `auditor serve`: findings with filters, a finding with its history and
its zone map, a target's trends. Server-rendered HTML (Jinja, autoescaped) and SVG; no script and
no external CDN; usable at phone width."""

from __future__ import annotations

import base64
import hashlib
import re
import urllib.parse
from collections.abc import Sequence
from typing import Annotated, Any
from xml.sax.saxutils import escape

from fastapi import FastAPI, HTTPException, Path, Query
from fastapi.responses import HTMLResponse

from auditor import templating
from auditor.reports import zonemap
from auditor.rules import RULES
from auditor.store.repository import BadCursor, FindingFilter, Store

Name = Annotated[str | None, Query(max_length=253, pattern=r"^[\w./:@-]*$")]
Choice = Annotated[str | None, Query(max_length=20, pattern=r"^[a-z-]*$")]


def line_chart(points: Sequence[tuple[str, float]], unit: str = "") -> str:
    """A small SVG line chart (x: run times, y: value), labels escaped."""
    w, h, pad = 720, 220, 40
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
        f"<title>{escape(label)}: {value:,.2f}{escape(unit)}</title></circle>"
        for (x, y), (label, value) in zip(coords, points, strict=True)
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {w} {h}" width="100%">'
        f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="#999"/>'
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="#999"/>'
        f'<text x="4" y="{pad}" font-size="11">{top:,.0f}</text>'
        f'<text x="4" y="{h - pad}" font-size="11">0</text>'
        f'<text x="{pad}" y="{h - 10}" font-size="11">{escape(points[0][0][:10])}</text>'
        f'<text x="{w - pad - 70}" y="{h - 10}" font-size="11">{escape(points[-1][0][:10])}</text>'
        f'<path d="{path}" fill="none" stroke="#1565c0" stroke-width="2"/>{dots}</svg>'
    )


def _style_hashes() -> tuple[str, ...]:
    """CSP sources for the pages' own <style> blocks (the page's and the zone map's), by hash:
    a style injected into a page would not match, and no 'unsafe-inline' is needed."""
    env = templating.sandbox("web", autoescape=True)
    html = env.get_template("base.html.j2").render(targets=[])
    html += zonemap.svg({"edge": {"from": {}, "to": {}}})
    blocks = re.findall(r"<style>(.*?)</style>", html, re.DOTALL)
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


def mount(app: FastAPI, store: Store) -> None:
    env = templating.sandbox("web", autoescape=True)
    rules = [r.META.id for r in RULES]

    def page(template: str, **values: Any) -> HTMLResponse:
        return HTMLResponse(env.get_template(template).render(targets=store.targets(), **values))

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def findings_page(
        target: Name = None,
        rule: Name = None,
        severity: Choice = None,
        status: Choice = None,
        namespace: Name = None,
        cursor: Annotated[str | None, Query(max_length=64)] = None,
    ) -> HTMLResponse:
        if severity and severity not in ("critical", "high", "medium", "low"):
            raise HTTPException(422, "unknown severity")
        if status and status not in ("new", "open", "reopened", "waived", "resolved"):
            raise HTTPException(422, "unknown status")
        flt = FindingFilter(target or None, rule or None, severity or None, status or None, namespace or None)
        try:
            result = store.findings(flt, 100, cursor or None)
        except BadCursor as exc:
            raise HTTPException(400, str(exc)) from None
        query = {
            k: v
            for k, v in (
                ("target", target),
                ("rule", rule),
                ("severity", severity),
                ("status", status),
                ("namespace", namespace),
            )
            if v
        }
        next_url = "/?" + urllib.parse.urlencode({**query, "cursor": result.next_cursor or ""})
        return page("findings.html.j2", page=result, f=flt, rules=rules, next_url=next_url)

    @app.get("/findings/{finding_id}", response_class=HTMLResponse, include_in_schema=False)
    def finding_page(finding_id: Annotated[int, Path(ge=1, le=2**62)]) -> HTMLResponse:
        item = store.finding(finding_id)
        if item is None:
            raise HTTPException(404, "no such finding")
        title = f"{item['rule']} {item['workload']['namespace']}/{item['workload']['name']}"
        drawn = zonemap.svg(item["detail"], title) if item["detail"].get("edge") else ""
        return page("finding.html.j2", item=item, map=drawn)

    @app.get("/targets/{name}", response_class=HTMLResponse, include_in_schema=False)
    def target_page(
        name: Annotated[str, Path(max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")],
    ) -> HTMLResponse:
        if name not in {t["name"] for t in store.targets()}:
            raise HTTPException(404, "no such target")
        runs = store.trend(name)
        findings_chart = line_chart([(r["finished_at"] or "", float(r["findings"])) for r in runs])
        cost_chart = line_chart(
            [(r["finished_at"] or "", float(r["estimated_monthly_cost_usd"] or 0)) for r in runs], " USD"
        )
        return page(
            "target.html.j2", name=name, runs=runs, findings_chart=findings_chart, cost_chart=cost_chart
        )
