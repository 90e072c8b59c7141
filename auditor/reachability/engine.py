"""Evaluate flows against compiled policies, tier by tier, with caching per class of endpoints.

Tiers run in order; each decides part of the connection set and passes the rest on:

* `first-match` tiers (AdminNetworkPolicy/ClusterNetworkPolicy Admin and Baseline, Calico tiers):
  policies in order, rules in order, the first rule whose peer and ports match decides Allow, Deny
  or Pass (skip the rest of the tier). Connections no rule matched are denied when a policy of the
  tier that applies to the pod isolates it (Calico's end-of-tier deny), else passed on.
* `union` tiers (NetworkPolicy; Cilium, where NetworkPolicy and Cilium policies combine): deny rules
  win, then any allow rule allows, and the rest is denied if any selecting policy isolates the pod.

After the last tier everything left is allowed (Kubernetes' default, Calico's profile).
Traffic flows only if the source's egress and the destination's ingress both allow it.

Verdicts are cached by endpoint *identity* (everything but the pod name), so the replicas of a
role, and all pods no selector can tell apart, cost one evaluation.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from auditor.model.labels import LabelSelector
from auditor.model.values import value
from auditor.reachability import cni
from auditor.reachability.endpoints import (
    Endpoint,
    EntityEndpoint,
    ExternalEndpoint,
    NodeEndpoint,
    PodEndpoint,
)
from auditor.reachability.identity import IdentityProjection
from auditor.reachability.policy import (
    Action,
    CiliumSubject,
    CompiledPolicy,
    Decider,
    Direction,
    DirectionalVerdict,
    K8sSubject,
    Rule,
    Segment,
)
from auditor.reachability.ports import ConnSet

FIRST_MATCH = "first-match"
UNION = "union"
# Connections a tier passes on, with the deciders that passed them.
_Pending = list[tuple[ConnSet, tuple[Decider, ...]]]


@dataclass(frozen=True, slots=True)
class TierDef:
    name: str
    order: float
    mode: str
    # What happens to connections no rule matched when a policy of the tier applies to the pod:
    # "deny" (only if that policy isolates the pod in this direction) or "pass" to the next tier.
    end_action: str = "deny"
    # Cilium policy-enforcement=always: every pod is isolated even if no policy selects it.
    always_isolate: bool = False


ADMIN_TIER = "admin"
NAMESPACE_TIER = "namespace"
BASELINE_TIER = "baseline"


def standard_tiers(
    settings: cni.NetworkSettings, calico_tiers: Mapping[str, tuple[float, str]]
) -> list[TierDef]:
    """The tiers in force for a CNI. `calico_tiers` maps Calico tier names to (order, defaultAction)."""
    tiers = [TierDef(ADMIN_TIER, 1000.0, FIRST_MATCH, "pass")]
    if settings.cni == "calico":
        for name, (order, default_action) in {"default": (1_000_000.0, "Deny"), **calico_tiers}.items():
            end = "pass" if default_action.lower() == "pass" else "deny"
            tiers.append(TierDef(f"calico:{name}", order, FIRST_MATCH, end))
    else:
        always = settings.cni == "cilium" and settings.cilium.enforcement_mode == "always"
        tiers.append(TierDef(NAMESPACE_TIER, 1_000_000.0, UNION, "deny", always))
    tiers.append(TierDef(BASELINE_TIER, 10_000_000.0, FIRST_MATCH, "pass"))
    return sorted(tiers, key=lambda t: t.order)


@value(frozen=True)
class FlowVerdict:
    """Source egress and destination ingress for one (source, destination) pair."""

    source: str
    destination: str
    egress: DirectionalVerdict
    ingress: DirectionalVerdict

    def allowed_conns(self) -> ConnSet:
        return self.egress.allowed_conns() & self.ingress.allowed_conns()

    def allows(self, protocol: str, port: int) -> bool:
        return self.allowed_conns().contains(protocol, port)


class _ViewCache:
    """Label views per endpoint identity for each dialect (implements policy.Views)."""

    def __init__(self, settings: cni.NetworkSettings) -> None:
        self.settings = settings
        self._k8s: dict[PodEndpoint, dict[str, str]] = {}
        self._k8s_ns: dict[tuple[str, tuple[tuple[str, str], ...]], dict[str, str]] = {}
        self._cilium: dict[tuple[Endpoint, str | None], dict[str, str]] = {}
        self._calico: dict[PodEndpoint, dict[str, str]] = {}

    def k8s(self, pod: PodEndpoint) -> Mapping[str, str]:
        view = self._k8s.get(pod)
        if view is None:
            view = self._k8s[pod] = cni.k8s_view(pod, self.settings)
        return view

    def k8s_namespace(self, pod: PodEndpoint) -> Mapping[str, str]:
        key = (pod.namespace, pod.namespace_labels)
        view = self._k8s_ns.get(key)
        if view is None:
            view = dict(pod.namespace_labels)
            # The API server sets this label on every namespace (Kubernetes 1.21+).
            view.setdefault("kubernetes.io/metadata.name", pod.namespace)
            self._k8s_ns[key] = view
        return view

    def cilium(self, endpoint: Endpoint, subject: PodEndpoint | None) -> Mapping[str, str]:
        node = subject.node if (subject is not None and isinstance(endpoint, NodeEndpoint)) else None
        key = (endpoint, node)
        view = self._cilium.get(key)
        if view is None:
            view = self._cilium[key] = self._cilium_view(endpoint, subject)
        return view

    def _cilium_view(self, endpoint: Endpoint, subject: PodEndpoint | None) -> dict[str, str]:
        if isinstance(endpoint, PodEndpoint):
            return cni.cilium_view(endpoint, self.settings)
        if isinstance(endpoint, ExternalEndpoint):
            return {"reserved:world": "", f"reserved:world-ipv{endpoint.ip.version}": ""}
        if isinstance(endpoint, EntityEndpoint):
            return {f"reserved:{endpoint.entity}": ""}
        local = subject is not None and subject.node == endpoint.name
        view = {"reserved:host" if local else "reserved:remote-node": ""}
        if self.settings.cilium.node_selector_labels:
            for k, v in endpoint.labels:
                view["node:" + k] = v
                view[k] = v
        return view

    def calico(self, pod: PodEndpoint) -> Mapping[str, str]:
        view = self._calico.get(pod)
        if view is None:
            view = self._calico[pod] = cni.calico_view(pod)
        return view


def _anchor(selector: LabelSelector) -> tuple[str, tuple[str, ...]] | None:
    """A requirement every matching label set meets with one of a few exact values: the `In`
    requirement with the fewest values (None when the selector has none)."""
    anchors = [r for r in selector.requirements if r.operator == "In" and r.values]
    if selector.impossible or not anchors:
        return None
    best = min(anchors, key=lambda r: len(r.values))
    return best.key, best.values


class _SubjectIndex:
    """The policies of one namespace (or the cluster-wide ones), indexed by one label their subject
    selector requires.

    A policy whose pod selector requires `app In (a, b)` can only select pods labelled app=a or
    app=b (in the label view of its dialect), so a pod is checked only against the policies its own
    labels can satisfy plus those with no such requirement. Candidates still go through the full
    `matches`; the index only skips policies that cannot select the pod.
    """

    __slots__ = ("cilium", "k8s", "unindexed")

    def __init__(self) -> None:
        self.unindexed: list[CompiledPolicy] = []
        self.k8s: dict[str, dict[str, list[CompiledPolicy]]] = {}
        self.cilium: dict[str, dict[str, list[CompiledPolicy]]] = {}

    def add(self, policy: CompiledPolicy) -> None:
        subject = policy.subject
        if isinstance(subject, K8sSubject):
            anchor, into = _anchor(subject.pod_selector), self.k8s
        elif isinstance(subject, CiliumSubject):
            anchor, into = _anchor(subject.selector), self.cilium
        else:
            anchor, into = None, self.k8s
        if anchor is None:
            self.unindexed.append(policy)
            return
        key, values = anchor
        by_value = into.setdefault(key, {})
        for label_value in values:
            by_value.setdefault(label_value, []).append(policy)

    def candidates(self, subject: PodEndpoint, views: _ViewCache) -> Iterator[CompiledPolicy]:
        yield from self.unindexed
        for index, view in ((self.k8s, views.k8s), (self.cilium, lambda pod: views.cilium(pod, None))):
            if not index:
                continue
            labels = view(subject)
            for key, by_value in index.items():
                value = labels.get(key)
                if value is not None:
                    yield from by_value.get(value, ())


class _PodKey(NamedTuple):
    endpoint: PodEndpoint  # held: the cache is keyed by its id
    projected: PodEndpoint  # its identity (IdentityProjection)
    nodeless: PodEndpoint  # that identity without its node: all a pod-network peer shows
    shapes: tuple[int | None, int | None]  # as a subject: egress, ingress (see _shape)


class PolicyEngine:
    """Answers "may this endpoint reach that one, on which connections, and why?"."""

    def __init__(
        self, policies: Iterable[CompiledPolicy], settings: cni.NetworkSettings, tiers: Sequence[TierDef]
    ) -> None:
        self.settings = settings
        self.tiers = list(tiers)
        self.views = _ViewCache(settings)
        known = {t.name for t in self.tiers}
        self.policies = [p for p in policies if p.tier in known]
        # Index: namespace (None for cluster-wide) → candidate policies by subject label.
        self._index: dict[str | None, _SubjectIndex] = defaultdict(_SubjectIndex)
        for p in self.policies:
            self._index[p.subject.namespace].add(p)
        rank = {t.name: i for i, t in enumerate(self.tiers)}
        self._rank = {id(p): (rank[p.tier], p.order) for p in self.policies}
        self._selecting: dict[PodEndpoint, tuple[CompiledPolicy, ...]] = {}
        self.identities = IdentityProjection(self.policies, settings)
        self._applicable: dict[tuple[PodEndpoint, Direction, str], tuple[CompiledPolicy, ...]] = {}
        self._verdicts: dict[tuple[Endpoint, Direction, Endpoint], DirectionalVerdict] = {}
        # Subjects that evaluate alike (see _shape) share verdicts per peer.
        self._shapes: dict[tuple[PodEndpoint, Direction], int] = {}
        self._shape_ids: dict[tuple[object, ...], int] = {}
        self._by_shape: dict[tuple[int, Endpoint, str | None], DirectionalVerdict] = {}
        self._nodeless: dict[PodEndpoint, PodEndpoint] = {}
        # Per pod endpoint object (by id, holding it so the id is not reused while cached): what
        # a verdict about it or against it reads (see _pod_key).
        self._pod_keys: dict[int, _PodKey] = {}

    # -- public API ---------------------------------------------------------------------------

    def flow(self, source: Endpoint, destination: Endpoint) -> FlowVerdict:
        return FlowVerdict(
            str(source),
            str(destination),
            self.directional(source, Direction.EGRESS, destination),
            self.directional(destination, Direction.INGRESS, source),
        )

    def directional(self, subject: Endpoint, direction: Direction, peer: Endpoint) -> DirectionalVerdict:
        # Pod to pod, the audit's tens of thousands of (role, zone) pairs: straight to the verdict
        # shared by subjects of one shape (the same object the general path below returns).
        if subject.__class__ is PodEndpoint and peer.__class__ is PodEndpoint:
            keys = self._pod_keys
            mk = keys.get(id(subject))
            if mk is None or mk.endpoint is not subject:
                mk = self._pod_key(subject)
            shape = mk.shapes[direction is Direction.INGRESS]
            if shape is not None:
                other = keys.get(id(peer))
                if other is None or other.endpoint is not peer:
                    other = self._pod_key(peer)
                mine, theirs = mk.projected, other.projected
                alike = (shape, other.nodeless, mine.node if theirs.host_network else None)
                found = self._by_shape.get(alike)
                if found is None:
                    found = self._by_shape[alike] = self._evaluate(mine, direction, theirs)
                return found
        project = self.identities.project
        key = (project(subject), direction, project(peer))
        cached = self._verdicts.get(key)
        if cached is None:
            me, peer = key[0], key[2]
            if not isinstance(me, PodEndpoint) or (shape := self._shape(me, direction)) is None:
                cached = self._evaluate(me, direction, peer)
            else:
                # The subject's node matters only against node identities (host / remote-node);
                # a pod peer's node never matters (no peer kind reads it for a pod on the pod
                # network: only host-network pods speak as their node).
                host_peer = isinstance(peer, NodeEndpoint) or (
                    isinstance(peer, PodEndpoint) and peer.host_network
                )
                nodeless = self._nodeless_pod(peer) if isinstance(peer, PodEndpoint) else peer
                by_shape = (shape, nodeless, me.node if host_peer else None)
                cached = self._by_shape.get(by_shape)
                if cached is None:
                    cached = self._by_shape[by_shape] = self._evaluate(me, direction, peer)
            self._verdicts[key] = cached
        return cached

    def verdict_class(
        self, endpoint: PodEndpoint
    ) -> tuple[tuple[int | None, int | None], PodEndpoint] | None:
        """What `directional` reads of a pod-network pod, as a subject (its shape in each
        direction) and as a pod peer (its identity without its node): two endpoints of one class
        get the very same verdicts, against any pod of the pod network and from it. None for a
        host-network pod, whose node can matter."""
        mk = self._pod_keys.get(id(endpoint))
        if mk is None or mk.endpoint is not endpoint:
            mk = self._pod_key(endpoint)
        if mk.projected.host_network or None in mk.shapes:
            return None
        return mk.shapes, mk.nodeless

    def _pod_key(self, endpoint: PodEndpoint) -> _PodKey:
        """What directional reads of a pod endpoint, worked out once per endpoint object: its
        identity, that identity without its node (as a peer), its shape in each direction (as
        a subject; None for a host-network pod, evaluated directly)."""
        projected = self.identities.project(endpoint)
        assert isinstance(projected, PodEndpoint)
        key = _PodKey(
            endpoint,
            projected,
            self._nodeless_pod(projected),
            (self._shape(projected, Direction.EGRESS), self._shape(projected, Direction.INGRESS)),
        )
        self._pod_keys[id(endpoint)] = key
        return key

    def _nodeless_pod(self, pod: PodEndpoint) -> PodEndpoint:
        """A pod-network pod without its node: all that selectors and peer rules see of it (only
        host-network pods speak as their node; only a subject's node is compared, with node peers)."""
        if pod.host_network or pod.node is None:
            return pod
        found = self._nodeless.get(pod)
        if found is None:
            # The constructor, not dataclasses.replace: one per role and zone, replace is 3x slower.
            found = self._nodeless[pod] = PodEndpoint(
                namespace=pod.namespace,
                name=pod.name,
                labels=pod.labels,
                namespace_labels=pod.namespace_labels,
                service_account=pod.service_account,
                named_ports=pod.named_ports,
                ips=pod.ips,
                zone=pod.zone,
                host_network=pod.host_network,
            )
        return found

    def _shape(self, subject: PodEndpoint, direction: Direction) -> int | None:
        """What a verdict about `subject` in `direction` depends on, besides the peer, as a number.

        Evaluation reads the subject only through the policies that apply to it (per tier), the
        named ports it exposes (ingress rules resolve them on the subject), its node (Cilium's
        host/remote-node: the caller adds it, for node peers only) and, for Calico rules with
        criteria on the policy's own side, the subject itself. Zone-labelled replicas of a role are
        usually alike in all of these, so their verdicts are computed once. None for host-network
        subjects (no pod policy applies to them: evaluated directly, that is cheap).
        """
        if subject.host_network:
            return None
        subject = self._nodeless_pod(subject)
        key = (subject, direction)
        found = self._shapes.get(key)
        if found is None:
            # `selecting` is in tier order: these are the per-tier applicable policies, concatenated.
            policies = tuple(p for p in self.selecting(subject) if p.direction(direction).applies)
            local = any(r.local is not None for p in policies for r in p.direction(direction).rules)
            shape = (
                direction,
                tuple(map(id, policies)),
                subject.named_ports if direction is Direction.INGRESS else (),
                subject if local else None,
            )
            found = self._shapes[key] = self._shape_ids.setdefault(shape, len(self._shape_ids))
        return found

    def applicable(self, subject: PodEndpoint, direction: Direction, tier: str) -> tuple[CompiledPolicy, ...]:
        """The policies of `tier` that apply to `subject` (an identity) in `direction`."""
        key = (subject, direction, tier)
        found = self._applicable.get(key)
        if found is None:
            found = self._applicable[key] = tuple(
                p for p in self.selecting(subject) if p.tier == tier and p.direction(direction).applies
            )
        return found

    def selecting(self, subject: PodEndpoint) -> tuple[CompiledPolicy, ...]:
        """Every policy whose subject selects the pod, in evaluation order (tier, then policy order).
        Selection does not depend on the direction, the tier or the node, so it is worked out once
        per identity without its node."""
        subject = self._nodeless_pod(subject)
        found = self._selecting.get(subject)
        if found is None:
            by_ns = self._index
            matching = [
                p
                for index in (by_ns.get(subject.namespace), by_ns.get(None))
                if index is not None
                for p in index.candidates(subject, self.views)
                if p.subject.matches(subject, self.views)
            ]
            rank = self._rank
            matching.sort(key=lambda p: rank[id(p)])
            found = self._selecting[subject] = tuple(matching)
        return found

    # -- evaluation ---------------------------------------------------------------------------

    def _evaluate(self, subject: Endpoint, direction: Direction, peer: Endpoint) -> DirectionalVerdict:
        if not isinstance(subject, PodEndpoint):
            what = "an address outside the cluster" if isinstance(subject, ExternalEndpoint) else "not a pod"
            return _open(direction, f"the endpoint is {what}; no pod policy applies")
        if subject.host_network:
            return _open(direction, "the pod uses the host network; pod policies do not apply")
        if self.settings.cni == "cilium" and self.settings.cilium.enforcement_mode == "never":
            return _open(direction, "Cilium policy enforcement is 'never'")
        destination = peer if direction is Direction.EGRESS else subject

        def hit(rule: Rule, remaining: ConnSet) -> ConnSet:
            if not rule.peer_matches(peer, self.views, subject):
                return ConnSet.none()
            return rule.ports.resolve(destination) & remaining

        segments: list[Segment] = []
        pending: _Pending = [(ConnSet.all(), ())]
        for tier in self.tiers:
            if not pending:
                break
            applicable = self.applicable(subject, direction, tier.name)
            if not applicable and not tier.always_isolate:
                continue
            rules = [r for p in applicable for r in p.direction(direction).rules]
            isolating = [p for p in applicable if p.direction(direction).isolates]
            walk = _union_tier if tier.mode == UNION else _first_match_tier
            pending = walk(tier, rules, isolating, hit, pending, segments)
        for conns, chain in pending:
            if chain:
                reason = "passed by every tier; nothing denies it (default allow)"
            else:
                reason = "no policy selects the pod in this direction (default allow)"
            segments.append(Segment(conns, True, chain, reason))
        return DirectionalVerdict(direction, tuple(_merge(segments)))


def _first_match_tier(
    tier: TierDef,
    rules: list[Rule],
    isolating: list[CompiledPolicy],
    hit: Callable[[Rule, ConnSet], ConnSet],
    pending: _Pending,
    segments: list[Segment],
) -> _Pending:
    out: _Pending = []
    for conns, chain in pending:
        remaining = conns
        for rule in rules:
            if not remaining:
                break
            covered = hit(rule, remaining)
            if not covered:
                continue
            remaining = remaining - covered
            decider = _decider(rule)
            if rule.action is Action.ALLOW:
                segments.append(Segment(covered, True, (*chain, decider), _note((rule,))))
            elif rule.action is Action.DENY:
                segments.append(Segment(covered, False, (*chain, decider), "denied by a rule"))
            else:
                out.append((covered, (*chain, decider)))
        if remaining:
            if tier.end_action == "deny" and isolating:
                segments.append(_isolated(remaining, chain, isolating))
            else:
                out.append((remaining, chain))
    return out


def _union_tier(
    tier: TierDef,
    rules: list[Rule],
    isolating: list[CompiledPolicy],
    hit: Callable[[Rule, ConnSet], ConnSet],
    pending: _Pending,
    segments: list[Segment],
) -> _Pending:
    deny_rules = [r for r in rules if r.action is Action.DENY]
    allow_rules = [r for r in rules if r.action is Action.ALLOW]
    out: _Pending = []
    for conns, chain in pending:
        remaining = conns
        for rule in deny_rules:
            covered = hit(rule, remaining)
            if covered:
                remaining = remaining - covered
                segments.append(Segment(covered, False, (*chain, _decider(rule)), "denied by a deny rule"))
        # Partition what allow rules cover by the set of rules covering it, so an explanation
        # names every rule that allows a connection (NetworkPolicy allows are a union).
        pieces: list[tuple[ConnSet, tuple[Rule, ...]]] = []
        for rule in allow_rules:
            covered = hit(rule, remaining)
            if not covered:
                continue
            fresh = covered
            next_pieces: list[tuple[ConnSet, tuple[Rule, ...]]] = []
            for piece, by in pieces:
                both = piece & covered
                if both:
                    next_pieces.append((both, (*by, rule)))
                    rest = piece - covered
                    if rest:
                        next_pieces.append((rest, by))
                    fresh = fresh - both
                else:
                    next_pieces.append((piece, by))
            if fresh:
                next_pieces.append((fresh, (rule,)))
            pieces = next_pieces
        for piece, by in pieces:
            remaining = remaining - piece
            segments.append(Segment(piece, True, (*chain, *map(_decider, by)), _note(by)))
        if remaining:
            if isolating or tier.always_isolate:
                segments.append(_isolated(remaining, chain, isolating))
            else:
                out.append((remaining, chain))
    return out


def _isolated(conns: ConnSet, chain: tuple[Decider, ...], isolating: list[CompiledPolicy]) -> Segment:
    """What no rule allowed, denied by the policies that isolate the pod (or, with none, by Cilium's
    policy-enforcement=always)."""
    deciders = tuple(Decider(p.ref, "", p.ref.source.line, "isolate") for p in isolating)
    if isolating:
        return Segment(conns, False, (*chain, *deciders), "the pod is selected and no rule allows this")
    return Segment(conns, False, chain, "Cilium policy enforcement 'always' denies what no rule allows")


def _open(direction: Direction, reason: str) -> DirectionalVerdict:
    """Every connection allowed, for one reason."""
    return DirectionalVerdict(direction, (Segment(ConnSet.all(), True, (), reason),))


def _decider(rule: Rule) -> Decider:
    return Decider(rule.ref.policy, rule.ref.rule, rule.ref.line, rule.action.value)


def _note(rules: tuple[Rule, ...]) -> str:
    note = next((r.note for r in rules if r.note), "")
    return "allowed by a rule" + (f" ({note})" if note else "")


def _merge(segments: list[Segment]) -> list[Segment]:
    """Join segments with the same outcome and deciders, so explanations stay short."""
    merged: dict[tuple[bool, tuple[Decider, ...], str], ConnSet] = {}
    for s in segments:
        key = (s.allowed, s.deciders, s.reason)
        merged[key] = merged.get(key, ConnSet.none()) | s.conns
    return [
        Segment(conns, allowed, deciders, reason) for (allowed, deciders, reason), conns in merged.items()
    ]
