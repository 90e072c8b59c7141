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
from auditor.reachability.ports import ConnSet, PortSet, normalise_protocol
from auditor.reachability.specs import PolicyError

ANP = "AdminNetworkPolicy"
BANP = "BaselineAdminNetworkPolicy"
CNP = "ClusterNetworkPolicy"

_ACTIONS_V1 = {"Allow": Action.ALLOW, "Deny": Action.DENY, "Pass": Action.PASS}
_ACTIONS_V2 = {"Accept": Action.ALLOW, "Deny": Action.DENY, "Pass": Action.PASS}


def compile_admin_policy(obj: Mapping[str, Any], source: SourceRef) -> CompiledPolicy:
    kind = str(obj.get("kind"))
    name = str(obj.get("metadata", {}).get("name", ""))
    ref = PolicyRef(kind, "", name, source)
    v2 = kind == CNP
    allowed = (
        ("tier", "priority", "subject", "ingress", "egress")
        if v2
        else (
            ("priority", "subject", "ingress", "egress") if kind == ANP else ("subject", "ingress", "egress")
        )
    )
    spec = specs.mapping(obj.get("spec"), "spec", allowed, optional=False)
    try:
        if v2:
            tier_name = spec.get("tier")
            if tier_name not in ("Admin", "Baseline"):
                raise PolicyError("spec.tier", f"must be Admin or Baseline, got {tier_name!r}")
            tier = ADMIN_TIER if tier_name == "Admin" else BASELINE_TIER
        else:
            tier = ADMIN_TIER if kind == ANP else BASELINE_TIER
        if kind == BANP:
            priority = -1
            if name != "default":
                raise PolicyError("metadata.name", "a BaselineAdminNetworkPolicy must be named 'default'")
        else:
            priority = specs.integer(spec.get("priority"), "spec.priority", 0, 1000)
        subject = _subject(spec.get("subject"), "spec.subject")
        actions = (
            _ACTIONS_V2
            if v2
            else (_ACTIONS_V1 if kind == ANP else {"Allow": Action.ALLOW, "Deny": Action.DENY})
        )
        directions = {}
        for direction in ("ingress", "egress"):
            items = specs.seq(spec.get(direction), f"spec.{direction}")
            if len(items) > 100:
                raise PolicyError(f"spec.{direction}", f"has {len(items)} rules; at most 100 are allowed")
            rules = tuple(
                _rule(
                    ref, item, direction, i, specs.item_line(spec.get(direction), i, source.line), actions, v2
                )
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
    if "namespaces" in body:
        return K8sSubject(
            None, parse_label_selector(body["namespaces"], f"{field}.namespaces"), LabelSelector.everything()
        )
    pods = specs.mapping(body["pods"], f"{field}.pods", ("namespaceSelector", "podSelector"))
    return K8sSubject(
        None,
        parse_label_selector(pods.get("namespaceSelector"), f"{field}.pods.namespaceSelector"),
        parse_label_selector(pods.get("podSelector"), f"{field}.pods.podSelector"),
    )


def _rule(
    ref: PolicyRef, raw: Any, direction: str, index: int, line: int, actions: Mapping[str, Action], v2: bool
) -> Rule:
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
    ports = (_protocols_v2 if v2 else _ports_v1)(
        specs.seq(body.get(ports_key), f"{field}.{ports_key}"), f"{field}.{ports_key}"
    )
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
    if key == "namespaces":
        return [
            K8sPodPeer(
                None, parse_label_selector(body[key], f"{field}.namespaces"), LabelSelector.everything()
            )
        ]
    if key == "pods":
        pods = specs.mapping(body[key], f"{field}.pods", ("namespaceSelector", "podSelector"))
        return [
            K8sPodPeer(
                None,
                parse_label_selector(pods.get("namespaceSelector"), f"{field}.pods.namespaceSelector"),
                parse_label_selector(pods.get("podSelector"), f"{field}.pods.podSelector"),
            )
        ]
    if key == "nodes":
        return [NodePeer(parse_label_selector(body[key], f"{field}.nodes"))]
    if key == "networks":
        return [
            CIDRPeer(specs.cidr(c, f"{field}.networks[{k}]"), (), match_pods=True)
            for k, c in enumerate(specs.seq(body[key], f"{field}.networks"))
        ]
    return []  # domainNames: resolved by DNS at run time; matches no pod or known address here


def _ports_v1(raw: list[Any], field: str) -> PortMatch:
    if not raw:
        return PortMatch()
    static: dict[str, PortSet] = {}
    named: list[tuple[str, str | None]] = []
    for i, item in enumerate(raw):
        f = f"{field}[{i}]"
        body = specs.mapping(item, f, ("portNumber", "namedPort", "portRange"))
        if len(body) != 1:
            raise PolicyError(f, "exactly one of portNumber, namedPort, portRange must be set")
        if "namedPort" in body:
            named.append((specs.string(body["namedPort"], f"{f}.namedPort"), None))
            continue
        if "portNumber" in body:
            pn = specs.mapping(body["portNumber"], f"{f}.portNumber", ("protocol", "port"))
            proto = _protocol(pn.get("protocol", "TCP"), f"{f}.portNumber.protocol")
            port = specs.integer(pn.get("port"), f"{f}.portNumber.port", 1, 65535)
            static[proto] = static.get(proto, PortSet()) | PortSet.single(port)
            continue
        pr = specs.mapping(body["portRange"], f"{f}.portRange", ("protocol", "start", "end"))
        proto = _protocol(pr.get("protocol", "TCP"), f"{f}.portRange.protocol")
        start = specs.integer(pr.get("start"), f"{f}.portRange.start", 1, 65535)
        end = specs.integer(pr.get("end"), f"{f}.portRange.end", start, 65535)
        static[proto] = static.get(proto, PortSet()) | PortSet.of((start, end))
    return PortMatch(ConnSet.from_mapping(static), tuple(named))


def _protocols_v2(raw: list[Any], field: str) -> PortMatch:
    if not raw:
        return PortMatch()
    static: dict[str, PortSet] = {}
    named: list[tuple[str, str | None]] = []
    for i, item in enumerate(raw):
        f = f"{field}[{i}]"
        body = specs.mapping(item, f, ("tcp", "udp", "sctp", "destinationNamedPort"))
        if len(body) != 1:
            raise PolicyError(f, "exactly one of tcp, udp, sctp, destinationNamedPort must be set")
        key = next(iter(body))
        if key == "destinationNamedPort":
            named.append((specs.string(body[key], f"{f}.{key}"), None))
            continue
        proto = key.upper()
        inner = specs.mapping(body[key], f"{f}.{key}", ("destinationPort",))
        dp = inner.get("destinationPort")
        if dp is None:
            static[proto] = PortSet.all()
            continue
        dpb = specs.mapping(dp, f"{f}.{key}.destinationPort", ("number", "range"))
        if "number" in dpb:
            ps = PortSet.single(specs.integer(dpb["number"], f"{f}.{key}.destinationPort.number", 1, 65535))
        else:
            rng = specs.mapping(
                dpb.get("range"), f"{f}.{key}.destinationPort.range", ("start", "end"), optional=False
            )
            start = specs.integer(rng.get("start"), f"{f}.{key}.destinationPort.range.start", 1, 65535)
            end = specs.integer(rng.get("end"), f"{f}.{key}.destinationPort.range.end", start, 65535)
            ps = PortSet.of((start, end))
        static[proto] = static.get(proto, PortSet()) | ps
    return PortMatch(ConnSet.from_mapping(static), tuple(named))


def _protocol(raw: Any, field: str) -> str:
    proto = normalise_protocol(raw)
    if proto is None:
        raise PolicyError(field, f"must be TCP, UDP or SCTP, got {raw!r}")
    return proto
