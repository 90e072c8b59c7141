"""The map of a training group: where its pods can land and which doors are shut (what it draws:
docs/reports.md, "The group map").

Layout is by construction free of overlaps: boxes sit on a grid; edges run only in the gutters
between columns and between rows (each edge in its own track). Server-rendered SVG, no script, no
external asset, every text escaped. Pure: the input is a small typed `GroupMap`, built from a fresh
scan's groups (`from_group`) or from stored findings (`from_findings`)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape

from auditor.model.findings import Finding
from auditor.reports import BLOCKED_RULES
from auditor.rules.groups import Group, Groups

UNKNOWN_ZONE = "(zone unknown)"

# Geometry, in SVG user units (px at 100 %).
BOX_W, BOX_H = 168, 46
COL_PAD = 14  # between a zone column's border and its boxes
TRACK = 7  # distance between two edge tracks in a gutter
HEAD_H = 34  # zone header above the grid
BADGE_R = 8
FONT = 12  # role names and key lines; width estimate CHAR_W per character
CHAR_W = 0.62 * FONT
KEY_LINE = 18


@dataclass(frozen=True, slots=True)
class MapRole:
    name: str
    replicas: int | None  # None: unknown (a stored finding does not say)
    feasible: tuple[str, ...]  # zones the scheduler filters leave
    actual: tuple[str, ...] = ()  # zones where pods run now (a live cluster)


@dataclass(frozen=True, slots=True)
class MapEdge:
    source: str  # role name
    destination: str
    ports: str  # "23456", "32768-60999", …
    protocol: str = "TCP"
    denied: tuple[tuple[str, str], ...] = ()  # (source zone, destination zone) placements denied
    allowed: tuple[tuple[str, str], ...] = ()
    policies: tuple[str, ...] = ()  # deciding policies of a denied edge, as "Kind ns/name"
    split: str | None = None  # certainty of a zone split (always, likely, possible); None: never


@dataclass(frozen=True, slots=True)
class GroupMap:
    title: str
    roles: tuple[MapRole, ...]
    edges: tuple[MapEdge, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def zones(self) -> tuple[str, ...]:
        zones = {z for r in self.roles for z in (*r.feasible, *r.actual)}
        return tuple(sorted(zones)) or (UNKNOWN_ZONE,)


@dataclass(frozen=True, slots=True)
class Box:
    """Where a role's box in a zone is drawn."""

    role: str
    zone: str
    x: float
    y: float


def _policy_name(p: Mapping[str, Any]) -> str:
    ns = str(p.get("namespace") or "")
    return f"{p.get('kind')} {ns + '/' if ns else ''}{p.get('name')}"


def from_findings(title: str, details: Iterable[Mapping[str, Any]]) -> GroupMap:
    """The map from findings' JSON (as the store keeps them): the edges that have findings, the
    zones each end can land in as the finding states them (where pods run, for a live finding:
    certainty `observed`); replica counts are unknown."""
    zones: dict[str, list[str]] = {}
    observed: dict[str, list[str]] = {}  # a live finding (certainty observed) states where pods run
    edges: dict[tuple[str, str, str, str], MapEdge] = {}
    for d in details:
        edge = d.get("edge")
        if not edge:
            continue
        src, dst = edge.get("from") or {}, edge.get("to") or {}
        s, t = str(src.get("role", "?")), str(dst.get("role", "?"))
        for role, info in ((s, src), (t, dst)):
            have = zones.setdefault(role, [])
            have.extend(z for z in info.get("zones") or () if z not in have)
            if d.get("certainty") == "observed":
                seen = observed.setdefault(role, [])
                seen.extend(z for z in info.get("zones") or () if z not in seen)
        ports = str(edge.get("port") or "ephemeral")
        proto = str(edge.get("protocol") or "TCP")
        pairs = tuple((a, b) for a in src.get("zones") or () for b in dst.get("zones") or () if a != b)
        blocked = str(d.get("rule", "")) in BLOCKED_RULES
        if not pairs and blocked:
            pairs = tuple((a, b) for a in src.get("zones") or () for b in dst.get("zones") or ())
        key = (s, t, ports, proto)
        old = edges.get(key)
        policies = tuple(_policy_name(p) for p in d.get("policies") or ())
        new = MapEdge(
            s,
            t,
            ports,
            proto,
            denied=pairs if blocked else (),
            allowed=() if blocked else pairs,
            policies=policies,
            split=str(d.get("certainty")) if pairs and any(a != b for a, b in pairs) else None,
        )
        if old is None or (blocked and not old.denied):
            edges[key] = new
    roles = tuple(MapRole(name, None, tuple(z), tuple(observed.get(name, ()))) for name, z in zones.items())
    return GroupMap(title, roles, tuple(edges.values()))


def from_group(groups: Groups, group: Group, findings: Sequence[Finding] = ()) -> GroupMap:
    """The map from a fresh scan: every role of the group (and of the workloads its edges reach)
    with replicas and feasible zones, every edge with its allowed and denied zone pairs; the
    deciding policies come from the findings on that edge."""
    by_identity = {g.workload.identity: g for g in groups.groups}
    roles: dict[str, MapRole] = {}
    for r in group.roles:
        roles[r.name] = MapRole(r.name, r.replicas, () if r.unschedulable else r.feasible_zones)
    edges = []
    for e in group.edges:
        dest = e.destination
        if e.destination_workload is not None:
            other = by_identity.get(e.destination_workload.identity)
            name = e.destination_workload.name
            dest = name if e.destination == name else f"{name}/{e.destination}"
            if dest not in roles:
                peer = next((r for r in other.roles if r.name == e.destination), None) if other else None
                roles[dest] = MapRole(
                    dest,
                    peer.replicas if peer else None,
                    peer.feasible_zones if peer and not peer.unschedulable else (),
                )
        policies: list[str] = []
        for f in findings:
            if (
                f.edge is not None
                and f.workload.identity == group.workload.identity
                and f.edge.from_role == e.source
                and f.edge.to_role == e.destination
                and f.edge.port == e.port
            ):
                policies.extend(
                    f"{p.kind} {p.namespace + '/' if p.namespace else ''}{p.name}" for p in f.policies
                )
        edges.append(
            MapEdge(
                e.source,
                dest,
                e.ports,
                e.protocol,
                e.denied,
                e.allowed,
                tuple(dict.fromkeys(policies)),
                e.split,
            )
        )
    w = group.workload
    return GroupMap(f"{w.kind} {w.namespace}/{w.name}", tuple(roles.values()), tuple(edges))


# -- layout ------------------------------------------------------------------------------------


def _attr(value: str) -> str:
    return escape(value, {'"': "&quot;", "\n": "&#10;"})


def fit_text(text: str, width: float, size: float = FONT) -> str:
    """The text cut (with an ellipsis) to what fits `width` at the estimated character width."""
    room = max(1, int(width / (0.62 * size)))
    return text if len(text) <= room else text[: room - 1] + "…"


def text_width(text: str, size: float = FONT) -> float:
    """Estimated rendered width; the layout and the geometry tests use the same estimate."""
    return len(text) * 0.62 * size


def _representative(edge: MapEdge, feasible: Mapping[str, tuple[str, ...]]) -> tuple[str, str, bool]:
    """(source zone, destination zone, denied) of the one placement the map draws for an edge:
    a denied one if any (a crossing one first), else a crossing allowed one, else a shared zone."""
    for all_pairs, denied in ((edge.denied, True), (edge.allowed, False)):
        pairs = [
            (a, b)
            for a, b in all_pairs
            if a in feasible.get(edge.source, ()) and b in feasible.get(edge.destination, ())
        ]
        if pairs:
            a, b = min([p for p in pairs if p[0] != p[1]] or pairs)
            return a, b, denied
    src = feasible.get(edge.source) or (UNKNOWN_ZONE,)
    dst = feasible.get(edge.destination) or (UNKNOWN_ZONE,)
    shared = min(set(src) & set(dst), default=None)
    if shared is not None:
        return shared, shared, False
    return src[0], dst[0], False


def svg(group: GroupMap) -> str:
    """The map as one self-contained SVG element."""
    zones = group.zones
    roles = list(group.roles)
    unknown = zones == (UNKNOWN_ZONE,)
    feasible = {r.name: (UNKNOWN_ZONE,) if unknown else r.feasible for r in roles}
    for e in group.edges:  # an edge to a role the input does not describe still gets a box
        for name in (e.source, e.destination):
            if name not in feasible:
                roles.append(MapRole(name, None, ()))
                feasible[name] = ()
    n_edges = len(group.edges)
    gutter = 2 * COL_PAD + TRACK * (n_edges + 1)
    row_gap = 24 + TRACK * (n_edges + 1)
    col_w = BOX_W + 2 * COL_PAD
    col_x = {z: gutter + i * (col_w + gutter) for i, z in enumerate(zones)}
    top = HEAD_H + row_gap
    row_y = {r.name: top + i * (BOX_H + row_gap) for i, r in enumerate(roles)}
    grid_bottom = top + len(roles) * (BOX_H + row_gap) - row_gap + 12
    width = gutter + len(zones) * (col_w + gutter)

    boxes: dict[tuple[str, str], Box] = {}
    placed: dict[str, list[str]] = {}
    for r in roles:
        # No zone known or unschedulable: one box in the first column, marked.
        zs = [z for z in zones if z in feasible[r.name] or z in r.actual] or [zones[0]]
        placed[r.name] = zs
        for z in zs:
            boxes[(r.name, z)] = Box(r.name, z, col_x[z] + COL_PAD, row_y[r.name])

    parts: list[str] = []
    badges: list[str] = []
    key: list[tuple[int, str, str, str]] = []  # number, state, crossing, text
    slots_out: dict[tuple[str, str], int] = {}
    slots_in: dict[tuple[str, str], int] = {}
    loops: dict[tuple[str, str], int] = {}
    badges_xy: list[tuple[float, float]] = []
    for k, e in enumerate(group.edges):
        number = k + 1
        sz, dz, denied = _representative(e, feasible)
        if (e.source, sz) not in boxes:
            sz = placed[e.source][0]
        if (e.destination, dz) not in boxes:
            dz = placed[e.destination][0]
        s, d = boxes[(e.source, sz)], boxes[(e.destination, dz)]
        state = "denied" if denied else "allowed"
        crossing = sz != dz and UNKNOWN_ZONE not in (sz, dz)
        crossing_any = crossing or any(a != b for a, b in (*e.denied, *e.allowed))
        label = f"{e.source} → {e.destination}  {e.protocol}/{e.ports}  {state}"
        if crossing:
            label += f" {sz} → {dz}"
        if e.policies:
            label += " — decided by " + ", ".join(e.policies)
        elif denied:
            label += " — default deny"
        css = f"edge {state}" + (" crossing" if crossing else "")
        common = (
            f'class="{css}" data-edge="{number}" data-from="{_attr(sz)}" data-to="{_attr(dz)}" '
            f'data-src-box="{_attr(e.source)}|{_attr(sz)}" data-dst-box="{_attr(e.destination)}|{_attr(dz)}"'
        )
        if s is d:  # a role to itself in one zone: a loop over the box's top border
            i = loops.get((s.role, s.zone), 0)
            loops[(s.role, s.zone)] = i + 1
            x1 = s.x + BOX_W - 16 - i * 46  # each loop with its badge on its right, clear of the next
            x2 = x1 - 22
            y = s.y
            lift = 16
            path = f"M{x1:.1f},{y:.1f} C{x1:.1f},{y - lift:.1f} {x2:.1f},{y - lift:.1f} {x2:.1f},{y:.1f}"
            head = f"{x2 - 4:.1f},{y - 7:.1f} {x2 + 4:.1f},{y - 7:.1f} {x2:.1f},{y:.1f}"
            bx, by = x1 + 11, y - BADGE_R
        else:
            j = slots_out.get((s.role, s.zone), 0)
            slots_out[(s.role, s.zone)] = j + 1
            i = slots_in.get((d.role, d.zone), 0)
            slots_in[(d.role, d.zone)] = i + 1
            ys = s.y + 10 + (j * 8) % (BOX_H - 16)
            yd = d.y + BOX_H - 10 - (i * 8) % (BOX_H - 16)
            gx_out = s.x + BOX_W + COL_PAD + TRACK * (k + 1)
            gx_in = d.x - COL_PAD - gutter + TRACK * (k + 1)
            yh = d.y - row_gap + 8 + TRACK * k  # this edge's track in the row gutter above the destination
            xe = d.x
            path = f"M{s.x + BOX_W:.1f},{ys:.1f} H{gx_out:.1f} V{yh:.1f} H{gx_in:.1f} V{yd:.1f} H{xe:.1f}"
            head = f"{xe - 8:.1f},{yd - 4:.1f} {xe - 8:.1f},{yd + 4:.1f} {xe:.1f},{yd:.1f}"
            bx, by = _badge_spot(gx_out, gx_in, yh, k, badges_xy)
        badges_xy.append((bx, by))
        title = f"<title>{escape(label)}</title>"
        if crossing:
            parts.append(f'<path class="halo" d="{path}"/>')
        parts.append(f'<path {common} d="{path}">{title}</path>')
        parts.append(f'<polygon class="head {state}" points="{head}"/>')
        badges.append(
            f'<g class="badge {state}" data-edge="{number}">'
            f'<circle cx="{bx:.1f}" cy="{by:.1f}" r="{BADGE_R}"/>'
            f'<text x="{bx:.1f}" y="{by + 4:.1f}" text-anchor="middle">{number}</text>{title}</g>'
        )
        key.append((number, state, "crossing" if crossing_any else "", label))

    key_top = grid_bottom + 18
    width = max(width, 720)
    room = int((width - 3 * COL_PAD - 2 * BADGE_R) / CHAR_W)
    wrapped = [
        (number, state, crossing, textwrap.wrap(text, room, break_on_hyphens=False) or [""])
        for number, state, crossing, text in key
    ]
    legend_y = key_top + KEY_LINE * sum(len(w[3]) for w in wrapped) + 14
    notes_y = legend_y + 44
    height = notes_y + KEY_LINE * len(group.notes) + 8
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="zonemap" viewBox="0 0 {width:.0f} {height:.0f}" '
        f'width="{width:.0f}" height="{height:.0f}" role="img" '
        f'aria-label="{_attr(group.title or "zone map")}">',
        f"<style>{STYLE}</style>",
        f"<title>{escape(group.title or 'zone map')}</title>",
    ]
    for z in zones:
        x = col_x[z]
        out.append(
            f'<rect class="zone" data-zone="{_attr(z)}" x="{x}" y="{HEAD_H - 26}" width="{col_w}" '
            f'height="{grid_bottom - HEAD_H + 26}" rx="8"/>'
            f'<text class="zname" x="{x + 10}" y="{HEAD_H - 8}">{escape(fit_text(z, col_w - 20, 14))}'
            f"<title>{escape(z)}</title></text>"
        )
    by_name = {r.name: r for r in roles}
    for (name, zone), b in boxes.items():
        r = by_name[name]
        runs = zone in r.actual
        unplaced = not feasible.get(name) and not r.actual
        css = "role actual" if runs else ("role unplaced" if unplaced else "role feasible")
        count = f"×{r.replicas}" if r.replicas is not None else ""
        where = "runs here" if runs else ("no node fits" if unplaced else "can land here")
        second = " · ".join(x for x in (count, where) if x)
        out.append(
            f'<g class="box" data-role="{_attr(name)}" data-zone="{_attr(zone)}">'
            f'<rect class="{css}" x="{b.x:.1f}" y="{b.y:.1f}" width="{BOX_W}" height="{BOX_H}" rx="6"/>'
            f'<text class="rname" x="{b.x + 8:.1f}" y="{b.y + 19:.1f}">'
            f"{escape(fit_text(name, BOX_W - 16))}</text>"
            f'<text class="rmeta" x="{b.x + 8:.1f}" y="{b.y + 36:.1f}">'
            f"{escape(fit_text(second, BOX_W - 16, 11))}</text>"
            f"<title>{escape(name)}: {escape(second)} in {escape(zone)}</title></g>"
        )
    out.extend(parts)
    out.extend(badges)
    y = key_top
    for number, state, marked, lines in wrapped:
        cls = " ".join(c for c in ("key", state, marked) if c)
        out.append(
            f'<g class="{cls}" data-edge="{number}">'
            f'<circle class="kbadge {state}" cx="{COL_PAD + BADGE_R}" cy="{y - 4}" r="{BADGE_R}"/>'
            f'<text class="knum" x="{COL_PAD + BADGE_R}" y="{y}" text-anchor="middle">{number}</text>'
        )
        for line in lines:
            out.append(
                f'<text class="ktext {state}" x="{COL_PAD + 2 * BADGE_R + 8}" y="{y}">{escape(line)}</text>'
            )
            y += KEY_LINE
        out.append("</g>")
    out.append(_legend(legend_y))
    y = notes_y
    for note in group.notes:
        out.append(
            f'<text class="note" x="{COL_PAD}" y="{y}">{escape(fit_text(note, width - 2 * COL_PAD))}</text>'
        )
        y += KEY_LINE
    out.append("</svg>")
    return "".join(out)


def _badge_spot(
    gx_out: float, gx_in: float, yh: float, k: int, taken: Sequence[tuple[float, float]]
) -> tuple[float, float]:
    """A badge on the edge's horizontal track, clear of every badge already placed."""
    lo, hi = sorted((gx_out, gx_in))
    candidates = [lo + (hi - lo) * f for f in (0.5, 0.3, 0.7, 0.15, 0.85)] if hi - lo > 2 * BADGE_R else []
    candidates += [gx_out]
    for x in candidates:
        if all(abs(x - tx) > 2 * BADGE_R + 2 or abs(yh - ty) > 2 * BADGE_R + 2 for tx, ty in taken):
            return x, yh
    return candidates[0], yh


def _legend(y: float) -> str:
    items = [
        f'<rect class="role actual" x="{COL_PAD}" y="{y - 11}" width="26" height="14" rx="3"/>'
        f'<text class="ltext" x="{COL_PAD + 32}" y="{y}">pods run here</text>',
        f'<rect class="role feasible" x="{COL_PAD + 130}" y="{y - 11}" width="26" height="14" rx="3"/>'
        f'<text class="ltext" x="{COL_PAD + 162}" y="{y}">can land here</text>',
        f'<path class="edge allowed" d="M{COL_PAD + 262},{y - 4} H{COL_PAD + 296}"/>'
        f'<text class="ltext" x="{COL_PAD + 302}" y="{y}">allowed</text>',
        f'<path class="edge denied" d="M{COL_PAD + 372},{y - 4} H{COL_PAD + 406}"/>'
        f'<text class="ltext" x="{COL_PAD + 412}" y="{y}">denied</text>',
        f'<path class="halo" d="M{COL_PAD + 472},{y - 4} H{COL_PAD + 506}"/>'
        f'<path class="edge allowed crossing" d="M{COL_PAD + 472},{y - 4} H{COL_PAD + 506}"/>'
        f'<text class="ltext" x="{COL_PAD + 512}" y="{y}">crosses zones</text>',
    ]
    return f'<g class="legend">{"".join(items)}</g>'


STYLE = (
    ".zonemap{font-family:system-ui,'DejaVu Sans',sans-serif}"
    ".zone{fill:#f4f6f8;stroke:#9aa5b1}.zname{font-weight:600;font-size:14px;fill:#334}"
    ".role{stroke-width:1.5}.role.feasible{fill:#fff;stroke:#556;stroke-dasharray:5 3}"
    ".role.actual{fill:#dbe9f9;stroke:#1d4f91}"
    ".role.unplaced{fill:#fdecea;stroke:#b71c1c;stroke-dasharray:2 2}"
    ".rname{font-size:12px;font-weight:600;fill:#112}.rmeta{font-size:11px;fill:#445}"
    ".edge{fill:none;stroke-width:2.2}.edge.denied{stroke:#c62828;stroke-dasharray:7 4}"
    ".edge.allowed{stroke:#2e7d32}.halo{fill:none;stroke:#f5b041;stroke-width:7;stroke-opacity:.55}"
    ".head.denied{fill:#c62828}.head.allowed{fill:#2e7d32}"
    ".badge circle,.kbadge{stroke:#fff;stroke-width:1.5}"
    ".badge.denied circle,.kbadge.denied{fill:#c62828}"
    ".badge.allowed circle,.kbadge.allowed{fill:#2e7d32}"
    ".badge text,.knum{font-size:10px;font-weight:700;fill:#fff}"
    ".ktext{font-size:12px;fill:#223}.ktext.denied{fill:#7a1f1f}.ltext{font-size:11px;fill:#445}"
    ".note{font-size:11px;fill:#666}"
)
