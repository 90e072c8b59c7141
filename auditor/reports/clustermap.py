"""The cluster map: one SVG per target of where training pods can land (zones × namespaces) and
which zone-to-zone doors the policies leave open for training traffic, with the groups that
straddle them (docs/reports.md, "The cluster map"). The input is the connectivity engine's
`ConnectivityMap` (auditor/audit/connectivity.py) and the groups of a scan (rules/groups.py) that
can be split across zones. Pure; text escaped; no script."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

from auditor.audit.connectivity import ConnectivityMap
from auditor.reports.zonemap import fit_text
from auditor.rules.groups import Groups

CELL_W, CELL_H, LABEL_W, SQ, GAP = 92, 30, 190, 14, 18


@dataclass(frozen=True, slots=True)
class Straddler:
    """A group with an edge whose ends can land in different zones."""

    namespace: str
    name: str
    kind: str
    zone_pairs: tuple[tuple[str, str], ...]  # (source zone, destination zone) of its crossing placements
    denied: bool  # some crossing placement is denied


def straddlers(groups: Groups) -> list[Straddler]:
    out = []
    for g in groups.groups:
        pairs: set[tuple[str, str]] = set()
        denied = False
        for e in g.edges:
            if e.split is None:
                continue
            pairs.update((a, b) for a, b in (*e.allowed, *e.denied) if a != b)
            denied = denied or any(a != b for a, b in e.denied)
        if pairs:
            w = g.workload
            out.append(Straddler(w.namespace, w.name, w.kind, tuple(sorted(pairs)), denied))
    return sorted(out, key=lambda s: (not s.denied, s.namespace, s.name))


def _state(class_pairs: int, allowed: int) -> str:
    if class_pairs == 0:
        return "none"
    if allowed == class_pairs:
        return "open"
    return "closed" if allowed == 0 else "partial"


def _attr(value: str) -> str:
    return escape(value, {'"': "&quot;"})


def svg(cmap: ConnectivityMap, groups: Sequence[Straddler], title: str = "") -> str:
    zones = sorted({c.cell.zone for c in cmap.cells})
    namespaces = sorted({c.cell.namespace for c in cmap.cells})
    pods = {(c.cell.namespace, c.cell.zone): c.pods for c in cmap.cells}
    within: dict[tuple[str, str, str], tuple[int, int]] = {}
    for p in cmap.pairs:
        if p.source.namespace == p.destination.namespace:
            within[(p.source.namespace, p.source.zone, p.destination.zone)] = (p.class_pairs, p.allowed)
    by_ns: dict[str, list[Straddler]] = {}
    for s in groups:
        by_ns.setdefault(s.namespace, []).append(s)

    nz = max(1, len(zones))
    matrix_w = max(nz * SQ, 80)
    grid_x = LABEL_W
    matrix_x = grid_x + nz * CELL_W + GAP
    count_x = matrix_x + matrix_w + GAP
    width = count_x + 230
    head = 56 + nz * 26 + 56  # the target's doors and the grid's column headers
    height = head + max(1, len(namespaces)) * CELL_H + 70
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="clustermap" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{_attr(title or "cluster map")}">',
        f"<style>{STYLE}</style>",
        f"<title>{escape(title or 'cluster map')}</title>",
        f'<text class="h" x="8" y="20">Training traffic between zones (probe {escape(cmap.protocol)} '
        f"{cmap.ports[0]}-{cmap.ports[1]}), within each namespace</text>",
    ]
    # The target's zone × zone doors: per pair of zones, in how many namespaces training traffic
    # within the namespace is open (every class pair allowed), partly open or closed.
    oy, row_h = 56, 26
    out.append(f'<text class="m" x="8" y="{oy - 10}">from zone ↓ · to zone →</text>')
    for j, zb in enumerate(zones):
        out.append(
            f'<text class="z" x="{grid_x + j * CELL_W + 6}" y="{oy - 10}">'
            f"{escape(fit_text(zb, CELL_W - 8))}</text>"
        )
    for i, za in enumerate(zones):
        y = oy + i * row_h
        out.append(f'<text class="z" x="8" y="{y + 16}">{escape(fit_text(za, LABEL_W - 16))}</text>')
        for j, zb in enumerate(zones):
            states = Counter(_state(*within[(ns, za, zb)]) for ns in namespaces if (ns, za, zb) in within)
            states.pop("none", None)
            total = sum(states.values())
            st = (
                "none"
                if not total
                else "open"
                if states["open"] == total
                else "closed"
                if states["closed"] == total
                else "partial"
            )
            label = f"open in {states['open']}/{total}" if total else "no pods"
            out.append(
                f'<rect class="sq {st}" data-from="{_attr(za)}" data-to="{_attr(zb)}" '
                f'x="{grid_x + j * CELL_W}" y="{y}" width="{CELL_W - 4}" height="{row_h - 4}" rx="3">'
                f"<title>{escape(za)} → {escape(zb)}: "
                f"open in {states['open']}, partly open in {states['partial']}, closed in {states['closed']} "
                f"of {total} namespaces</title></rect>"
                f'<text class="sqt" x="{grid_x + j * CELL_W + 6}" y="{y + 15}">{label}</text>'
            )
    gy = head  # the grid's column headers, then a row per namespace
    for j, z in enumerate(zones):
        out.append(
            f'<text class="z" x="{grid_x + j * CELL_W + 6}" y="{gy - 8}">'
            f"{escape(fit_text(z, CELL_W - 8))}</text>"
        )
    out.append(f'<text class="m" x="{matrix_x}" y="{gy - 8}">zone doors</text>')
    out.append(f'<text class="m" x="{count_x}" y="{gy - 8}">groups straddling zones</text>')
    for r, ns in enumerate(namespaces):
        y = gy + r * CELL_H
        out.append(f'<g class="ns" data-namespace="{_attr(ns)}">')
        out.append(
            f'<text class="n" x="8" y="{y + 19}">{escape(fit_text(ns or "(cluster)", LABEL_W - 16))}'
            f"<title>{escape(ns)}</title></text>"
        )
        for j, z in enumerate(zones):
            n = pods.get((ns, z), 0)
            css = "cell on" if n else "cell off"
            out.append(
                f'<rect class="{css}" x="{grid_x + j * CELL_W}" y="{y + 2}" width="{CELL_W - 4}" '
                f'height="{CELL_H - 4}" rx="4"/>'
            )
            if n:
                out.append(f'<text class="p" x="{grid_x + j * CELL_W + 8}" y="{y + 20}">{n} pods</text>')
        for i, za in enumerate(zones):  # a compact matrix per row: nz × nz squares in CELL_H
            for j, zb in enumerate(zones):
                cp, al = within.get((ns, za, zb), (0, 0))
                st = _state(cp, al)
                size = max(3, (CELL_H - 6) // nz)
                out.append(
                    f'<rect class="sq {st}" x="{matrix_x + j * size}" y="{y + 3 + i * size}" '
                    f'width="{size - 1}" height="{size - 1}">'
                    f"<title>{escape(ns)}: {escape(za)} → {escape(zb)} {st}</title></rect>"
                )
        mine = by_ns.get(ns, [])
        if mine:
            bad = sum(s.denied for s in mine)
            text = (
                f"{len(mine)} group(s), {bad} through a shut door"
                if bad
                else f"{len(mine)} group(s), all open"
            )
            names = ", ".join(f"{s.kind} {s.name}" for s in mine[:20]) + (" …" if len(mine) > 20 else "")
            out.append(
                f'<text class="{"bad" if bad else "m"}" x="{count_x}" y="{y + 19}">{escape(text)}'
                f"<title>{escape(names)}</title></text>"
            )
        out.append("</g>")
    ly = gy + max(1, len(namespaces)) * CELL_H + 24
    legend = [
        ("open", "open: every class pair allowed"),
        ("partial", "partial"),
        ("closed", "closed: none allowed"),
        ("none", "no pods"),
    ]
    x = 8
    for cls, label in legend:
        out.append(
            f'<rect class="sq {cls}" x="{x}" y="{ly - 11}" width="12" height="12"/>'
            f'<text class="m" x="{x + 18}" y="{ly}">{label}</text>'
        )
        x += 30 + len(label) * 7
    for k, note in enumerate(cmap.notes):
        out.append(f'<text class="m" x="8" y="{ly + 20 + k * 16}">{escape(note)}</text>')
    out.append("</svg>")
    return "".join(out)


STYLE = (
    ".clustermap{font-family:system-ui,'DejaVu Sans',sans-serif}.h{font-size:14px;font-weight:600;fill:#223}"
    ".z{font-size:12px;font-weight:600;fill:#334}.n{font-size:12px;fill:#112}.p{font-size:11px;fill:#1d4f91}"
    ".m{font-size:11px;fill:#555}.sqt{font-size:11px;fill:#fff;font-weight:600}.bad{font-size:11px;fill:#b71c1c;font-weight:600}"
    ".cell.on{fill:#dbe9f9;stroke:#1d4f91}.cell.off{fill:#f6f7f8;stroke:#dde}"
    ".sq.open{fill:#43a047}.sq.partial{fill:#f5a623}.sq.closed{fill:#d32f2f}.sq.none{fill:#e6e8eb}"
)
