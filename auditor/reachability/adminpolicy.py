"""AdminNetworkPolicy / BaselineAdminNetworkPolicy (policy.networking.k8s.io/v1alpha1) and their
successor ClusterNetworkPolicy (v1alpha2) → compiled policies.

Order (network-policy-api): the Admin tier by priority (lower first), rules in written order,
first match decides: Allow/Accept and Deny are final, Pass skips the rest of the tier; then
NetworkPolicy; then the Baseline tier; then the default allow. Peers select pods by namespace
and pod selectors (host-network pods excluded), nodes, or networks (CIDRs, which do match pod
IPs). A peer with no recognised field "fails closed": for Allow/Accept it matches nothing, for
Deny and Pass it matches everything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from auditor.model.labels import LabelSelector, SelectorError, parse_label_selector
from auditor.model.source import SourceRef
from auditor.reachability import specs
from auditor.reachability.engine import ADMIN_TIER, BASELINE_TIER
from auditor.reachability.policy import (
    Action,
    AnyPeer,
    CIDRPeer,
    CompiledPolicy,
    DirectionRules,
    K8sPodPeer,
    K8sSubject,
    NodePeer,
    Peer,
    PolicyRef,
    PortMatch,
    Rule,
    RuleRef,
)
from auditor.reachability.ports import ConnSet, PortSet
from auditor.reachability.specs import PolicyError

ANP = "AdminNetworkPolicy"
BANP = "BaselineAdminNetworkPolicy"
CNP = "ClusterNetworkPolicy"

_SPEC_FIELDS = {
    ANP: ("priority", "subject", "ingress", "egress"),
    BANP: ("subject", "ingress", "egress"),
    CNP: ("tier", "priority", "subject", "ingress", "egress"),
}
_ACTIONS = {
    ANP: {"Allow": Action.ALLOW, "Deny": Action.DENY, "Pass": Action.PASS},
    BANP: {"Allow": Action.ALLOW, "Deny": Action.DENY},
    CNP: {"Accept": Action.ALLOW, "Deny": Action.DENY, "Pass": Action.PASS},
}


def compile_admin_policy(obj: Mapping[str, Any], source: SourceRef) -> CompiledPolicy:
    kind = str(obj.get("kind"))
    name = str(obj.get("metadata", {}).get("name", ""))
    ref = PolicyRef(kind, "", name, source)
    spec = specs.mapping(obj.get("spec"), "spec", _SPEC_FIELDS[kind], optional=False)
    try:
        tier_name = spec.get("tier") if kind == CNP else ("Admin" if kind == ANP else "Baseline")
        if tier_name not in ("Admin", "Baseline"):
            raise PolicyError("spec.tier", f"must be Admin or Baseline, got {tier_name!r}")
        tier = ADMIN_TIER if tier_name == "Admin" else BASELINE_TIER
        if kind == BANP:
            priority = -1
            if name != "default":
                raise PolicyError("metadata.name", "a BaselineAdminNetworkPolicy must be named 'default'")
        else:
            priority = specs.integer(spec.get("priority"), "spec.priority", 0, 1000)
        subject = _subject(spec.get("subject"), "spec.subject")
        directions = {}
        for direction in ("ingress", "egress"):
            items = specs.seq(spec.get(direction), f"spec.{direction}")
            if len(items) > 100:
                raise PolicyError(f"spec.{direction}", f"has {len(items)} rules; at most 100 are allowed")
            rules = tuple(
                _rule(ref, item, direction, i, specs.item_line(spec.get(direction), i, source.line))
                for i, item in enumerate(items)
            )
            # Admin tiers never isolate: what no rule matches passes to the next tier.
            directions[direction] = DirectionRules(bool(rules), False, rules)
    except SelectorError as exc:
        raise PolicyError(exc.field, exc.message) from exc
    return CompiledPolicy(
        ref, tier, (float(priority), name), subject, directions["ingress"], directions["egress"]
    )


def _subject(raw: Any, field: str) -> K8sSubject:
    body = specs.mapping(raw, field, ("namespaces", "pods"), optional=False)
    if ("namespaces" in body) == ("pods" in body):
        raise PolicyError(field, "exactly one of namespaces or pods must be set")
    return K8sSubject(None, *_pod_selectors(body, "namespaces" if "namespaces" in body else "pods", field))


def _pod_selectors(body: Mapping[str, Any], key: str, field: str) -> tuple[LabelSelector, LabelSelector]:
    """(namespace selector, pod selector) of a subject's or peer's `namespaces` or `pods`."""
    if key == "namespaces":
        return parse_label_selector(body[key], f"{field}.namespaces"), LabelSelector.everything()
    pods = specs.mapping(body[key], f"{field}.pods", ("namespaceSelector", "podSelector"))
    return (
        parse_label_selector(pods.get("namespaceSelector"), f"{field}.pods.namespaceSelector"),
        parse_label_selector(pods.get("podSelector"), f"{field}.pods.podSelector"),
    )


def _rule(ref: PolicyRef, raw: Any, direction: str, index: int, line: int) -> Rule:
    actions, v2 = _ACTIONS[ref.kind], ref.kind == CNP
    field = f"spec.{direction}[{index}]"
    peer_key = "from" if direction == "ingress" else "to"
    ports_key = "protocols" if v2 else "ports"
    body = specs.mapping(raw, field, ("name", "action", peer_key, ports_key))
    action_raw = body.get("action")
    if action_raw not in actions:
        raise PolicyError(f"{field}.action", f"must be one of {', '.join(actions)}, got {action_raw!r}")
    action = actions[str(action_raw)]
    peers_raw = body.get(peer_key)
    peers: list[Peer] = []
    if peers_raw is None:
        # Required by the CRD; Cilium's parser reads a missing list as "every peer" and the
        # spec's fail-closed rule gives the same for Deny/Pass.
        peers = [AnyPeer()] if action is not Action.ALLOW else []
    for j, p in enumerate(specs.seq(peers_raw, f"{field}.{peer_key}")):
        peers.extend(_peer(p, f"{field}.{peer_key}[{j}]", direction, action))
    ports = _ports(specs.seq(body.get(ports_key), f"{field}.{ports_key}"), f"{field}.{ports_key}", v2)
    name = body.get("name")
    label = str(name) if name else f"{direction}[{index}]"
    return Rule(RuleRef(ref, label, line), action, tuple(peers), ports)


def _peer(raw: Any, field: str, direction: str, action: Action) -> list[Peer]:
    known = ("namespaces", "pods") + (("nodes", "networks", "domainNames") if direction == "egress" else ())
    body = specs.mapping(raw, field)
    present = [k for k in body if k in known]
    if not present:
        # Fail closed (API comment on ...Peer): Accept matches nothing, Deny/Pass match everything.
        return [] if action is Action.ALLOW else [AnyPeer()]
    if len(present) > 1 or len(body) > 1:
        raise PolicyError(field, f"exactly one peer field must be set, got {', '.join(map(str, body))}")
    key = present[0]
    if key in ("namespaces", "pods"):
        return [K8sPodPeer(None, *_pod_selectors(body, key, field))]
    if key == "nodes":
        return [NodePeer(parse_label_selector(body[key], f"{field}.nodes"))]
    if key == "networks":
        return [CIDRPeer(net, (), match_pods=True) for net in specs.cidrs(body[key], f"{field}.networks")]
    return []  # domainNames: resolved by DNS at run time; matches no pod or known address here


def _ports(raw: list[Any], field: str, v2: bool) -> PortMatch:
    """ANP/BANP `ports` (portNumber, namedPort, portRange) or CNP `protocols` (per protocol, or
    destinationNamedPort): one field per item."""
    if not raw:
        return PortMatch()
    keys = ("tcp", "udp", "sctp", "destinationNamedPort") if v2 else ("portNumber", "namedPort", "portRange")
    static: dict[str, PortSet] = {}
    named: list[tuple[str, str | None]] = []
    for i, item in enumerate(raw):
        f = f"{field}[{i}]"
        body = specs.mapping(item, f, keys)
        if len(body) != 1:
            raise PolicyError(f, f"exactly one of {', '.join(keys)} must be set")
        key, value = next(iter(body.items()))
        if key in ("namedPort", "destinationNamedPort"):
            named.append((specs.string(value, f"{f}.{key}"), None))
            continue
        proto, ports = (_protocol_v2 if v2 else _port_v1)(key, value, f"{f}.{key}")
        static[proto] = static.get(proto, PortSet()) | ports
    return PortMatch(ConnSet.from_mapping(static), tuple(named))


def _port_v1(key: str, value: Any, field: str) -> tuple[str, PortSet]:
    if key == "portNumber":
        pn = specs.mapping(value, field, ("protocol", "port"))
        proto = specs.protocol(pn.get("protocol", "TCP"), f"{field}.protocol")
        return proto, PortSet.single(specs.integer(pn.get("port"), f"{field}.port", 1, 65535))
    pr = specs.mapping(value, field, ("protocol", "start", "end"))
    proto = specs.protocol(pr.get("protocol", "TCP"), f"{field}.protocol")
    start = specs.integer(pr.get("start"), f"{field}.start", 1, 65535)
    return proto, PortSet.of((start, specs.integer(pr.get("end"), f"{field}.end", start, 65535)))


def _protocol_v2(key: str, value: Any, field: str) -> tuple[str, PortSet]:
    dp = specs.mapping(value, field, ("destinationPort",)).get("destinationPort")
    if dp is None:
        return key.upper(), PortSet.all()
    field += ".destinationPort"
    dpb = specs.mapping(dp, field, ("number", "range"))
    if "number" in dpb:
        return key.upper(), PortSet.single(specs.integer(dpb["number"], f"{field}.number", 1, 65535))
    rng = specs.mapping(dpb.get("range"), f"{field}.range", ("start", "end"), optional=False)
    start = specs.integer(rng.get("start"), f"{field}.range.start", 1, 65535)
    return key.upper(), PortSet.of((start, specs.integer(rng.get("end"), f"{field}.range.end", start, 65535)))
