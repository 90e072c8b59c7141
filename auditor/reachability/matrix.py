"""All-pairs verdicts over identity classes, as bitset rows.

For a set of pods, every pod maps to its identity (identity.py). For each direction and each
distinct *subject situation* (the policies that apply to it, its named ports when it is the
destination, the Calico rule filters it passes), one row is computed: for every piece of the
connection space where the rules in play are constant, the set of peer identities the direction
allows, as a Python int used as a bitset. Rows are shared by every identity in the same
situation, peer sets come from inverted label indexes instead of pairwise matching, so the work
grows with (situations × rules × pieces) bit operations, not with pods².

`allowed(src, dst, protocol, port)` is then two row look-ups and two bit tests; `Row.bits_over`
answers for a whole port range, which `auditor connectivity` (connectivity.py) aggregates per
namespace × zone. `ConnectivityMap` is the full map, in blocks of identity pairs, on Python ints
too; only the bulk count of one probe over every pod pair (`allowed_pod_pairs`, used by the
benchmarks) needs numpy: the optional extra `placement-auditor[matrix]`.

The per-pair engine (engine.py) stays the reference: the tests check this matrix against it.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

from auditor.model.labels import LabelSelector
from auditor.reachability.endpoints import Endpoint, PodEndpoint
from auditor.reachability.engine import UNION, PolicyEngine, TierDef
from auditor.reachability.policy import (
    Action,
    AnyPeer,
    CiliumEndpointPeer,
    CiliumEntityPeer,
    CompiledPolicy,
    Direction,
    K8sPodPeer,
    NodePeer,
    Peer,
    Rule,
)
from auditor.reachability.ports import MAX_PORT, PROTOCOLS, ConnSet, PortSet

if TYPE_CHECKING:
    import numpy as np


def _numpy() -> ModuleType:
    """numpy, for the bulk all-pairs counts only (the optional extra `matrix`)."""
    try:
        import numpy
    except ImportError:
        raise ImportError(
            "counting every pod pair needs numpy: pip install 'placement-auditor[matrix]'"
        ) from None
    return numpy


# (tier, some policy applies, some applicable policy isolates, [(action, [(connections, peers)])])
_CompiledTier = tuple[TierDef, bool, bool, list[tuple[Action, list[tuple[ConnSet, int]]]]]


@dataclass(frozen=True, slots=True)
class Row:
    """Allowed peer identities per protocol, piecewise over ports: `starts[i]` begins piece i."""

    pieces: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...]  # (protocol, starts, bitsets)

    def bits(self, protocol: str, port: int) -> int:
        return self.bits_over(protocol, port, port)

    def bits_over(self, protocol: str, lo: int, hi: int) -> int:
        """Peer identities allowed on every port of lo..hi (the pieces it overlaps, ANDed)."""
        for proto, starts, bitsets in self.pieces:
            if proto == protocol:
                first = bisect.bisect_right(starts, lo) - 1
                last = bisect.bisect_right(starts, hi) - 1
                bits = bitsets[first]
                for more in bitsets[first + 1 : last + 1]:
                    bits &= more
                return bits
        return 0


class _Postings:
    """Inverted index of label views: (key, value) → identities, key → identities, as bitsets."""

    def __init__(self, views: Sequence[Mapping[str, str] | None]) -> None:
        self.kv: dict[tuple[str, str], int] = {}
        self.key: dict[str, int] = {}
        for i, view in enumerate(views):
            if view is None:
                continue
            bit = 1 << i
            for k, v in view.items():
                self.kv[(k, v)] = self.kv.get((k, v), 0) | bit
                self.key[k] = self.key.get(k, 0) | bit

    def select(self, selector: LabelSelector, universe: int) -> int:
        if selector.impossible:
            return 0
        bits = universe
        for r in selector.requirements:
            if r.operator in ("In", "NotIn"):
                hit = 0
                for v in r.values:
                    hit |= self.kv.get((r.key, v), 0)
                bits &= hit if r.operator == "In" else universe & ~hit
            elif r.operator == "Exists":
                bits &= self.key.get(r.key, 0)
            else:
                bits &= universe & ~self.key.get(r.key, 0)
            if not bits:
                break
        return bits


class ClassMatrix:
    def __init__(self, engine: PolicyEngine, pods: Sequence[PodEndpoint]) -> None:
        self.engine = engine
        project = engine.identities.project
        index: dict[Endpoint, int] = {}
        self.identities: list[PodEndpoint] = []
        self.pod_identity: list[int] = []
        for pod in pods:
            ident = project(pod)
            assert isinstance(ident, PodEndpoint)
            i = index.get(ident)
            if i is None:
                i = index[ident] = len(self.identities)
                self.identities.append(ident)
            self.pod_identity.append(i)
        counts = Counter(self.pod_identity)
        self.weights = [counts[i] for i in range(len(self.identities))]
        n = len(self.identities)
        self.all = (1 << n) - 1
        self.host = sum(1 << i for i, e in enumerate(self.identities) if e.host_network)
        self.pods_bits = self.all & ~self.host
        views = engine.views
        self._by_ns: dict[str, int] = {}
        for i, e in enumerate(self.identities):
            self._by_ns[e.namespace] = self._by_ns.get(e.namespace, 0) | (1 << i)
        self._ns_view = {e.namespace: views.k8s_namespace(e) for e in self.identities}
        self._k8s = _Postings([None if e.host_network else views.k8s(e) for e in self.identities])
        self._cilium = (
            _Postings([None if e.host_network else views.cilium(e, None) for e in self.identities])
            if engine.settings.cni == "cilium"
            else None
        )
        self._peer_bits: dict[Peer, int] = {}
        # (id(rule), direction, host-network hits, named ports) → (the rule, kept so its id
        # stays its own, and its hits)
        self._hits: dict[tuple[object, ...], tuple[Rule, list[tuple[ConnSet, int]]]] = {}
        self._rows: dict[tuple[object, ...], Row] = {}
        self.row_of: dict[Direction, list[Row]] = {d: [self._row(i, d) for i in range(n)] for d in Direction}

    # -- peers --------------------------------------------------------------------------------

    def peer_bits(self, peer: Peer) -> int:
        """Non-host-network identities the peer matches (independent of the subject for pods)."""
        found = self._peer_bits.get(peer)
        if found is None:
            found = self._peer_bits[peer] = self._compute_peer_bits(peer)
        return found

    def _compute_peer_bits(self, peer: Peer) -> int:
        universe = self.pods_bits
        if isinstance(peer, AnyPeer):
            return universe
        if isinstance(peer, K8sPodPeer):
            selector = peer.namespace_selector
            if selector is None:
                ns_bits = self._by_ns.get(peer.namespace or "", 0)
            else:  # namespaces hold disjoint identities: their sum is their union
                ns_bits = sum(self._by_ns[ns] for ns, view in self._ns_view.items() if selector.matches(view))
            return self._k8s.select(peer.pod_selector, universe & ns_bits) if ns_bits else 0
        if isinstance(peer, CiliumEndpointPeer) and self._cilium is not None:
            return self._cilium.select(peer.selector, universe)
        if isinstance(peer, CiliumEntityPeer):
            return universe if peer.entities & {"all", "cluster"} else 0
        if isinstance(peer, NodePeer):
            return 0
        bits = 0  # CIDR and Calico peers: match each identity (their number is kept small by identity.py)
        views = self.engine.views
        for i, e in enumerate(self.identities):
            if not e.host_network and peer.matches(e, views, e):
                bits |= 1 << i
        return bits

    def _rule_hits(self, rule: Rule, subject: PodEndpoint, direction: Direction) -> list[tuple[ConnSet, int]]:
        """(connections, peer identities) pairs the rule covers for this subject."""
        views = self.engine.views
        if rule.local is not None and not rule.local.matches(subject, views, subject):
            return []
        host_hits = 0
        for i in _bit_indexes(self.host):
            if rule.peer_matches(self.identities[i], views, subject):
                host_hits |= 1 << i
        # Past the subject's own-side criteria, the hits depend on the subject only through the
        # host-network peers it sees and, for ingress, its named ports: rules shared by many
        # situations (a namespace's policies) are worked out once per such variant.
        by_subject = direction is Direction.INGRESS and (rule.ports.named or rule.ports.exclude_named)
        key = (id(rule), direction, host_hits, subject.named_ports if by_subject else ())
        found = self._hits.get(key)
        if found is None:
            found = self._hits[key] = (rule, self._compute_rule_hits(rule, subject, direction, host_hits))
        return found[1]

    def _compute_rule_hits(
        self, rule: Rule, subject: PodEndpoint, direction: Direction, host_hits: int
    ) -> list[tuple[ConnSet, int]]:
        peers = host_hits
        for p in rule.peers:
            peers |= self.peer_bits(p)
        if not peers:
            return []
        if direction is Direction.INGRESS or not (rule.ports.named or rule.ports.exclude_named):
            # Named ports resolve on the destination: the subject itself for ingress; without
            # named ports the result does not depend on the destination at all.
            conns = rule.ports.resolve(subject)
            return [(conns, peers)] if conns else []
        # Egress with named ports: they resolve on each destination; group peers by resolution.
        groups: dict[ConnSet, int] = {}
        for i in _bit_indexes(peers):
            conns = rule.ports.resolve(self.identities[i])
            if conns:
                groups[conns] = groups.get(conns, 0) | (1 << i)
        return list(groups.items())

    # -- rows ---------------------------------------------------------------------------------

    def _row(self, i: int, direction: Direction) -> Row:
        subject = self.identities[i]
        engine = self.engine
        if subject.host_network or (
            engine.settings.cni == "cilium" and engine.settings.cilium.enforcement_mode == "never"
        ):
            return self._rows.setdefault(("open",), Row(tuple((p, (1,), (self.all,)) for p in PROTOCOLS)))
        # engine.applicable for every tier, in one pass over the policies selecting the subject
        # (an identity: no name, so selecting() is what applicable() reads).
        by_tier: dict[str, list[CompiledPolicy]] = {}
        for p in engine.selecting(subject):
            if p.direction(direction).applies:
                by_tier.setdefault(p.tier, []).append(p)
        tiers = [(t, tuple(by_tier.get(t.name, ()))) for t in engine.tiers]
        locals_ = tuple(
            r.local.matches(subject, engine.views, subject)
            for _, ps in tiers
            for p in ps
            for r in p.direction(direction).rules
            if r.local is not None
        )
        key = (
            direction,
            tuple(tuple(id(p) for p in ps) for _, ps in tiers),
            subject.named_ports if direction is Direction.INGRESS else (),
            locals_,
            subject.node if engine.identities.reads_node else None,
        )
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = self._compute_row(subject, direction, tiers)
        return row

    def _compute_row(
        self,
        subject: PodEndpoint,
        direction: Direction,
        tiers: list[tuple[TierDef, tuple[CompiledPolicy, ...]]],
    ) -> Row:
        compiled: list[_CompiledTier] = []
        starts: dict[str, set[int]] = {p: {1} for p in PROTOCOLS}
        for tier, policies in tiers:
            rules: list[tuple[Action, list[tuple[ConnSet, int]]]] = []
            for policy in policies:
                for rule in policy.direction(direction).rules:
                    hits = self._rule_hits(rule, subject, direction)
                    rules.append((rule.action, hits))
                    for conns, _ in hits:
                        for proto, ports in conns.by_protocol:
                            # Where the hit changes: each interval's first port and the port after it.
                            changes = (b for lo, hi in ports.intervals for b in (lo, hi + 1))
                            starts[proto].update(b for b in changes if b <= MAX_PORT)
            isolating = any(p.direction(direction).isolates for p in policies)
            compiled.append((tier, bool(policies), isolating, rules))
        pieces = []
        for proto in PROTOCOLS:
            ordered = sorted(starts[proto])
            pieces.append((proto, tuple(ordered), self._pieces(compiled, proto, ordered)))
        return Row(tuple(pieces))

    def _pieces(self, compiled: list[_CompiledTier], protocol: str, starts: list[int]) -> tuple[int, ...]:
        """Allowed peer identities on each piece of one protocol (the pieces begin at `starts`,
        where no rule in play changes inside a piece): the engine's tier walk, on bitsets, for
        every piece side by side."""
        n = len(starts)
        pending = [self.all] * n
        allowed = [0] * n
        for tier, applies, isolating, rules in compiled:
            always = tier.always_isolate
            if not any(pending):
                break
            if not applies and not always:
                continue
            if tier.mode == UNION:
                deny = _piece_bits(_of_action(rules, Action.DENY), protocol, starts)
                allow = _piece_bits(_of_action(rules, Action.ALLOW), protocol, starts)
                closes = isolating or always
                for k in range(n):
                    left = pending[k]
                    denied = deny[k] & left
                    let = allow[k] & left & ~denied
                    allowed[k] |= let
                    pending[k] = 0 if closes else left & ~denied & ~let
            else:
                ordered = [(a, _piece_bits(hits, protocol, starts)) for a, hits in rules]
                closes = tier.end_action == "deny" and isolating
                for k in range(n):
                    remaining, passed = pending[k], 0
                    for action, bits in ordered:
                        h = bits[k] & remaining
                        if not h:
                            continue
                        if action is Action.ALLOW:
                            allowed[k] |= h
                        elif action is Action.PASS:
                            passed |= h
                        remaining &= ~h
                    pending[k] = passed if closes else passed | remaining
        return tuple(a | p for a, p in zip(allowed, pending, strict=True))

    # -- queries ------------------------------------------------------------------------------

    def allowed(self, src: int, dst: int, protocol: str, port: int) -> bool:
        """Whether pod index `src` may reach pod index `dst` (indexes into the `pods` given)."""
        s, d = self.pod_identity[src], self.pod_identity[dst]
        return bool(self.row_of[Direction.EGRESS][s].bits(protocol, port) >> d & 1) and bool(
            self.row_of[Direction.INGRESS][d].bits(protocol, port) >> s & 1
        )

    def allowed_pod_pairs(self, protocol: str, port: int, block: int = 4096) -> int:
        """Ordered pod pairs (self-pairs included) allowed on this probe."""
        nd = _numpy()
        n = len(self.identities)
        weights = nd.array(self.weights, dtype=nd.float64)
        egress_rows, ingress_rows = self.row_of[Direction.EGRESS], self.row_of[Direction.INGRESS]
        total = 0.0
        for lo in range(0, n, block):
            dsts = slice(lo, min(n, lo + block))
            ingress = _bits_matrix(ingress_rows[dsts], protocol, port, n)  # [dst, src]
            for slo in range(0, n, block):
                srcs = slice(slo, min(n, slo + block))
                egress = _bits_matrix(egress_rows[srcs], protocol, port, n)[:, dsts]  # [src, dst]
                both = egress & ingress[:, srcs].T
                total += float(weights[srcs] @ both @ weights[dsts])
        return round(total)


@dataclass(frozen=True, slots=True)
class Block:
    """Every ordered pair of identities in `sources` × `destinations` is allowed exactly `conns`."""

    sources: int  # identities, as a bitset
    destinations: int
    conns: ConnSet


class ConnectivityMap:
    """Allowed connections for every ordered pair of identities, as disjoint blocks of pairs with
    the same non-empty connection set (pairs in no block are allowed nothing); pod-pair counts per
    connection set.

    Never visits identity pairs one by one. A row (one direction of one subject situation) splits
    its peers into *parts*, the peers it allows the same connections; identities sharing an egress
    row form a source group, those sharing an ingress row a destination group. For a source group
    S with egress row e and a part (c, D) of e, only the destination groups that meet D matter
    (found through D's members), and within such a group i only the parts (c', S') of i that meet
    S: the block (S ∩ S') × (D ∩ Di) is allowed c ∩ c'. The work grows with the blocks produced
    (groups × parts met), so with sparse policies (default deny, namespace-local allows) it is near
    linear in identities, and an allow-all cluster is one block.
    """

    def __init__(self, matrix: ClassMatrix) -> None:
        universe = matrix.all
        self._egress = _groups(matrix.row_of[Direction.EGRESS])
        self._ingress = _groups(matrix.row_of[Direction.INGRESS])
        parts: dict[int, tuple[tuple[ConnSet, int], ...]] = {}  # id(row) → its parts
        for row, _ in (*self._egress, *self._ingress):
            if id(row) not in parts:
                parts[id(row)] = _row_parts(row, universe)
        self._parts = parts
        n = len(matrix.identities)
        self._egress_group_of = _group_index(self._egress, n)
        self._ingress_group_of = _group_index(self._ingress, n)
        ingress, ingress_group_of = self._ingress, self._ingress_group_of
        both: dict[tuple[ConnSet, ConnSet], ConnSet] = {}
        blocks: list[Block] = []
        for e_row, sources in self._egress:
            for conns, dst_bits in parts[id(e_row)]:
                # The destination groups that meet the part, each found once through its lowest
                # member left in the part.
                rest = dst_bits
                while rest:
                    i_row, dst_group = ingress[ingress_group_of[(rest & -rest).bit_length() - 1]]
                    rest &= ~dst_group
                    dsts = dst_bits & dst_group
                    for conns_in, src_bits in parts[id(i_row)]:
                        srcs = src_bits & sources
                        if not srcs:
                            continue
                        key = (conns, conns_in)
                        allowed = both.get(key)
                        if allowed is None:
                            allowed = both[key] = conns & conns_in
                        if allowed:
                            blocks.append(Block(srcs, dsts, allowed))
        self.blocks: tuple[Block, ...] = tuple(blocks)
        weigh = _Weigher(matrix.weights)
        pods = sum(matrix.weights)
        counts: dict[ConnSet, int] = {}
        for b in blocks:
            pairs = weigh(b.sources) * weigh(b.destinations) - weigh(b.sources & b.destinations)
            counts[b.conns] = counts.get(b.conns, 0) + pairs  # minus each pod with itself
        empty = pods * (pods - 1) - sum(counts.values())
        if empty:
            counts[ConnSet.none()] = empty
        self.pod_pairs: dict[ConnSet, int] = {c: v for c, v in counts.items() if v}

    def between(self, src_identity: int, dst_identity: int) -> ConnSet:
        e_row = self._egress[self._egress_group_of[src_identity]][0]
        i_row = self._ingress[self._ingress_group_of[dst_identity]][0]
        out = _part_of(self._parts[id(e_row)], dst_identity)
        return out & _part_of(self._parts[id(i_row)], src_identity) if out else out


class _Weigher:
    """Pods in a set of identities: identities grouped by their pod count, so a set weighs one bit
    count per distinct count (replica numbers are few), cached per set."""

    def __init__(self, weights: Sequence[int]) -> None:
        by_weight: dict[int, int] = {}
        for i, w in enumerate(weights):
            by_weight[w] = by_weight.get(w, 0) | (1 << i)
        self._by_weight = tuple(by_weight.items())
        self._cache: dict[int, int] = {}

    def __call__(self, bits: int) -> int:
        found = self._cache.get(bits)
        if found is None:
            found = self._cache[bits] = sum(w * (bits & m).bit_count() for w, m in self._by_weight)
        return found


def _groups(rows: Sequence[Row]) -> list[tuple[Row, int]]:
    """Distinct rows with the identities that have each, as a bitset. Rows are shared objects
    (ClassMatrix computes one per situation), so identity groups them without hashing big ints."""
    members: dict[int, tuple[Row, int]] = {}
    for i, row in enumerate(rows):
        found = members.get(id(row))
        members[id(row)] = (row, (found[1] if found else 0) | (1 << i))
    return list(members.values())


def _group_index(groups: list[tuple[Row, int]], n: int) -> list[int]:
    out = [0] * n
    for g, (_, bits) in enumerate(groups):
        for i in _bit_indexes(bits):
            out[i] = g
    return out


def _row_parts(row: Row, universe: int) -> tuple[tuple[ConnSet, int], ...]:
    """The row's peers grouped by the connections it allows them (non-empty ones only): each
    piece of the row splits every part into the peers it allows and the others."""
    segments: list[tuple[str, int, int]] = []
    parts: dict[tuple[int, ...], int] = {(): universe}
    for proto, starts, bitsets in row.pieces:
        ends = [*starts[1:], MAX_PORT + 1]
        for start, end, allowed in zip(starts, ends, bitsets, strict=True):
            segment = len(segments)
            segments.append((proto, start, end - 1))
            if not allowed:
                continue
            split: dict[tuple[int, ...], int] = {}
            for signature, bits in parts.items():
                inside, outside = bits & allowed, bits & ~allowed
                if inside:
                    split[(*signature, segment)] = inside
                if outside:
                    split[signature] = outside
            parts = split
    out = []
    for signature, bits in parts.items():
        if signature:
            by_proto: dict[str, list[tuple[int, int]]] = {}
            for s in signature:
                proto, lo, hi = segments[s]
                by_proto.setdefault(proto, []).append((lo, hi))
            out.append((ConnSet.from_mapping({p: PortSet.of(*iv) for p, iv in by_proto.items()}), bits))
    return tuple(out)


def _part_of(parts: tuple[tuple[ConnSet, int], ...], peer: int) -> ConnSet:
    for conns, bits in parts:
        if bits >> peer & 1:
            return conns
    return ConnSet.none()


def _bits_matrix(rows: Sequence[Row], protocol: str, port: int, n: int) -> np.ndarray:
    nd = _numpy()
    nbytes = (n + 7) // 8
    buf = b"".join(r.bits(protocol, port).to_bytes(nbytes, "little") for r in rows)
    packed = nd.frombuffer(buf, dtype=nd.uint8).reshape(len(rows), nbytes)
    unpacked: np.ndarray = nd.unpackbits(packed, axis=1, bitorder="little")[:, :n].astype(bool)
    return unpacked


def _of_action(
    rules: list[tuple[Action, list[tuple[ConnSet, int]]]], action: Action
) -> list[tuple[ConnSet, int]]:
    return [h for a, hits in rules if a is action for h in hits]


def _piece_bits(hits: list[tuple[ConnSet, int]], protocol: str, starts: list[int]) -> list[int]:
    """The peers the hits cover on each piece of `protocol` (pieces begin at `starts`; every
    interval of the hits begins a piece and the port after it begins the next one)."""
    out = [0] * len(starts)
    for conns, peers in hits:
        ports = conns.ports(protocol)
        for lo, hi in ports.intervals:
            for k in range(bisect.bisect_right(starts, lo) - 1, bisect.bisect_right(starts, hi)):
                out[k] |= peers
    return out


def _bit_indexes(bits: int) -> list[int]:
    out: list[int] = []
    while bits:
        low = bits & -bits
        out.append(low.bit_length() - 1)
        bits ^= low
    return out
