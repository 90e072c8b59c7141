"""The group map's geometry, computed from the SVG it emits (ElementTree): boxes and labels never
overlap, every edge starts on its source box's border and ends on its destination box's border,
no edge runs through a box, each edge is drawn once with its verdict and deciding policy."""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET

import pytest

from auditor.reports import zonemap
from auditor.reports.zonemap import GroupMap, MapEdge, MapRole

NS = {"s": "http://www.w3.org/2000/svg"}
Rect = tuple[float, float, float, float]  # x0, y0, x1, y1


def group(zones: int) -> GroupMap:
    names = [f"zone-{chr(ord('a') + i)}" for i in range(zones)]
    pairs = [(a, b) for a in names for b in names]
    crossing = [(a, b) for a, b in pairs if a != b]
    return GroupMap(
        f"PyTorchJob ml/train-{zones}",
        (
            MapRole("Master", 1, (names[-1],)),
            MapRole("Worker", 8, tuple(names), actual=(names[0],)),
            MapRole("trainer-coordinator/trainer-coordinator", 1, (names[0],)),
        ),
        (
            MapEdge(
                "Worker",
                "Master",
                "23456",
                denied=tuple(p for p in pairs if p[1] == names[-1] and p[0] != names[-1]),
                allowed=((names[-1], names[-1]),),
                policies=("CiliumNetworkPolicy ml/zone-only",),
                split="likely",
            ),
            MapEdge("Worker", "Worker", "32768-60999", allowed=tuple(pairs), split="likely"),
            MapEdge("Master", "Master", "29500", allowed=((names[-1], names[-1]),)),
            MapEdge(
                "Worker",
                "trainer-coordinator/trainer-coordinator",
                "9999",
                denied=tuple(crossing),
                policies=("NetworkPolicy ml/<deny-all>",),
                split="possible",
            ),
            MapEdge("Master", "Worker", "22", allowed=tuple((names[-1], z) for z in names)),
            MapEdge("Master", "Master", "32768-60999", denied=((names[-1], names[-1]),)),
        ),
    )


def _rect(el: ET.Element) -> Rect:
    x, y = float(el.get("x", 0)), float(el.get("y", 0))
    return (x, y, x + float(el.get("width", 0)), y + float(el.get("height", 0)))


def _text_rect(el: ET.Element) -> Rect:
    text = "".join(el.itertext()).strip()
    title = el.find("s:title", NS)
    if title is not None and title.text:
        text = text[: len(text) - len(title.text.strip())] if text.endswith(title.text.strip()) else text
    size = float(re.search(r"font-size:(\d+)", zonemap.STYLE.split(_css_class(el))[1]).group(1))  # type: ignore[union-attr]
    x, y = float(el.get("x", 0)), float(el.get("y", 0))
    w = zonemap.text_width(text, size)
    if el.get("text-anchor") == "middle":
        x -= w / 2
    return (x, y - size * 0.8, x + w, y + size * 0.2)


def _css_class(el: ET.Element) -> str:
    return "." + (el.get("class") or "").split()[0] + "{"


def _overlap(a: Rect, b: Rect) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _inside(inner: Rect, outer: Rect) -> bool:
    return outer[0] <= inner[0] and inner[2] <= outer[2] and outer[1] <= inner[1] and inner[3] <= outer[3]


def _points(d: str) -> list[tuple[float, float]]:
    """The corner points of an orthogonal path (M x,y then H/V moves)."""
    tokens = re.findall(r"([MHVL])\s*([-\d.]+)(?:,([-\d.]+))?", d)
    points: list[tuple[float, float]] = []
    for cmd, a, b in tokens:
        if cmd in "ML":
            points.append((float(a), float(b)))
        elif cmd == "H":
            points.append((float(a), points[-1][1]))
        else:
            points.append((points[-1][0], float(a)))
    return points


def _loop_end(d: str) -> tuple[float, float]:
    x, y = re.findall(r"([-\d.]+),([-\d.]+)", d)[-1]
    return float(x), float(y)


def _on_border(p: tuple[float, float], r: Rect) -> bool:
    x, y = p
    on_x = abs(x - r[0]) < 0.6 or abs(x - r[2]) < 0.6
    on_y = abs(y - r[1]) < 0.6 or abs(y - r[3]) < 0.6
    within_x = r[0] - 0.6 <= x <= r[2] + 0.6
    within_y = r[1] - 0.6 <= y <= r[3] + 0.6
    return (on_x and within_y) or (on_y and within_x)


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


@pytest.mark.parametrize("zones", [2, 3, 6])
def test_the_map_has_no_overlaps_and_every_edge_ends_on_its_boxes(zones: int) -> None:
    g = group(zones)
    root = parse(zonemap.svg(g))
    boxes: dict[str, Rect] = {}
    for box in root.iterfind(".//s:g[@class='box']", NS):
        rect = box.find("s:rect", NS)
        assert rect is not None
        boxes[f"{box.get('data-role')}|{box.get('data-zone')}"] = _rect(rect)
        for text in box.iterfind("s:text", NS):  # the role's labels stay inside its box
            assert _inside(_text_rect(text), _rect(rect)), (box.get("data-role"), "".join(text.itertext()))
    # Worker can land in every zone: one box per zone; Master and the coordinator one each.
    assert len(boxes) == zones + 2
    names = list(boxes)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not _overlap(boxes[a], boxes[b]), (a, b)

    columns = {z.get("data-zone"): _rect(z) for z in root.iterfind(".//s:rect[@class='zone']", NS)}
    assert len(columns) == zones
    for key, r in boxes.items():
        assert _inside(r, columns[key.split("|")[1]]), key

    edges = root.findall(".//s:path[@data-edge]", NS)
    loops: list[tuple[str, Rect]] = []
    assert sorted(int(e.get("data-edge", 0)) for e in edges) == list(range(1, len(g.edges) + 1))
    for e in edges:
        points = _points(e.get("d", ""))
        src, dst = boxes[e.get("data-src-box", "")], boxes[e.get("data-dst-box", "")]
        assert _on_border(points[0], src), (e.get("data-edge"), points[0], src)
        assert _on_border(points[-1], dst), (e.get("data-edge"), points[-1], dst)
        if "C" in e.get("d", ""):  # a loop: both ends on the same box's top border
            assert src == dst
            (x1, y), (x2, _) = points[0], _loop_end(e.get("d", ""))
            loops.append((f"loop {e.get('data-edge')}", (min(x1, x2), y - 12, max(x1, x2), y)))
            continue
        for a, b in itertools.pairwise(points):  # no segment runs through a box
            seg = (min(a[0], b[0]), min(a[1], b[1]), max(a[0], b[0]), max(a[1], b[1]))
            for key, r in boxes.items():
                shrunk = (r[0] + 1, r[1] + 1, r[2] - 1, r[3] - 1)
                assert not _overlap((seg[0] - 0.01, seg[1] - 0.01, seg[2] + 0.01, seg[3] + 0.01), shrunk), (
                    e.get("data-edge"),
                    key,
                )

    labels: list[tuple[str, Rect]] = []
    for badge in root.iterfind(".//s:g[@data-edge]", NS):
        circle = badge.find("s:circle", NS)
        assert circle is not None
        cx, cy, r = (float(circle.get(k, 0)) for k in ("cx", "cy", "r"))
        labels.append(
            (f"badge {badge.get('class')} {badge.get('data-edge')}", (cx - r, cy - r, cx + r, cy + r))
        )
    for text in root.iterfind(".//s:text", NS):
        if (text.get("class") or "") in ("ktext", "zname", "ltext", "note"):
            labels.append((f"text {''.join(text.itertext())[:30]}", _text_rect(text)))
    for key, r in boxes.items():
        labels.append((f"box {key}", r))
    labels.extend(loops)  # a loop's arc over its box is clear of every badge and other loop
    for i, (a, ra) in enumerate(labels):
        for b, rb in labels[i + 1 :]:
            assert not _overlap(ra, rb), (a, b)
    width = float(root.get("width", 0))
    for name, r in labels:
        assert r[2] <= width, name


def test_edges_say_their_verdict_port_and_deciding_policy() -> None:
    root = parse(zonemap.svg(group(3)))
    edges = {int(e.get("data-edge", 0)): e for e in root.findall(".//s:path[@data-edge]", NS)}
    worker_master = edges[1]
    assert worker_master.get("class") == "edge denied crossing"
    assert (worker_master.get("data-from"), worker_master.get("data-to")) == ("zone-a", "zone-c")
    title = worker_master.find("s:title", NS)
    assert title is not None and "TCP/23456" in (title.text or "")
    assert "decided by CiliumNetworkPolicy ml/zone-only" in (title.text or "")
    # Worker↔Worker crosses zones (allowed), Master→Master is a loop in zone-c.
    assert edges[2].get("class") == "edge allowed crossing"
    assert edges[3].get("class") == "edge allowed" and " C" in edges[3].get("d", "")
    keys = [
        " ".join("".join(t.itertext()) for t in k.iterfind("s:text[@class='ktext denied']", NS))
        for k in root.iterfind(".//s:g[@data-edge]", NS)
    ]
    assert any("decided by NetworkPolicy ml/<deny-all>" in k for k in keys)
    # Hover titles are escaped text, the SVG stays well-formed with a hostile name.
    legend = root.find(".//s:g[@class='legend']", NS)
    assert legend is not None
    assert {"".join(t.itertext()) for t in legend.iterfind("s:text", NS)} == {
        "pods run here",
        "can land here",
        "allowed",
        "denied",
        "crosses zones",
    }
    # The observed zone of Worker is drawn as "runs here".
    actual = [
        b.get("data-zone")
        for b in root.iterfind(".//s:g[@class='box']", NS)
        if b.find("s:rect[@class='role actual']", NS) is not None
    ]
    assert actual == ["zone-a"]


def test_a_stored_finding_becomes_a_map() -> None:
    detail = {
        "rule": "cross-zone-blocked",
        "certainty": "always",
        "edge": {
            "from": {"role": "Worker", "zones": ["zone-a"]},
            "to": {"role": "Master", "zones": ["zone-b"]},
            "port": 23456,
            "protocol": "TCP",
        },
        "policies": [{"kind": "NetworkPolicy", "namespace": "ml", "name": "<x>", "file": "a", "line": 1}],
    }
    root = parse(zonemap.svg(zonemap.from_findings("t <&>", [detail])))
    (edge,) = root.findall(".//s:path[@data-edge]", NS)
    assert edge.get("class") == "edge denied crossing"
    assert (edge.get("data-from"), edge.get("data-to")) == ("zone-a", "zone-b")
    assert root.get("aria-label") == "t <&>"


def test_a_live_finding_draws_where_the_pods_run() -> None:
    detail = {
        "rule": "cross-zone-traffic",
        "certainty": "observed",
        "edge": {
            "from": {"role": "Worker", "zones": ["zone-a", "zone-b"]},
            "to": {"role": "Master", "zones": ["zone-c"]},
            "port": 23456,
        },
    }
    root = parse(zonemap.svg(zonemap.from_findings("live", [detail])))
    running = {
        (b.get("data-role"), b.get("data-zone"))
        for b in root.iterfind(".//s:g[@class='box']", NS)
        if b.find("s:rect[@class='role actual']", NS) is not None
    }
    assert running == {("Worker", "zone-a"), ("Worker", "zone-b"), ("Master", "zone-c")}
    (edge,) = root.findall(".//s:path[@data-edge]", NS)
    assert edge.get("class") == "edge allowed crossing"
