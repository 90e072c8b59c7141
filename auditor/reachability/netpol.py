"""Kubernetes NetworkPolicy (networking.k8s.io/v1) → compiled policy.

Semantics (API reference and the e2e suite): a policy selects pods in its namespace; for each
policyType it lists, selected pods are isolated and only the union of its rules is allowed.
policyTypes defaults to Ingress, plus Egress when `egress` has rules. A rule without `from`/`to`
matches every peer; without `ports`, every port. A peer with podSelector and namespaceSelector
selects pods matching both (AND); separate peers are ORed. ipBlock matches addresses in `cidr`
and not in `except`. Named ports resolve on the destination pod; `endPort` makes a range.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from auditor.model.labels import SelectorError, parse_label_selector
from auditor.model.source import SourceRef
from auditor.reachability import specs
from auditor.reachability.policy import (
    Action,
    AnyPeer,
    CIDRPeer,
    CompiledPolicy,
    DirectionRules,
    K8sPodPeer,
    K8sSubject,
    Peer,
    PolicyRef,
    PortMatch,
    Rule,
    RuleRef,
)
from auditor.reachability.ports import ConnSet, PortSet
from auditor.reachability.specs import PolicyError

KIND = "NetworkPolicy"
# Calico evaluates Kubernetes NetworkPolicies in its default tier at order 1000.
CALICO_ORDER = 1000.0


def compile_network_policy(
    obj: Mapping[str, Any],
    source: SourceRef,
    namespace: str,
    tier: str,
) -> CompiledPolicy:
    name = str(obj.get("metadata", {}).get("name", ""))
    ref = PolicyRef(KIND, namespace, name, source)
    spec = specs.mapping(obj.get("spec"), "spec", ("podSelector", "policyTypes", "ingress", "egress"))
    try:
        subject_sel = parse_label_selector(spec.get("podSelector"), "spec.podSelector")
        ingress_raw = specs.seq(spec.get("ingress"), "spec.ingress")
        egress_raw = specs.seq(spec.get("egress"), "spec.egress")
        default = {"Ingress"} | ({"Egress"} if egress_raw else set())
        types = specs.policy_types(spec.get("policyTypes"), "spec.policyTypes", default)
        directions = {}
        for direction, items in (("ingress", ingress_raw), ("egress", egress_raw)):
            # Rules of a direction the policy does not take part in are still checked.
            rules = tuple(
                _rule(ref, namespace, r, direction, i, spec.get(direction), source)
                for i, r in enumerate(items)
            )
            on = direction.capitalize() in types
            directions[direction] = DirectionRules(on, on, rules if on else ())
    except SelectorError as exc:
        raise PolicyError(exc.field, exc.message) from exc
    return CompiledPolicy(
        ref,
        tier,
        (CALICO_ORDER, f"{namespace}/{name}"),
        K8sSubject(namespace, None, subject_sel),
        directions["ingress"],
        directions["egress"],
    )


def _rule(
    ref: PolicyRef, namespace: str, raw: Any, direction: str, index: int, container: Any, source: SourceRef
) -> Rule:
    field = f"spec.{direction}[{index}]"
    peer_key = "from" if direction == "ingress" else "to"
    body = specs.mapping(raw, field, (peer_key, "ports"))
    peers_raw = specs.seq(body.get(peer_key), f"{field}.{peer_key}")
    peers = tuple(_peer(p, namespace, f"{field}.{peer_key}[{j}]") for j, p in enumerate(peers_raw))
    ports = parse_ports(specs.seq(body.get("ports"), f"{field}.ports"), f"{field}.ports")
    line = specs.item_line(container, index, source.line)
    # No from/to: every peer.
    return Rule(RuleRef(ref, f"{direction}[{index}]", line), Action.ALLOW, peers or (AnyPeer(),), ports)


def _peer(raw: Any, namespace: str, field: str) -> Peer:
    body = specs.mapping(raw, field, ("podSelector", "namespaceSelector", "ipBlock"))
    if "ipBlock" in body and body["ipBlock"] is not None:
        if body.get("podSelector") is not None or body.get("namespaceSelector") is not None:
            raise PolicyError(field, "ipBlock cannot be combined with podSelector or namespaceSelector")
        block = specs.mapping(body["ipBlock"], f"{field}.ipBlock", ("cidr", "except"))
        net = specs.cidr(block.get("cidr"), f"{field}.ipBlock.cidr")
        excepts = []
        for k, e in enumerate(specs.seq(block.get("except"), f"{field}.ipBlock.except")):
            ex = specs.cidr(e, f"{field}.ipBlock.except[{k}]")
            if ex.version != net.version or not ex.subnet_of(net) or ex == net:  # type: ignore[arg-type]
                raise PolicyError(f"{field}.ipBlock.except[{k}]", f"{ex} must be a strict subset of {net}")
            excepts.append(ex)
        return CIDRPeer(net, tuple(excepts))
    if "podSelector" not in body and "namespaceSelector" not in body:
        raise PolicyError(field, "a peer must set podSelector, namespaceSelector or ipBlock")
    pod_sel = parse_label_selector(body.get("podSelector"), f"{field}.podSelector")
    if "namespaceSelector" not in body:
        return K8sPodPeer(namespace, None, pod_sel)
    ns_sel = parse_label_selector(body.get("namespaceSelector"), f"{field}.namespaceSelector")
    return K8sPodPeer(None, ns_sel, pod_sel)


def parse_ports(raw: list[Any], field: str) -> PortMatch:
    """NetworkPolicyPort list: protocol (default TCP), port (number or name), endPort."""
    if not raw:
        return PortMatch()
    static: dict[str, PortSet] = {}
    named: list[tuple[str, str | None]] = []
    for i, item in enumerate(raw):
        f = f"{field}[{i}]"
        body = specs.mapping(item, f, ("protocol", "port", "endPort"))
        proto_raw = body.get("protocol")
        protocol = specs.protocol("TCP" if proto_raw is None else proto_raw, f"{f}.protocol")
        port = body.get("port")
        end = body.get("endPort")
        if port is None:
            if end is not None:
                raise PolicyError(f"{f}.endPort", "requires port")
            static[protocol] = PortSet.all()
        elif isinstance(port, str) and not port.strip().isdigit():
            if end is not None:
                raise PolicyError(f"{f}.endPort", "cannot be used with a named port")
            named.append((port, protocol))
        else:
            lo = specs.integer(port, f"{f}.port", 1, 65535)
            hi = lo if end is None else specs.integer(end, f"{f}.endPort", lo, 65535)
            static[protocol] = static.get(protocol, PortSet()) | PortSet.of((lo, hi))
    return PortMatch(ConnSet.from_mapping(static), tuple(named))
