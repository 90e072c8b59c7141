"""Calico NetworkPolicy and GlobalNetworkPolicy (projectcalico.org/v3) → compiled policies.

Semantics (Calico docs "Policy ordering", "Tiers"): within a tier, policies apply in ascending
`order` (missing order last, ties by name); rules in order; the first matching rule's action
decides: Allow, Deny, Pass (skip to the next tier); Log continues. If policies of the tier apply to
the endpoint and none matched, the tier's default action (Deny) applies. `types` defaults to
Ingress, Egress when only egress rules exist, both when both do. A namespaced policy's selectors
stay in its namespace unless a rule gives `namespaceSelector`; a global policy's reach every
namespace. Kubernetes NetworkPolicies sit in the default tier at order 1000.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from auditor.model.source import SourceRef
from auditor.reachability import specs
from auditor.reachability.policy import (
    Action,
    CalicoPeer,
    CalicoSubject,
    CompiledPolicy,
    DirectionRules,
    PolicyRef,
    PortMatch,
    Rule,
    RuleRef,
)
from auditor.reachability.ports import PROTOCOLS, ConnSet, PortSet
from auditor.reachability.specs import PolicyError

if TYPE_CHECKING:
    from auditor.reachability.calico_selector import Selector

NP = "NetworkPolicy"
GNP = "GlobalNetworkPolicy"
_PROTO_NUMBERS = {"6": "TCP", "17": "UDP", "132": "SCTP"}
_OTHER_PROTOCOLS = {"ICMP", "ICMPV6", "UDPLITE"}
_ACTIONS = {"Allow": Action.ALLOW, "Deny": Action.DENY, "Pass": Action.PASS}
_SPEC_FIELDS = (
    "order",
    "tier",
    "selector",
    "namespaceSelector",
    "serviceAccountSelector",
    "types",
    "ingress",
    "egress",
    "doNotTrack",
    "preDNAT",
    "applyOnForward",
    "performanceHints",
)
_RULE_FIELDS = (
    "action",
    "protocol",
    "notProtocol",
    "icmp",
    "notICMP",
    "ipVersion",
    "source",
    "destination",
    "http",
    "metadata",
)
_ENTITY_FIELDS = (
    "nets",
    "notNets",
    "selector",
    "notSelector",
    "namespaceSelector",
    "ports",
    "notPorts",
    "serviceAccounts",
    "services",
)


def compile_calico_policy(
    obj: Mapping[str, Any], source: SourceRef, namespace: str | None, notes: list[str]
) -> CompiledPolicy:
    kind = "Calico " + (NP if namespace is not None else GNP)
    name = str(obj.get("metadata", {}).get("name", ""))
    ref = PolicyRef(kind, namespace or "", name, source)
    spec = specs.mapping(obj.get("spec"), "spec", _SPEC_FIELDS)
    order_raw = spec.get("order")
    if order_raw is None:
        order = math.inf
    elif isinstance(order_raw, (int, float)) and not isinstance(order_raw, bool):
        order = float(order_raw)
    else:
        raise PolicyError("spec.order", f"must be a number, got {order_raw!r}")
    tier = specs.string(spec.get("tier"), "spec.tier", optional=True) or "default"
    if spec.get("doNotTrack") or spec.get("preDNAT"):
        notes.append(f"{ref}: doNotTrack/preDNAT policies apply to host endpoints; not evaluated for pods")
    subject = CalicoSubject(
        _sel(spec.get("selector"), "spec.selector"),
        namespace,
        _sel(spec.get("namespaceSelector"), "spec.namespaceSelector") if namespace is None else None,
        _sel(spec.get("serviceAccountSelector"), "spec.serviceAccountSelector"),
    )
    ingress_raw = specs.seq(spec.get("ingress"), "spec.ingress")
    egress_raw = specs.seq(spec.get("egress"), "spec.egress")
    default = ({"Egress"} | ({"Ingress"} if ingress_raw else set())) if egress_raw else {"Ingress"}
    types = specs.policy_types(spec.get("types"), "spec.types", default)
    directions = {}
    for direction, items in (("ingress", ingress_raw), ("egress", egress_raw)):
        compiled = (
            _rule(ref, item, direction, i, specs.item_line(spec.get(direction), i, source.line), namespace)
            for i, item in enumerate(items)
        )
        rules = tuple(r for r in compiled if r is not None)  # Log rules compile to nothing
        on = direction.capitalize() in types
        directions[direction] = DirectionRules(on, on, rules if on else ())
    return CompiledPolicy(
        ref, f"calico:{tier}", (order, name), subject, directions["ingress"], directions["egress"]
    )


def _sel(raw: Any, field: str) -> Selector | None:
    if raw is None:
        return None
    # Imported here: the selector grammar (17 classes) is only needed where Calico policies are.
    from auditor.reachability.calico_selector import CalicoSelectorError, parse_selector

    text = specs.string(raw, field)
    try:
        return parse_selector(text)
    except CalicoSelectorError as exc:
        raise PolicyError(field, str(exc)) from exc


def _rule(
    ref: PolicyRef, raw: Any, direction: str, index: int, line: int, namespace: str | None
) -> Rule | None:
    field = f"spec.{direction}[{index}]"
    body = specs.mapping(raw, field, _RULE_FIELDS)
    action_raw = body.get("action")
    if action_raw == "Log":
        return None
    if action_raw not in _ACTIONS:
        raise PolicyError(f"{field}.action", f"must be Allow, Deny, Pass or Log, got {action_raw!r}")
    protocol = _protocol(body.get("protocol"), f"{field}.protocol")
    not_protocol = _protocol(body.get("notProtocol"), f"{field}.notProtocol")
    sides = {k: specs.mapping(body.get(k), f"{field}.{k}", _ENTITY_FIELDS) for k in ("source", "destination")}
    # Source ports are ephemeral for the flows we audit: a rule is read as if they matched.
    ports = _ports(sides["destination"], protocol, f"{field}.destination")
    if not_protocol is not None:
        restrict = ConnSet.all() - (ConnSet.of(not_protocol) if not_protocol in PROTOCOLS else ConnSet.none())
        ports = PortMatch(ports.static, ports.named, ports.exclude_static, ports.exclude_named, restrict)
    # The policy's own side: the destination of an ingress rule, the source of an egress rule.
    peer_key, local_key = ("source", "destination") if direction == "ingress" else ("destination", "source")
    peer = _entity(sides[peer_key], f"{field}.{peer_key}", namespace)
    local = _entity(sides[local_key], f"{field}.{local_key}", namespace)
    has_local = any(
        sides[local_key].get(k)
        for k in ("selector", "notSelector", "namespaceSelector", "nets", "notNets", "serviceAccounts")
    )
    return Rule(
        RuleRef(ref, f"{direction}[{index}]", line),
        _ACTIONS[str(action_raw)],
        (peer,),
        ports,
        local=local if has_local else None,
    )


def _protocol(raw: Any, field: str) -> str | None:
    if raw is None:
        return None
    text = str(raw).upper()
    text = _PROTO_NUMBERS.get(text, text)
    if text in PROTOCOLS or text in _OTHER_PROTOCOLS or (text.isdigit() and 1 <= int(text) <= 255):
        return text
    raise PolicyError(field, f"unknown protocol {raw!r}")


def _ports(entity: Mapping[str, Any], protocol: str | None, field: str) -> PortMatch:
    ports_raw = specs.seq(entity.get("ports"), f"{field}.ports")
    not_raw = specs.seq(entity.get("notPorts"), f"{field}.notPorts")
    if (ports_raw or not_raw) and protocol not in PROTOCOLS:
        raise PolicyError(f"{field}.ports", "ports are only valid with protocol TCP, UDP or SCTP")
    if protocol is None:
        base = ConnSet.all()
    elif protocol in PROTOCOLS:
        base = ConnSet.of(protocol)
    else:
        base = ConnSet.none()  # ICMP and friends: no TCP/UDP/SCTP connection
    if not ports_raw and not not_raw:
        return PortMatch(base)
    assert protocol is not None
    static, named = _port_list(ports_raw, protocol, f"{field}.ports")
    ex_static, ex_named = _port_list(not_raw, protocol, f"{field}.notPorts")
    if not ports_raw:
        static = base
    return PortMatch(static, named, ex_static, ex_named)


def _port_list(
    raw: list[Any], protocol: str, field: str
) -> tuple[ConnSet, tuple[tuple[str, str | None], ...]]:
    ports = PortSet()
    named: list[tuple[str, str | None]] = []
    for i, item in enumerate(raw):
        f = f"{field}[{i}]"
        if isinstance(item, int) and not isinstance(item, bool):
            ports = ports | PortSet.single(specs.integer(item, f, 1, 65535))
            continue
        text = specs.string(item, f).strip()
        if ":" in text:
            lo_s, _, hi_s = text.partition(":")
            lo = specs.integer(lo_s, f, 0, 65535)
            hi = specs.integer(hi_s, f, lo, 65535)
            ports = ports | PortSet.of((max(lo, 1), hi))
        elif text.isdigit():
            ports = ports | PortSet.single(specs.integer(text, f, 1, 65535))
        else:
            named.append((text, protocol))
    return ConnSet.of(protocol, ports) if ports else ConnSet.none(), tuple(named)


def _entity(body: Mapping[str, Any], field: str, namespace: str | None) -> CalicoPeer:
    sa = specs.mapping(body.get("serviceAccounts"), f"{field}.serviceAccounts", ("names", "selector"))
    if body.get("services"):
        raise PolicyError(f"{field}.services", "service-based rules are not evaluated; use selectors")
    return CalicoPeer(
        selector=_sel(body.get("selector"), f"{field}.selector"),
        not_selector=_sel(body.get("notSelector"), f"{field}.notSelector"),
        namespace_selector=_sel(body.get("namespaceSelector"), f"{field}.namespaceSelector"),
        namespace=namespace,
        nets=specs.cidrs(body.get("nets"), f"{field}.nets"),
        not_nets=specs.cidrs(body.get("notNets"), f"{field}.notNets"),
        service_account_names=frozenset(
            str(n) for n in specs.seq(sa.get("names"), f"{field}.serviceAccounts.names")
        ),
        service_account_selector=_sel(sa.get("selector"), f"{field}.serviceAccounts.selector"),
    )
