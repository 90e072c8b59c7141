"""Replay np-guard netpol-analyzer golden outputs against our reachability engine.

Data: tests/data/netpol/netpol-analyzer/ (np-guard/netpol-analyzer @ e54a33430edb, Apache-2.0; see
tests/data/netpol/README.md). Each connlist golden line reads `src => dst : conns` where a peer is
`ns/name[Kind]` (pods are named after their controlling owner) or `a.b.c.d-e.f.g.h[External]`.

One pytest id per ordered pair of workloads, and per (External range, workload) in both directions:

* `case:src=>dst`                 the pair is listed; our allowed connections must equal its conns;
* `case:src=>dst:none`            the pair is not listed: netpol-analyzer found no connection;
* `case:src=>dst:via=RANGE`       an External range listed on the other side only: its first
                                  address lies in RANGE, whose line for this workload decides.

Every pod of the source workload must agree with every pod of the destination workload. Ranges are
probed at their first address. netpol-analyzer leaves out pairs of a workload with itself.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from auditor import yamlio
from auditor.audit.explain import endpoint_for
from auditor.inventory import Inventory, policy_engine
from auditor.reachability.endpoints import Endpoint, ExternalEndpoint, PodEndpoint, parse_ip
from auditor.reachability.engine import FlowVerdict, PolicyEngine
from auditor.reachability.policy import DirectionalVerdict
from auditor.reachability.ports import PROTOCOLS, ConnSet, PortSet
from auditor.settings.config import NetworkConfig, Settings
from auditor.sources.objects import build_inventory, iter_objects

ROOT = Path(__file__).resolve().parents[1] / "data" / "netpol" / "netpol-analyzer"
MANIFESTS = ROOT / "tests"
GOLDEN = ROOT / "test_outputs" / "connlist"

# case name → golden connlist file (manifests are tests/<case>/)
CASES = {
    "anp_banp_blog_demo": "anp_banp_blog_demo_connlist_output.txt",
    "anp_np_banp_core_test": "anp_np_banp_core_test_connlist_output.txt",
    "anp_test_3_pass_traffic": "anp_test_3_pass_traffic_connlist_output.txt",
    "ipblockstest": "ipblockstest_connlist_output.txt",
}

EXTERNAL = "[External]"


# ---------------------------------------------------------------------------------------------
# Golden files


def parse_conns(text: str) -> ConnSet:
    """netpol-analyzer connection text → ConnSet.

    "All Connections" is TCP, UDP and SCTP on every port; otherwise `PROTO ports` items such as
    "TCP 1-8079,8081-65535" or "TCP 80,UDP 53" (a protocol without ports means all its ports).
    """
    text = text.strip()
    if text == "All Connections":
        return ConnSet.all()
    if text == "No Connections":
        return ConnSet.none()
    out = ConnSet.none()
    items = list(re.finditer(r"\b(TCP|UDP|SCTP)\b\s*([0-9,\- ]*)", text))
    assert items, f"cannot parse connections {text!r}"
    for m in items:
        ranges = [r.strip() for r in m.group(2).split(",") if r.strip()]
        intervals = []
        for r in ranges:
            lo, _, hi = r.partition("-")
            intervals.append((int(lo), int(hi or lo)))
        out = out | ConnSet.of(m.group(1), PortSet.of(*intervals) if intervals else PortSet.all())
    return out


def parse_connlist(path: Path) -> list[tuple[str, str, ConnSet]]:
    """Lines `src => dst : conns` → (src, dst, ConnSet)."""
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        m = re.fullmatch(r"(\S+) => (\S+) : (.+)", line.strip())
        assert m, f"{path.name}: unexpected line {line!r}"
        out.append((m.group(1), m.group(2), parse_conns(m.group(3))))
    return out


def parse_connlist_json(path: Path) -> list[tuple[str, str, ConnSet]]:
    return [(e["src"], e["dst"], parse_conns(e["conn"])) for e in json.loads(path.read_text())]


def is_external(peer: str) -> bool:
    return peer.endswith(EXTERNAL)


def ip_range(peer: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...]:
    """`a.b.c.d-e.f.g.h[External]` → (first, last) address."""
    first, _, last = peer.removesuffix(EXTERNAL).partition("-")
    return parse_ip(first), parse_ip(last or first)


# ---------------------------------------------------------------------------------------------
# Our side: manifests → inventory → pods grouped by netpol-analyzer workload name


@dataclass
class Cluster:
    inventory: Inventory
    engine: PolicyEngine
    # netpol-analyzer workload name (`ns/name[Kind]`) → our endpoints for its pods
    members: dict[str, list[Endpoint]]


def _owner(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of a pod's controlling owner, as netpol-analyzer names pods."""
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    chosen = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    return (str(chosen["kind"]), str(chosen["name"])) if chosen else None


@cache
def cluster(case: str) -> Cluster:
    docs, errors = yamlio.load_paths([MANIFESTS / case])
    # netpol-analyzer's pod model has no hostNetwork: it selects host-network pods like any other
    # (an implementation-defined choice; our default, "node", is tested in test_host_network_reading).
    settings = Settings(network=NetworkConfig(cni="generic", host_network_pods="pod"))
    inv = build_inventory(docs, settings, errors)
    default_ns = settings.kubernetes.default_namespace
    owners = {
        (raw.namespace(default_ns), raw.name): _owner(raw.obj)
        for raw in iter_objects(docs)
        if raw.kind == "Pod"
    }
    members: dict[str, list[Endpoint]] = {}
    for w in inv.workloads:
        owner = owners.get((w.ref.namespace, w.ref.name)) if w.ref.kind == "Pod" else None
        kind, name = owner or (w.ref.kind, w.ref.name)
        key = f"{w.ref.namespace}/{name}[{kind}]"
        for role in w.roles:
            members.setdefault(key, []).append(endpoint_for(inv, role, None))
    return Cluster(inv, policy_engine(inv), members)


def show(ep: Endpoint) -> str:
    return ep.name if isinstance(ep, PodEndpoint) else str(ep)


def probe(c: Cluster, peer: str) -> list[Endpoint]:
    if is_external(peer):
        return [ExternalEndpoint(ip_range(peer)[0])]
    assert peer in c.members, f"{peer} is not a workload in our inventory (have: {sorted(c.members)})"
    return c.members[peer]


# ---------------------------------------------------------------------------------------------
# Expected pairs, listed and absent


@dataclass(frozen=True)
class Expectation:
    case: str
    src: str
    dst: str
    conns: ConnSet
    tag: str  # "" listed, ":none" absent, ":via=RANGE" covered by another listed range

    @property
    def id(self) -> str:
        return f"{self.case}:{self.src}=>{self.dst}{self.tag}"


def _covering(
    lines: Mapping[tuple[str, str], ConnSet], peer_range: str, workload: str, external_is_src: bool
) -> tuple[str, ConnSet] | None:
    """The listed line (range, conns) whose External range holds `peer_range`'s first address."""
    addr = ip_range(peer_range)[0]
    for (src, dst), conns in lines.items():
        ext, other = (src, dst) if external_is_src else (dst, src)
        if other != workload or not is_external(ext):
            continue
        lo, hi = ip_range(ext)
        if lo.version == addr.version and lo <= addr <= hi:
            return ext, conns
    return None


def expectations(case: str) -> Iterator[Expectation]:
    golden = parse_connlist(GOLDEN / CASES[case])
    lines = {(s, d): c for s, d, c in golden}
    assert len(lines) == len(golden), f"{case}: duplicate pairs in the golden file"
    workloads = sorted(cluster(case).members)
    listed = {p for s, d, _ in golden for p in (s, d)}
    unknown = sorted(p for p in listed if not is_external(p) and p not in workloads)
    assert not unknown, f"{case}: golden workloads missing from our inventory: {unknown}"
    ranges = sorted(p for p in listed if is_external(p))
    for src in workloads:
        for dst in workloads:
            if src != dst:
                conns = lines.get((src, dst))
                yield Expectation(case, src, dst, conns or ConnSet.none(), "" if conns else ":none")
    for rng in ranges:
        for w in workloads:
            for src, dst, ext_is_src in ((rng, w, True), (w, rng, False)):
                if (src, dst) in lines:
                    yield Expectation(case, src, dst, lines[(src, dst)], "")
                    continue
                cover = _covering(lines, rng, w, ext_is_src)
                if cover:
                    yield Expectation(case, src, dst, cover[1], f":via={cover[0].removesuffix(EXTERNAL)}")
                else:
                    yield Expectation(case, src, dst, ConnSet.none(), ":none")


ALL_EXPECTATIONS = [e for case in CASES for e in expectations(case)]


# ---------------------------------------------------------------------------------------------
# Tests


@pytest.mark.parametrize("case", list(CASES))
def test_case_loads_cleanly(case: str) -> None:
    c = cluster(case)
    assert not c.inventory.errors, "\n".join(map(str, c.inventory.errors))
    assert c.members


def test_core_test_json_matches_txt() -> None:
    txt = parse_connlist(GOLDEN / "anp_np_banp_core_test_connlist_output.txt")
    js = parse_connlist_json(GOLDEN / "anp_np_banp_core_test_connlist_output.json")
    assert sorted(txt, key=str) == sorted(js, key=str)


def test_parse_conns() -> None:
    assert parse_conns("All Connections") == ConnSet.all()
    assert parse_conns("TCP 1-8079,8081-65535") == ConnSet.of("TCP", PortSet.of((1, 8079), (8081, 65535)))
    assert parse_conns("UDP 53") == ConnSet.single("UDP", 53)
    assert parse_conns("TCP 80,UDP 53") == ConnSet.single("TCP", 80) | ConnSet.single("UDP", 53)
    assert ConnSet.all() == ConnSet.from_mapping(dict.fromkeys(PROTOCOLS, PortSet.all()))


@pytest.mark.parametrize("exp", ALL_EXPECTATIONS, ids=lambda e: e.id)
def test_connlist_pair(exp: Expectation) -> None:
    c = cluster(exp.case)
    wrong = []
    for src in probe(c, exp.src):
        for dst in probe(c, exp.dst):
            got = c.engine.flow(src, dst).allowed_conns()
            if got != exp.conns:
                wrong.append(f"{show(src)} => {show(dst)}: got {got}")
    assert not wrong, f"expected {exp.conns}; " + "; ".join(wrong)


# ---------------------------------------------------------------------------------------------
# anp_banp_blog_demo --explain: the deciding policies per pair

EXPLAIN = GOLDEN / "anp_banp_blog_demo_explain_output.txt"
_POLICY_LINE = re.compile(
    r"(AdminNetworkPolicy|BaselineAdminNetworkPolicy|NetworkPolicy) '([^']+)' "
    r"(allows|denies|passes|selects)\b.*?(?:by (?:Ingress|Egress) rule (\S+))?$"
)
_EFFECTS = {"allows": "allow", "denies": "deny", "passes": "pass", "selects": "isolate"}

# (kind, name as `ns/name` or cluster-scoped `name`, effect, rule)
Decision = tuple[str, str, str, str]


@dataclass(frozen=True)
class ExplainedPair:
    src: str
    dst: str
    allowed: bool
    # per direction ("Egress"/"Ingress"): (direction allowed, deciding policies in evaluation order)
    directions: tuple[tuple[str, bool, tuple[Decision, ...]], ...]

    @property
    def id(self) -> str:
        return f"anp_banp_blog_demo:explain:{self.src}=>{self.dst}"


def _rule_name(kind: str, rule: str | None, direction: str) -> str:
    """netpol-analyzer names NetworkPolicy rules `#1`; we name them `ingress[0]`."""
    if not rule:
        return ""
    if kind == "NetworkPolicy" and rule.startswith("#"):
        return f"{direction.lower()}[{int(rule[1:]) - 1}]"
    return rule


def parse_explain(path: Path) -> list[ExplainedPair]:
    pairs: list[ExplainedPair] = []
    text = path.read_text()
    specific, _, defaults = text.partition("# All Connections due to the system default (Allow all) #")
    for block in specific.split("Connections between ")[1:]:
        head, *body = block.splitlines()
        src, dst = head.removesuffix(":").split(" => ")
        allowed = any(line.strip() == "Allowed connections:" for line in body)
        assert allowed != any(line.strip() == "Denied connections:" for line in body), block
        dirs: dict[str, tuple[bool, list[Decision]]] = {}
        current = None
        for raw in body:
            line = raw.strip()
            m = re.match(r"(Egress|Ingress) \((Allowed|Denied)\)", line)
            if m:
                current = m.group(1)
                dirs[current] = (m.group(2) == "Allowed", [])
                continue
            p = _POLICY_LINE.match(line)
            if p and current:
                kind, name, verb, rule = p.groups()
                effect = _EFFECTS[verb]
                dirs[current][1].append((kind, name, effect, _rule_name(kind, rule, current)))
        assert set(dirs) == {"Egress", "Ingress"}, block
        pairs.append(
            ExplainedPair(
                src, dst, allowed, tuple((d, ok, tuple(ds)) for d, (ok, ds) in sorted(dirs.items()))
            )
        )
    for line in defaults.splitlines():
        if " => " in line and not line.startswith("#"):
            src, dst = line.strip().split(" => ")
            pairs.append(ExplainedPair(src, dst, True, (("Egress", True, ()), ("Ingress", True, ()))))
    return pairs


def _our_decisions(side: DirectionalVerdict) -> tuple[Decision, ...]:
    """Deciders of every segment, in chain order, each once."""
    out: list[Decision] = []
    for seg in side.segments:
        for d in seg.deciders:
            ref = d.policy
            name = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
            decision = (ref.kind, name, d.effect, "" if d.effect == "isolate" else d.rule)
            if decision not in out:
                out.append(decision)
    return tuple(out)


EXPLAINED = parse_explain(EXPLAIN)


def test_explain_covers_every_pair() -> None:
    """The explain output names every ordered pair of distinct peers exactly once."""
    c = cluster("anp_banp_blog_demo")
    peers = [*c.members, "0.0.0.0-255.255.255.255[External]"]
    expected = {(s, d) for s in peers for d in peers if s != d and not (is_external(s) and is_external(d))}
    got = [(p.src, p.dst) for p in EXPLAINED]
    assert len(got) == len(set(got))
    assert set(got) == expected


def test_explain_agrees_with_connlist() -> None:
    listed = {(s, d) for s, d, _ in parse_connlist(GOLDEN / CASES["anp_banp_blog_demo"])}
    assert {(p.src, p.dst) for p in EXPLAINED if p.allowed} == listed


@pytest.mark.parametrize("pair", EXPLAINED, ids=lambda p: p.id)
def test_explain_deciders(pair: ExplainedPair) -> None:
    c = cluster("anp_banp_blog_demo")
    for src in probe(c, pair.src):
        for dst in probe(c, pair.dst):
            v: FlowVerdict = c.engine.flow(src, dst)
            assert v.allowed_conns() == (ConnSet.all() if pair.allowed else ConnSet.none())
            for direction, ok, decisions in pair.directions:
                side = v.egress if direction == "Egress" else v.ingress
                assert side.allowed_conns() == (ConnSet.all() if ok else ConnSet.none()), direction
                assert _our_decisions(side) == decisions, direction


def test_host_network_reading() -> None:
    """With the default reading (host-network pods speak as their node), the hostNetwork DaemonSet
    pods selected by `enable-from-ipblock-to-isolated-by-tier` are not isolated by it."""
    docs, errors = yamlio.load_paths([MANIFESTS / "ipblockstest"])
    inv = build_inventory(docs, Settings(network=NetworkConfig(cni="generic")), errors)
    engine = policy_engine(inv)
    eps = {str(r): endpoint_for(inv, r, None) for w in inv.workloads for r in w.roles}
    host = eps["kube-system/calico-node-mgdlr"]
    assert host.host_network
    client = eps["default/cognetive-agents-js4qc"]
    assert engine.flow(client, host).allowed_conns().is_all()
