"""The one intermediate form every policy kind compiles into, and the verdict values.

NetworkPolicy, Cilium (clusterwide) policies, AdminNetworkPolicy/BaselineAdminNetworkPolicy,
ClusterNetworkPolicy and Calico policies differ in syntax and in how their rules combine, but each
is: a subject (which pods it applies to), per direction whether it applies and whether it makes
the pod default-deny, and ordered rules of (action, peers, ports). The engine orders them in tiers.
"""

from __future__ import annotations

import ipaddress
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import reduce
from typing import TYPE_CHECKING, Protocol

from auditor.model.labels import LabelSelector
from auditor.model.source import SourceRef
from auditor.model.values import value
from auditor.reachability import cni
from auditor.reachability.endpoints import (
    Endpoint,
    EntityEndpoint,
    ExternalEndpoint,
    IPAddress,
    NodeEndpoint,
    PodEndpoint,
)
from auditor.reachability.ports import ConnSet, PortSet

if TYPE_CHECKING:
    from auditor.reachability.calico_selector import Selector as CalicoSelector

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class Direction(StrEnum):
    INGRESS = "ingress"
    EGRESS = "egress"


class Action(StrEnum):
    ALLOW = "allow"
    DENY = "deny"
    PASS = "pass"


@value(frozen=True, order=True)
class PolicyRef:
    kind: str
    namespace: str
    name: str
    source: SourceRef

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


@value(frozen=True)
class RuleRef:
    policy: PolicyRef
    rule: str  # "ingress[0]", "egressDeny[1]", an ANP rule name, ...
    line: int


class Views(Protocol):
    """Label views of endpoints as each dialect sees them (cached by the engine)."""

    settings: cni.NetworkSettings

    def k8s(self, pod: PodEndpoint) -> Mapping[str, str]: ...

    def k8s_namespace(self, pod: PodEndpoint) -> Mapping[str, str]: ...

    def cilium(self, endpoint: Endpoint, subject: PodEndpoint | None) -> Mapping[str, str]: ...

    def calico(self, pod: PodEndpoint) -> Mapping[str, str]: ...


# ----------------------------------------------------------------------------------------------
# Peers


@dataclass(frozen=True, slots=True)
class AnyPeer:
    """Every source or destination (a NetworkPolicy rule without from/to)."""

    def matches(self, ep: Endpoint, views: Views, subject: PodEndpoint) -> bool:
        return True

    def __str__(self) -> str:
        return "any peer"


@value(frozen=True)
class K8sPodPeer:
    """Pods by namespace (fixed name or namespace selector) AND pod selector.

    Host-network pods are not pods for policy purposes (they speak as their node).
    """

    namespace: str | None
    namespace_selector: LabelSelector | None
    pod_selector: LabelSelector

    def matches(self, ep: Endpoint, views: Views, subject: PodEndpoint) -> bool:
        return isinstance(ep, PodEndpoint) and _k8s_selects(self, ep, views)

    def __str__(self) -> str:
        if self.namespace_selector is None:
            return f"pods {self.pod_selector} in namespace {self.namespace}"
        return f"pods {self.pod_selector} in namespaces {self.namespace_selector}"


def _in_cidr(ip: IPAddress, cidr: IPNetwork, excepts: tuple[IPNetwork, ...]) -> bool:
    if ip.version != cidr.version or ip not in cidr:
        return False
    return not any(ip.version == e.version and ip in e for e in excepts)


@dataclass(frozen=True, slots=True)
class CIDRPeer:
    """ipBlock / toCIDR(Set) / networks / nets. Pod and node IPs only where the CNI matches them."""

    cidr: IPNetwork
    excepts: tuple[IPNetwork, ...] = ()
    # None: the CNI decides whether CIDRs match pod IPs; True: always (ANP `networks`).
    match_pods: bool | None = None

    def matches(self, ep: Endpoint, views: Views, subject: PodEndpoint) -> bool:
        if isinstance(ep, ExternalEndpoint):
            return _in_cidr(ep.ip, self.cidr, self.excepts)
        if isinstance(ep, EntityEndpoint):
            return False
        if isinstance(ep, PodEndpoint) and not ep.host_network:
            reads = views.settings.ipblock_matches_pods() if self.match_pods is None else self.match_pods
        else:  # a node, or a host-network pod (it speaks as its node)
            reads = views.settings.ipblock_matches_nodes()
        return reads and any(_in_cidr(ip, self.cidr, self.excepts) for ip in ep.ips)

    def __str__(self) -> str:
        ex = f" except {', '.join(map(str, self.excepts))}" if self.excepts else ""
        return f"CIDR {self.cidr}{ex}"


@dataclass(frozen=True, slots=True)
class CiliumEndpointPeer:
    """fromEndpoints / toEndpoints: a selector over Cilium identity labels (namespace already folded in)."""

    selector: LabelSelector

    def matches(self, ep: Endpoint, views: Views, subject: PodEndpoint) -> bool:
        if isinstance(ep, PodEndpoint) and ep.host_network:
            ep = NodeEndpoint(ep.node or "", ep.node_labels)
        return self.selector.matches(views.cilium(ep, subject))

    def __str__(self) -> str:
        return f"endpoints {self.selector}"


CILIUM_ENTITIES = (
    "all",
    "world",
    "world-ipv4",
    "world-ipv6",
    "cluster",
    "host",
    "remote-node",
    "kube-apiserver",
    "health",
    "init",
    "ingress",
    "unmanaged",
    "none",
)


@dataclass(frozen=True, slots=True)
class CiliumEntityPeer:
    entities: frozenset[str]

    def matches(self, ep: Endpoint, views: Views, subject: PodEndpoint) -> bool:
        ents = self.entities
        if "all" in ents:
            return True
        if isinstance(ep, ExternalEndpoint):
            return "world" in ents or f"world-ipv{ep.ip.version}" in ents
        if "cluster" in ents:
            return True
        if isinstance(ep, PodEndpoint):
            if not ep.host_network:
                return False
            ep = NodeEndpoint(ep.node or "")
        if isinstance(ep, NodeEndpoint):
            local = subject.node is not None and ep.name == subject.node
            return ("host" in ents and local) or ("remote-node" in ents and not local)
        if isinstance(ep, EntityEndpoint):
            return ep.entity in ents
        return False

    def __str__(self) -> str:
        return f"entities {', '.join(sorted(self.entities))}"


@dataclass(frozen=True, slots=True)
class NodePeer:
    """Cilium fromNodes/toNodes or ANP/CNP `nodes`: host identities of the selected nodes."""

    selector: LabelSelector
    cilium: bool = False

    def matches(self, ep: Endpoint, views: Views, subject: PodEndpoint) -> bool:
        if isinstance(ep, PodEndpoint) and ep.host_network:
            ep = NodeEndpoint(ep.node or "", ep.node_labels)
        if not isinstance(ep, NodeEndpoint):
            if isinstance(ep, EntityEndpoint) and ep.entity in ("host", "remote-node"):
                return self.selector.is_everything()
            return False
        if self.cilium and not views.settings.cilium.node_selector_labels:
            # Without enable-node-selector-labels Cilium node identities carry no node labels.
            return self.selector.matches({})
        return self.selector.matches(dict(ep.labels))

    def __str__(self) -> str:
        return f"nodes {self.selector}"


@dataclass(frozen=True, slots=True)
class CalicoPeer:
    """A Calico rule's source/destination: all given criteria must hold (AND)."""

    selector: CalicoSelector | None = None
    not_selector: CalicoSelector | None = None
    namespace_selector: CalicoSelector | None = None
    # A namespaced policy's selectors stay in its namespace unless namespaceSelector is given.
    namespace: str | None = None
    nets: tuple[IPNetwork, ...] = ()
    not_nets: tuple[IPNetwork, ...] = ()
    service_account_names: frozenset[str] = frozenset()
    service_account_selector: CalicoSelector | None = None

    def _pod_criteria(self) -> bool:
        return (
            self.selector is not None
            or self.not_selector is not None
            or self.namespace_selector is not None
            or bool(self.service_account_names)
            or self.service_account_selector is not None
        )

    def matches(self, ep: Endpoint, views: Views, subject: PodEndpoint) -> bool:
        ips: tuple[IPAddress, ...] = ()
        if isinstance(ep, ExternalEndpoint):
            if self._pod_criteria():
                return False
            ips = (ep.ip,)
        elif isinstance(ep, PodEndpoint) and not ep.host_network:
            if self.namespace_selector is not None:
                if not self.namespace_selector.matches(cni.calico_namespace_view(ep)):
                    return False
            elif self.namespace is not None and self._pod_criteria() and ep.namespace != self.namespace:
                return False
            labels = views.calico(ep)
            if self.selector is not None and not self.selector.matches(labels):
                return False
            if self.not_selector is not None and self.not_selector.matches(labels):
                return False
            if self.service_account_names and ep.service_account not in self.service_account_names:
                return False
            if self.service_account_selector is not None and not self.service_account_selector.matches({}):
                return False
            ips = ep.ips
            if self.nets and not views.settings.ipblock_matches_pods():
                return False
        elif isinstance(ep, (NodeEndpoint, PodEndpoint, EntityEndpoint)):
            if self._pod_criteria():
                return False
            ips = ep.ips if isinstance(ep, NodeEndpoint) else ()
        if self.nets and not _in_any(ips, self.nets):
            return False
        return not (self.not_nets and _in_any(ips, self.not_nets))

    def __str__(self) -> str:
        parts = []
        if self.selector is not None:
            parts.append(f"selector {self.selector}")
        if self.not_selector is not None:
            parts.append(f"notSelector {self.not_selector}")
        if self.namespace_selector is not None:
            parts.append(f"namespaceSelector {self.namespace_selector}")
        elif self.namespace and self._pod_criteria():
            parts.append(f"namespace {self.namespace}")
        if self.nets:
            parts.append(f"nets {', '.join(map(str, self.nets))}")
        if self.not_nets:
            parts.append(f"notNets {', '.join(map(str, self.not_nets))}")
        return " and ".join(parts) or "any peer"


def _in_any(ips: tuple[IPAddress, ...], nets: tuple[IPNetwork, ...]) -> bool:
    return any(ip.version == n.version and ip in n for ip in ips for n in nets)


Peer = AnyPeer | K8sPodPeer | CIDRPeer | CiliumEndpointPeer | CiliumEntityPeer | NodePeer | CalicoPeer


# ----------------------------------------------------------------------------------------------
# Ports


@value(frozen=True)
class PortMatch:
    """Ports a rule covers: numbers and ranges, plus named ports resolved on the destination pod.

    `named` entries are (name, protocol or None for any protocol). `exclude_*` implement Calico's
    notPorts.
    """

    static: ConnSet = ConnSet.all()
    named: tuple[tuple[str, str | None], ...] = ()
    exclude_static: ConnSet = ConnSet.none()
    exclude_named: tuple[tuple[str, str | None], ...] = ()
    restrict: ConnSet = ConnSet.all()

    def resolve(self, destination: Endpoint) -> ConnSet:
        conns = self.static
        if self.named:
            conns = conns | _resolve_named(self.named, destination)
        conns = conns - self.exclude_static
        if self.exclude_named:
            conns = conns - _resolve_named(self.exclude_named, destination)
        return conns & self.restrict

    def names(self) -> frozenset[str]:
        return frozenset(n for n, _ in self.named + self.exclude_named)

    def __str__(self) -> str:
        parts = []
        if self.static:
            parts.append(str(self.static))
        parts.extend(f"{p + ' ' if p else ''}port '{n}'" for n, p in self.named)
        text = "; ".join(parts) or "no ports"
        if self.exclude_static or self.exclude_named:
            text += " except " + "; ".join(
                [str(self.exclude_static)] * bool(self.exclude_static)
                + [f"port '{n}'" for n, _ in self.exclude_named]
            )
        return text


def _resolve_named(named: tuple[tuple[str, str | None], ...], destination: Endpoint) -> ConnSet:
    if not isinstance(destination, PodEndpoint):
        return ConnSet.none()
    out: dict[str, PortSet] = {}
    for name, protocol in named:
        for np in destination.named_port(name, protocol):
            out[np.protocol] = out.get(np.protocol, PortSet()) | PortSet.single(np.port)
    return ConnSet.from_mapping(out)


# ----------------------------------------------------------------------------------------------
# Subjects


@dataclass(frozen=True, slots=True)
class K8sSubject:
    """NetworkPolicy (fixed namespace) or ANP/CNP subject (namespace selector) AND pod selector.

    Every subject's `namespace` is the one it is confined to (None: any), which the engine indexes.
    """

    namespace: str | None
    namespace_selector: LabelSelector | None
    pod_selector: LabelSelector

    def matches(self, pod: PodEndpoint, views: Views) -> bool:
        return _k8s_selects(self, pod, views)


def _k8s_selects(by: K8sPodPeer | K8sSubject, pod: PodEndpoint, views: Views) -> bool:
    """Namespace (fixed name or selector) AND pod selector; host-network pods are not pods here."""
    if pod.host_network:
        return False
    if by.namespace_selector is None:
        if pod.namespace != by.namespace:
            return False
    elif not by.namespace_selector.matches(views.k8s_namespace(pod)):
        return False
    return by.pod_selector.matches(views.k8s(pod))


@dataclass(frozen=True, slots=True)
class CiliumSubject:
    selector: LabelSelector
    namespace: str | None  # for indexing only; the selector already requires it

    def matches(self, pod: PodEndpoint, views: Views) -> bool:
        if pod.host_network:
            return False
        return self.selector.matches(views.cilium(pod, None))


@dataclass(frozen=True, slots=True)
class CalicoSubject:
    selector: CalicoSelector | None
    namespace: str | None
    namespace_selector: CalicoSelector | None = None
    service_account_selector: CalicoSelector | None = None

    def matches(self, pod: PodEndpoint, views: Views) -> bool:
        if pod.host_network:
            return False
        if self.namespace is not None and pod.namespace != self.namespace:
            return False
        if self.namespace_selector is not None and not self.namespace_selector.matches(
            cni.calico_namespace_view(pod)
        ):
            return False
        if self.service_account_selector is not None and not self.service_account_selector.matches({}):
            return False
        return self.selector is None or self.selector.matches(views.calico(pod))


Subject = K8sSubject | CiliumSubject | CalicoSubject


# ----------------------------------------------------------------------------------------------
# Rules and policies


@value(frozen=True)
class Rule:
    ref: RuleRef
    action: Action
    peers: tuple[Peer, ...]  # ORed; () matches nothing
    ports: PortMatch = PortMatch()
    note: str = ""  # e.g. "L7 rules enforced by the proxy"
    # Calico: a rule's criteria on the policy's own side (destination of an ingress rule,
    # source of an egress rule) further restrict which selected pods it applies to.
    local: Peer | None = None

    def peer_matches(self, ep: Endpoint, views: Views, subject: PodEndpoint) -> bool:
        if self.local is not None and not self.local.matches(subject, views, subject):
            return False
        # A loop, not any(...) over a generator (as LabelSelector.matches): ~41k calls a scan.
        for p in self.peers:  # noqa: SIM110
            if p.matches(ep, views, subject):
                return True
        return False


@value(frozen=True)
class DirectionRules:
    """A policy's rules in one direction.

    `applies`: the policy takes part in this direction at all. `isolates`: once it selects a pod,
    traffic in this direction that no rule allows is denied (NetworkPolicy policyTypes, Cilium
    default deny, Calico `types`).
    """

    applies: bool = False
    isolates: bool = False
    rules: tuple[Rule, ...] = ()


@dataclass(frozen=True, slots=True)
class CompiledPolicy:
    ref: PolicyRef
    tier: str
    order: tuple[float, str]
    subject: Subject
    ingress: DirectionRules
    egress: DirectionRules

    def direction(self, d: Direction) -> DirectionRules:
        return self.ingress if d is Direction.INGRESS else self.egress


# ----------------------------------------------------------------------------------------------
# Verdicts


@value(frozen=True)
class Decider:
    """One policy (and rule, when a rule decided) behind a verdict."""

    policy: PolicyRef
    rule: str
    line: int
    effect: str  # allow | deny | pass | isolate

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.policy.kind,
            "namespace": self.policy.namespace,
            "name": self.policy.name,
            "file": self.policy.source.file,
            "line": self.line or self.policy.source.line,
            "rule": self.rule,
            "effect": self.effect,
        }

    def describe(self) -> str:
        where = f"{self.policy.source.file}:{self.line or self.policy.source.line}"
        if self.effect == "isolate":
            return f"{self.policy} selects the pod and no rule allows it ({where})"
        verb = {"allow": "allows", "deny": "denies", "pass": "passes"}[self.effect]
        return f"{self.policy} {verb} it by rule {self.rule} ({where})"


@value(frozen=True)
class Segment:
    conns: ConnSet
    allowed: bool
    deciders: tuple[Decider, ...]
    reason: str


@value(frozen=True)
class DirectionalVerdict:
    """Egress of the source or ingress of the destination, partitioned into decided pieces."""

    direction: Direction
    segments: tuple[Segment, ...]
    # One verdict answers many flows (it is shared by every pod of an identity): union once.
    _allowed: ConnSet | None = field(default=None, init=False, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        # Set here, not only by the field's default: mypyc's compiled __init__ leaves a field that
        # is not an argument and has no factory unset (auditor/native.py).
        object.__setattr__(self, "_allowed", None)

    def allowed_conns(self) -> ConnSet:
        if self._allowed is None:
            allowed = reduce(operator.or_, (s.conns for s in self.segments if s.allowed), ConnSet.none())
            object.__setattr__(self, "_allowed", allowed)
            return allowed
        return self._allowed

    def at(self, protocol: str, port: int) -> Segment:
        for s in self.segments:
            if s.conns.contains(protocol, port):
                return s
        raise KeyError(f"{protocol}/{port} not covered")  # every verdict covers all connections
