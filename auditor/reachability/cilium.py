"""CiliumNetworkPolicy and CiliumClusterwideNetworkPolicy (cilium.io/v2) → compiled policies.

Semantics (Cilium policy language docs and pkg/policy):
* `endpointSelector` and `from/toEndpoints` select Cilium identity labels. Keys may carry a
  source (`k8s:app`, `any:app`, `reserved:host`); no source means any source.
* Namespace scoping: in a CiliumNetworkPolicy the subject is confined to the policy's namespace,
  and a from/toEndpoints selector that names no `io.kubernetes.pod.namespace` is too (an empty
  selector `{}` means "all pods of this namespace"); in the clusterwide kind such a selector means
  "any pod in any namespace".
* `from/toEntities` select reserved identities (world, cluster, host, remote-node,
  kube-apiserver, ...). `from/toCIDR(Set)` match addresses outside the cluster; they match pods or
  nodes only under `policy-cidr-match-mode`. `from/toNodes` select node (host) identities, never
  the pods running on those nodes.
* A rule with only `toPorts` (no L3 peer) allows every peer on those ports; an empty rule `{}`
  allows nothing but still puts the endpoint in default deny.
* `ingressDeny`/`egressDeny` win over any allow, from any policy kind.
* Default deny: a policy with rules in a direction puts selected endpoints into default deny for
  it, unless `enableDefaultDeny` says otherwise.
* L7 rules (`rules: http/dns/kafka`) allow the connection at L4; the proxy filters requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from auditor.model.labels import (
    LabelSelector,
    Requirement,
    SelectorError,
    parse_label_selector,
)
from auditor.model.source import LoadError, SourceRef
from auditor.reachability import specs
from auditor.reachability.cni import CILIUM_NS_LABEL
from auditor.reachability.policy import (
    CILIUM_ENTITIES,
    Action,
    AnyPeer,
    CIDRPeer,
    CiliumEndpointPeer,
    CiliumEntityPeer,
    CiliumSubject,
    CompiledPolicy,
    DirectionRules,
    NodePeer,
    Peer,
    PolicyRef,
    PortMatch,
    Rule,
    RuleRef,
)
from auditor.reachability.ports import PROTOCOLS, ConnSet, PortSet
from auditor.reachability.specs import PolicyError

_PROTOCOL_NAMES = frozenset((*PROTOCOLS, "ANY", "ICMP", "ICMPV6", "VRRP", "IGMP"))
"""What a Cilium toPorts protocol may say (ANY, and the protocols whose ports carry no L4 port)."""

CNP = "CiliumNetworkPolicy"
CCNP = "CiliumClusterwideNetworkPolicy"

_RULE_FIELDS = (
    "endpointSelector",
    "nodeSelector",
    "ingress",
    "ingressDeny",
    "egress",
    "egressDeny",
    "labels",
    "description",
    "enableDefaultDeny",
    "log",
)
_INGRESS_FIELDS = (
    "fromEndpoints",
    "fromRequires",
    "fromCIDR",
    "fromCIDRSet",
    "fromEntities",
    "fromGroups",
    "fromNodes",
    "toPorts",
    "icmps",
    "authentication",
)
_EGRESS_FIELDS = (
    "toEndpoints",
    "toRequires",
    "toCIDR",
    "toCIDRSet",
    "toEntities",
    "toGroups",
    "toNodes",
    "toPorts",
    "icmps",
    "toServices",
    "toFQDNs",
    "authentication",
)
_NS_KEYS = (CILIUM_NS_LABEL, "k8s:" + CILIUM_NS_LABEL, "any:" + CILIUM_NS_LABEL)


def compile_cilium_policy(
    obj: Mapping[str, Any],
    source: SourceRef,
    namespace: str | None,
    tier: str,
) -> tuple[list[CompiledPolicy], list[LoadError], list[str]]:
    """Compile every rule of the policy (`spec` and `specs[]`).

    Returns (policies, errors for rules we could not read, notes on parts not evaluated). A broken
    rule drops only that rule.
    """
    kind = CNP if namespace is not None else CCNP
    name = str(obj.get("metadata", {}).get("name", ""))
    ref = PolicyRef(kind, namespace or "", name, source)
    rules: list[tuple[str, Any]] = [("spec", obj["spec"])] if obj.get("spec") is not None else []
    rules += ((f"specs[{i}]", r) for i, r in enumerate(specs.seq(obj.get("specs"), "specs")))
    if not rules:
        raise PolicyError("spec", "a Cilium policy needs spec or specs")
    policies: list[CompiledPolicy] = []
    errors: list[LoadError] = []
    notes: list[str] = []
    for path, raw in rules:
        try:
            compiled = _compile_rule(ref, raw, path, namespace, tier, notes)
        except SelectorError as exc:
            line = int(getattr(raw, "line", source.line))
            errors.append(LoadError(source.file, line, exc.message, str(ref), exc.field))
            continue
        if compiled is not None:
            policies.append(compiled)
    return policies, errors, notes


def _compile_rule(
    ref: PolicyRef,
    raw: Any,
    path: str,
    namespace: str | None,
    tier: str,
    notes: list[str],
) -> CompiledPolicy | None:
    body = specs.mapping(raw, path, _RULE_FIELDS, optional=False)
    if body.get("nodeSelector") is not None:
        notes.append(f"{ref} {path}: host policy (nodeSelector) applies to nodes, not pods; not evaluated")
        return None
    if "endpointSelector" not in body:
        raise PolicyError(f"{path}.endpointSelector", "is required (or nodeSelector for host policies)")
    subject = _selector(body.get("endpointSelector"), f"{path}.endpointSelector")
    if namespace is not None:
        subject = subject.and_(LabelSelector((Requirement(CILIUM_NS_LABEL, "In", (namespace,)),)))
    directions: dict[str, DirectionRules] = {}
    default_deny = specs.mapping(
        body.get("enableDefaultDeny"), f"{path}.enableDefaultDeny", ("ingress", "egress")
    )
    for direction, deny_key in (("ingress", "ingressDeny"), ("egress", "egressDeny")):
        allow_raw = specs.seq(body.get(direction), f"{path}.{direction}")
        deny_raw = specs.seq(body.get(deny_key), f"{path}.{deny_key}")
        compiled: list[Rule] = []
        for key, items, action in ((deny_key, deny_raw, Action.DENY), (direction, allow_raw, Action.ALLOW)):
            for i, item in enumerate(items):
                field = f"{path}.{key}[{i}]"
                line = specs.item_line(body.get(key), i, ref.source.line)
                compiled.append(_rule(ref, item, field, key, i, line, action, namespace, notes))
        has_rules = bool(allow_raw or deny_raw)
        explicit = default_deny.get(direction)
        if explicit is not None and not isinstance(explicit, bool):
            raise PolicyError(f"{path}.enableDefaultDeny.{direction}", f"must be a boolean, got {explicit!r}")
        isolates = has_rules if explicit is None else explicit
        directions[direction] = DirectionRules(has_rules or bool(explicit), isolates, tuple(compiled))
    return CompiledPolicy(
        ref,
        tier,
        (0.0, f"{ref.namespace}/{ref.name}/{path}"),
        CiliumSubject(subject, namespace),
        directions["ingress"],
        directions["egress"],
    )


def _rule(
    ref: PolicyRef,
    raw: Any,
    field: str,
    key: str,
    index: int,
    line: int,
    action: Action,
    namespace: str | None,
    notes: list[str],
) -> Rule:
    prefix, fields = ("from", _INGRESS_FIELDS) if key.startswith("ingress") else ("to", _EGRESS_FIELDS)
    body = specs.mapping(raw, field, fields, optional=False)
    peers: list[Peer] = []
    for i, sel in enumerate(specs.seq(body.get(f"{prefix}Endpoints"), f"{field}.{prefix}Endpoints")):
        peers.append(CiliumEndpointPeer(_scoped(sel, f"{field}.{prefix}Endpoints[{i}]", namespace)))
    entities = specs.seq(body.get(f"{prefix}Entities"), f"{field}.{prefix}Entities")
    if entities:
        for i, e in enumerate(entities):
            if e not in CILIUM_ENTITIES:
                raise PolicyError(
                    f"{field}.{prefix}Entities[{i}]",
                    f"unknown entity {e!r} (known: {', '.join(CILIUM_ENTITIES)})",
                )
        peers.append(CiliumEntityPeer(frozenset(str(e) for e in entities)))
    peers.extend(CIDRPeer(net) for net in specs.cidrs(body.get(f"{prefix}CIDR"), f"{field}.{prefix}CIDR"))
    for i, item in enumerate(specs.seq(body.get(f"{prefix}CIDRSet"), f"{field}.{prefix}CIDRSet")):
        f = f"{field}.{prefix}CIDRSet[{i}]"
        cs = specs.mapping(item, f, ("cidr", "except", "cidrGroupRef", "cidrGroupSelector"))
        if cs.get("cidr") is None:
            raise PolicyError(
                f, "cidrGroupRef/cidrGroupSelector need CiliumCIDRGroup objects; only cidr is evaluated"
            )
        net = specs.cidr(cs.get("cidr"), f"{f}.cidr")
        peers.append(CIDRPeer(net, specs.cidrs(cs.get("except"), f"{f}.except")))
    for i, sel in enumerate(specs.seq(body.get(f"{prefix}Nodes"), f"{field}.{prefix}Nodes")):
        peers.append(NodePeer(_selector(sel, f"{field}.{prefix}Nodes[{i}]"), cilium=True))
    unsupported = [
        k for k in (f"{prefix}Requires", f"{prefix}Groups", "toServices", "toFQDNs") if body.get(k)
    ]
    notes.extend(f"{ref} {field}.{k}: not evaluated (matches no pod in this model)" for k in unsupported)
    ports, note = _to_ports(
        specs.seq(body.get("toPorts"), f"{field}.toPorts"), f"{field}.toPorts", action is Action.DENY
    )
    has_l4 = body.get("toPorts") is not None or body.get("icmps") is not None
    if not peers and not unsupported:
        # An L4-only rule applies to every peer; an empty rule {} selects nothing.
        peers = [AnyPeer()] if has_l4 else []
    if body.get("icmps") is not None and body.get("toPorts") is None:
        ports = PortMatch(ConnSet.none())  # ICMP only: no TCP/UDP/SCTP connection is covered
    return Rule(RuleRef(ref, f"{key}[{index}]", line), action, tuple(peers), ports, note)


def _selector(raw: Any, field: str) -> LabelSelector:
    sel = parse_label_selector(raw, field)
    return LabelSelector(
        tuple(
            sorted(Requirement(r.key.removeprefix("any:"), r.operator, r.values) for r in sel.requirements)
        ),
        sel.impossible,
    )


def _scoped(raw: Any, field: str, namespace: str | None) -> LabelSelector:
    sel = _selector(raw, field)
    keys = sel.keys()
    if any(k.startswith("reserved:") for k in keys) or any(k in keys for k in _NS_KEYS):
        return sel
    if namespace is not None:
        return sel.and_(LabelSelector((Requirement(CILIUM_NS_LABEL, "In", (namespace,)),)))
    return sel.and_(LabelSelector((Requirement(CILIUM_NS_LABEL, "Exists"),)))


def _to_ports(raw: list[Any], field: str, deny: bool) -> tuple[PortMatch, str]:
    if not raw:
        return PortMatch(), ""
    static: dict[str, PortSet] = {}
    named: list[tuple[str, str | None]] = []
    l7 = False
    allowed = (
        ("ports",)
        if deny
        else ("ports", "rules", "terminatingTLS", "originatingTLS", "serverNames", "listener")
    )
    for i, item in enumerate(raw):
        f = f"{field}[{i}]"
        body = specs.mapping(item, f, allowed)
        l7 |= bool(body.get("rules"))
        ports = specs.seq(body.get("ports"), f"{f}.ports")
        if not ports:
            static.update(dict.fromkeys(PROTOCOLS, PortSet.all()))
            continue
        for j, port in enumerate(ports):
            pf = f"{f}.ports[{j}]"
            pb = specs.mapping(port, pf, ("port", "endPort", "protocol"))
            proto_raw = str(pb.get("protocol") or "ANY").upper()
            if proto_raw not in _PROTOCOL_NAMES:
                raise PolicyError(f"{pf}.protocol", f"unknown protocol {pb.get('protocol')!r}")
            protocols = PROTOCOLS if proto_raw == "ANY" else ((proto_raw,) if proto_raw in PROTOCOLS else ())
            value = pb.get("port")
            text = "" if value is None else str(value).strip()
            if text and not text.isdigit():
                if protocols:  # a named ICMP/VRRP/IGMP port covers no TCP/UDP/SCTP connection
                    named.append((text, None if proto_raw == "ANY" else proto_raw))
                continue
            lo = int(text) if text else 0
            if lo == 0:
                ps = PortSet.all()
            else:
                if lo > 65535:
                    raise PolicyError(f"{pf}.port", f"must be between 0 and 65535, got {lo}")
                end = pb.get("endPort")
                hi = lo if end is None else specs.integer(end, f"{pf}.endPort", lo, 65535)
                ps = PortSet.of((lo, hi))
            for p in protocols:
                static[p] = static.get(p, PortSet()) | ps
    note = "L7 rules: the Cilium proxy filters requests on these ports" if l7 else ""
    return PortMatch(ConnSet.from_mapping(static), tuple(dict.fromkeys(named))), note
