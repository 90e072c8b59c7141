"""The map of a training group: zones side by side, the roles in the zones they land (or can land)
in, and the edge of the finding — blocked (red, dashed), crossing zones (amber) or open — with the
deciding policies named under it. Server-rendered SVG, no script, every text escaped. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from xml.sax.saxutils import escape

ZONE_W, ZONE_GAP, TOP, BOX_W, BOX_H = 220, 40, 40, 170, 44


def _attr(value: str) -> str:
    return escape(value, {'"': "&quot;"})


def edge_kind(rule: str) -> str:
    if rule in ("cross-zone-blocked", "traffic-blocked"):
        return "blocked"
    if rule == "cross-zone-traffic":
        return "crossing"
    return "open"


def svg(detail: Mapping[str, Any], title: str = "") -> str:
    """The map for one finding (its JSON detail, as the report and the store keep it)."""
    edge = detail.get("edge") or {}
    src = edge.get("from") or {}
    dst = edge.get("to") or {}
    zones: list[str] = sorted({*src.get("zones", []), *dst.get("zones", [])}) or ["(zone unknown)"]
    kind = edge_kind(str(detail.get("rule", "")))
    policies: Sequence[Mapping[str, Any]] = detail.get("policies") or []
    width = len(zones) * (ZONE_W + ZONE_GAP) + ZONE_GAP
    height = TOP + 2 * (BOX_H + 30) + 60 + 18 * len(policies)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="zonemap" viewBox="0 0 {width} {height}" '
        f'width="100%" role="img" aria-label="{_attr(title or "zone map")}">',
        "<style>.zone{fill:#f4f6f8;stroke:#9aa5b1}.zname{font-weight:600;font-size:14px;font-family:sans-serif;fill:#334}"
        ".role{fill:#fff;stroke:#556;stroke-width:1.5}.rname{font-size:13px;font-family:sans-serif;fill:#112}"
        ".edge{fill:none;stroke-width:3}.edge.blocked{stroke:#c62828;stroke-dasharray:8 6}"
        ".edge.crossing{stroke:#ef8f00}.edge.open{stroke:#2e7d32}.elabel{font-size:12px;font-family:sans-serif;fill:#333}"
        ".policy{font-size:12px;font-family:monospace;fill:#7a1f1f}.head{fill:#555}.head.blocked{fill:#c62828}"
        ".head.crossing{fill:#ef8f00}</style>",
    ]
    if title:
        parts.append(f"<title>{escape(title)}</title>")
    centres: dict[tuple[str, str], tuple[float, float]] = {}
    for i, zone in enumerate(zones):
        x = ZONE_GAP + i * (ZONE_W + ZONE_GAP)
        parts.append(
            f'<rect class="zone" x="{x}" y="{TOP - 30}" width="{ZONE_W}" '
            f'height="{2 * (BOX_H + 30) + 20}" rx="8"/>'
        )
        parts.append(f'<text class="zname" x="{x + 10}" y="{TOP - 10}">{escape(zone)}</text>')
        row = 0
        for side, info in (("src", src), ("dst", dst)):
            if zone in info.get("zones", []) or (zone == "(zone unknown)" and info):
                y = TOP + row * (BOX_H + 30)
                bx = x + (ZONE_W - BOX_W) / 2
                parts.append(
                    f'<rect class="role {side}" x="{bx}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6"/>'
                    f'<text class="rname" x="{bx + 10}" y="{y + 27}">'
                    f"{escape(str(info.get('role', '?')))}</text>"
                )
                centres[(side, zone)] = (bx + BOX_W / 2, y + BOX_H / 2)
                row += 1
    label = f"{edge.get('protocol', 'TCP')}/{edge.get('port') or 'ephemeral'}"
    label += {"blocked": " denied", "crossing": " crosses zones", "open": ""}[kind]
    drawn = 0
    for (s_side, s_zone), (sx, sy) in centres.items():
        if s_side != "src":
            continue
        for (d_side, d_zone), (dx, dy) in centres.items():
            if d_side != "dst" or (kind != "open" and s_zone == d_zone and len(zones) > 1):
                continue
            mid_y = max(sy, dy) + BOX_H
            parts.append(
                f'<path class="edge {kind}" data-from="{_attr(s_zone)}" data-to="{_attr(d_zone)}" '
                f'd="M{sx},{sy + BOX_H / 2} C{sx},{mid_y} {dx},{mid_y} {dx},{dy + BOX_H / 2}" '
                "/>"
                f'<polygon class="head {kind}" points="{dx - 6},{dy + BOX_H / 2 + 11} {dx + 6},'
                f'{dy + BOX_H / 2 + 11} {dx},{dy + BOX_H / 2}"/>'
            )
            if not drawn:
                parts.append(
                    f'<text class="elabel" x="{(sx + dx) / 2 - 40}" y="{mid_y + 4}">{escape(label)}</text>'
                )
            drawn += 1
    y = TOP + 2 * (BOX_H + 30) + 40
    for p in policies:
        ns = str(p.get("namespace") or "")
        name = f"{p.get('kind')} {ns + '/' if ns else ''}{p.get('name')}"
        parts.append(f'<text class="policy" x="{ZONE_GAP}" y="{y}">decided by {escape(name)}</text>')
        y += 18
    parts.append("</svg>")
    return "".join(parts)
