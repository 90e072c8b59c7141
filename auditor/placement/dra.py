"""Dynamic Resource Allocation (resource.k8s.io v1, v1beta2, v1beta1): where the devices a pod
claims exist bounds where it can land (pure).

A pod's `spec.resourceClaims` name a ResourceClaim (one claim, shared by every pod that names it)
or a ResourceClaimTemplate (one claim made per pod). A claim's requests each ask for `count`
devices (or `All` of them) of a DeviceClass, narrowed by CEL selectors on the device; a request
with `firstAvailable` takes the first of its alternatives that can be satisfied. Drivers publish
their devices in ResourceSlices, each reachable from one node (`nodeName`), the nodes a
`nodeSelector` selects, or every node (`allNodes`); with `perDeviceNodeSelection` each device says
so itself. The scheduler's DynamicResources filter passes a node only if every request of every
claim can be met by devices reachable from it; an allocated claim (`status.allocation`) passes
only the nodes its `nodeSelector` selects.

A shared claim has one allocation: every pod naming it lands where its devices are reachable.
When each device a request could take is reachable from one zone only (node-local GPUs), all of
them land in one zone (`Bound.one_zone`).

CEL: DeviceClass and request selectors are evaluated with the project's CEL runtime
(rules/cel_rules.py, library ``devices``: `quantity()`, `compareTo`, `isGreaterThan`, …) over
``device`` = {driver, attributes: {domain: {name: value}}, capacity: {domain: {name: quantity}},
allowMultipleAllocations}; an attribute without a domain is in the driver's. A selector that cannot
be compiled here (`semver()`, a library this runtime lacks) counts every device as matching, and
says so; one that fails on a device (a missing attribute) does not match it, as the scheduler's
allocator refuses it.

Not read yet (docs/placement.md): `constraints` (matchAttribute), device taints and tolerations,
`adminAccess`, counters of partitionable devices, and competition between claims for the same
devices (each claim is judged alone). Nodes a provisioner would make publish their devices only
once made: they pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from auditor.model.objects import Node, PodTemplate
from auditor.model.scheduling import NodeSelectorTerm
from auditor.model.source import SourceRef
from auditor.reachability import specs
from auditor.reachability.specs import PolicyError
from auditor.workloads.scheduling import node_selector_term

GROUP = "resource.k8s.io"
VERSIONS = ("resource.k8s.io/v1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1")
KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate")
CLUSTER_KINDS = ("DeviceClass", "ResourceSlice")
MAX_COUNT = 1 << 20

DraError = PolicyError
"""The error of a DRA object that cannot be read (`field`: the dotted path in it)."""


@dataclass(frozen=True, slots=True)
class Reach:
    """The nodes a device is reachable from: one by name, a node selector's, or all."""

    node_name: str = ""
    selector: tuple[NodeSelectorTerm, ...] | None = None
    all_nodes: bool = False

    def reaches(self, node: Node) -> bool:
        from auditor.placement.filters import term_matches

        if self.all_nodes:
            return True
        if self.node_name:
            return node.name == self.node_name
        return self.selector is not None and any(term_matches(t, node) for t in self.selector)


@dataclass(frozen=True, slots=True)
class Device:
    driver: str
    pool: str
    name: str
    attributes: Mapping[str, Mapping[str, Any]]
    capacity: Mapping[str, Mapping[str, int]]
    reach: Reach
    multiple: bool = False  # allowMultipleAllocations
    source: SourceRef = SourceRef("")

    def activation(self) -> dict[str, Any]:
        return {
            "device": {
                "driver": self.driver,
                "attributes": {d: dict(a) for d, a in self.attributes.items()},
                "capacity": {d: dict(c) for d, c in self.capacity.items()},
                "allowMultipleAllocations": self.multiple,
            }
        }

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.name}"


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...]
    source: SourceRef = SourceRef("")


@dataclass(frozen=True, slots=True)
class Alternative:
    """One way to satisfy a request: `count` devices (every one, with `all`) of a class."""

    device_class: str
    selectors: tuple[str, ...] = ()
    count: int = 1
    all: bool = False


@dataclass(frozen=True, slots=True)
class Request:
    name: str
    alternatives: tuple[Alternative, ...]  # firstAvailable in order; one for `exactly`


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    requests: tuple[Request, ...]
    constraints: bool = False  # has matchAttribute constraints (not read)


@dataclass(frozen=True, slots=True)
class Claim:
    namespace: str
    name: str
    spec: ClaimSpec
    allocated: bool = False
    # status.allocation.nodeSelector of an allocated claim (None: reachable from every node).
    allocation: tuple[NodeSelectorTerm, ...] | None = None
    source: SourceRef = SourceRef("")


@dataclass
class Devices:
    """The DRA objects of an inventory."""

    classes: dict[str, DeviceClass] = field(default_factory=dict)
    devices: list[Device] = field(default_factory=list)
    claims: dict[tuple[str, str], Claim] = field(default_factory=dict)
    templates: dict[tuple[str, str], tuple[ClaimSpec, SourceRef]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.classes or self.devices or self.claims or self.templates)


# --- reading ---------------------------------------------------------------------------------------


def _name(obj: Any, at: str) -> str:
    if not isinstance(obj, str) or not obj:
        raise DraError(at, "is required and must be a string")
    return obj


def _selectors(raw: Any, at: str) -> tuple[str, ...]:
    out = []
    for i, item in enumerate(specs.seq(raw, at)):
        body = specs.mapping(item, f"{at}[{i}]")
        cel = specs.mapping(body.get("cel"), f"{at}[{i}].cel")
        out.append(_name(cel.get("expression"), f"{at}[{i}].cel.expression"))
    return tuple(out)


def _count(body: Mapping[str, Any], at: str) -> tuple[int, bool]:
    mode = str(body.get("allocationMode") or "ExactCount")
    if mode not in ("ExactCount", "All"):
        raise DraError(f"{at}.allocationMode", f"must be ExactCount or All, got {mode!r}")
    if mode == "All":
        return 1, True
    raw = body.get("count", 1)
    return specs.integer(raw, f"{at}.count", 1, MAX_COUNT), False


def _alternative(body: Mapping[str, Any], at: str) -> Alternative:
    count, every = _count(body, at)
    return Alternative(
        _name(body.get("deviceClassName"), f"{at}.deviceClassName"),
        _selectors(body.get("selectors"), f"{at}.selectors"),
        count,
        every,
    )


def parse_claim_spec(raw: Any, at: str) -> ClaimSpec:
    """A ResourceClaimSpec of any served version: v1/v1beta2 requests hold `exactly` or
    `firstAvailable`; v1beta1 ones the class and selectors themselves (or `firstAvailable`)."""
    spec = specs.mapping(raw, at)
    devices = specs.mapping(spec.get("devices"), f"{at}.devices")
    requests = []
    for i, item in enumerate(specs.seq(devices.get("requests"), f"{at}.devices.requests")):
        rat = f"{at}.devices.requests[{i}]"
        body = specs.mapping(item, rat)
        name = _name(body.get("name"), f"{rat}.name")
        alts: tuple[Alternative, ...]
        if isinstance(body.get("exactly"), Mapping):
            alts = (_alternative(body["exactly"], f"{rat}.exactly"),)
        elif body.get("firstAvailable") is not None:
            subs = specs.seq(body.get("firstAvailable"), f"{rat}.firstAvailable")
            alts = tuple(
                _alternative(specs.mapping(s, f"{rat}.firstAvailable[{j}]"), f"{rat}.firstAvailable[{j}]")
                for j, s in enumerate(subs)
            )
            if not alts:
                raise DraError(f"{rat}.firstAvailable", "must list at least one alternative")
        elif body.get("deviceClassName") is not None:  # v1beta1
            alts = (_alternative(body, rat),)
        else:
            raise DraError(rat, "must set exactly or firstAvailable")
        requests.append(Request(name, alts))
    constraints = bool(specs.seq(devices.get("constraints"), f"{at}.devices.constraints"))
    return ClaimSpec(tuple(requests), constraints)


def _terms(raw: Any, at: str) -> tuple[NodeSelectorTerm, ...]:
    body = specs.mapping(raw, at)
    return tuple(
        node_selector_term(specs.mapping(t, f"{at}.nodeSelectorTerms[{i}]"))
        for i, t in enumerate(specs.seq(body.get("nodeSelectorTerms"), f"{at}.nodeSelectorTerms"))
    )


def _reach(body: Mapping[str, Any], at: str) -> Reach | None:
    """Where `body` (a slice's spec, or a device with perDeviceNodeSelection) says its devices
    are reachable from; None when it sets none of the three."""
    if body.get("nodeName"):
        return Reach(node_name=str(body["nodeName"]))
    if body.get("nodeSelector") is not None:
        return Reach(selector=_terms(body["nodeSelector"], f"{at}.nodeSelector"))
    if body.get("allNodes"):
        return Reach(all_nodes=True)
    return None


def _attribute(raw: Any, at: str) -> Any:
    body = specs.mapping(raw, at)
    for kind in ("string", "int", "bool", "version"):
        if kind in body:
            value = body[kind]
            if kind == "int" and not isinstance(value, int):
                raise DraError(f"{at}.int", "must be an integer")
            if kind == "bool" and not isinstance(value, bool):
                raise DraError(f"{at}.bool", "must be true or false")
            return value if kind in ("int", "bool") else str(value)
    raise DraError(at, "must set one of string, int, bool, version")


def _qualified(key: str, driver: str) -> tuple[str, str]:
    domain, _, name = key.rpartition("/")
    return (domain or driver), name


def _device(raw: Any, at: str, driver: str, pool: str, reach: Reach | None, source: SourceRef) -> Device:
    body = specs.mapping(raw, at)
    name = _name(body.get("name"), f"{at}.name")
    inner = specs.mapping(body.get("basic"), f"{at}.basic") if body.get("basic") is not None else body
    bat = f"{at}.basic" if inner is not body else at
    attributes: dict[str, dict[str, Any]] = {}
    for key, value in specs.mapping(inner.get("attributes"), f"{bat}.attributes").items():
        domain, short = _qualified(str(key), driver)
        attributes.setdefault(domain, {})[short] = _attribute(value, f"{bat}.attributes.{key}")
    capacity: dict[str, dict[str, int]] = {}
    for key, value in specs.mapping(inner.get("capacity"), f"{bat}.capacity").items():
        domain, short = _qualified(str(key), driver)
        capacity.setdefault(domain, {})[short] = _quantity(value, f"{bat}.capacity.{key}")
    own = _reach(body, at)
    where = own or reach
    if where is None:
        raise DraError(at, "names no node: set nodeName, nodeSelector or allNodes")
    return Device(
        driver, pool, name, attributes, capacity, where, bool(body.get("allowMultipleAllocations")), source
    )


def _quantity(raw: Any, at: str) -> int:
    body = specs.mapping(raw, at)
    value = body.get("value")
    try:
        return _milli(value) if isinstance(value, str) else _milli_of(value)
    except ValueError as exc:
        raise DraError(f"{at}.value", str(exc)) from None


@lru_cache(maxsize=1024)
def _milli(text: str) -> int:
    """A quantity in thousandths (slices repeat a few capacities over thousands of devices)."""
    return _milli_of(text)


def _milli_of(value: Any) -> int:
    from auditor.placement.resources import milli_value, parse_quantity

    return milli_value(parse_quantity(value))


def parse_slice(obj: Mapping[str, Any], source: SourceRef) -> list[Device]:
    spec = specs.mapping(obj.get("spec"), "spec")
    driver = _name(spec.get("driver"), "spec.driver")
    pool = _name(specs.mapping(spec.get("pool"), "spec.pool").get("name"), "spec.pool.name")
    per_device = bool(spec.get("perDeviceNodeSelection"))
    reach = None if per_device else _reach(spec, "spec")
    if reach is None and not per_device:
        raise DraError("spec", "must set one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection")
    return [
        _device(d, f"spec.devices[{i}]", driver, pool, reach, source)
        for i, d in enumerate(specs.seq(spec.get("devices"), "spec.devices"))
    ]


def read(kind: str, obj: Mapping[str, Any], namespace: str, source: SourceRef, into: Devices) -> None:
    """Add one DRA object to `into` (DraError naming the field when it cannot be read)."""
    name = str(specs.mapping(obj.get("metadata"), "metadata").get("name"))
    if kind == "DeviceClass":
        spec = specs.mapping(obj.get("spec"), "spec")
        into.classes[name] = DeviceClass(name, _selectors(spec.get("selectors"), "spec.selectors"), source)
    elif kind == "ResourceSlice":
        into.devices.extend(parse_slice(obj, source))
    elif kind == "ResourceClaimTemplate":
        spec = specs.mapping(obj.get("spec"), "spec")
        into.templates[(namespace, name)] = (parse_claim_spec(spec.get("spec"), "spec.spec"), source)
    elif kind == "ResourceClaim":
        status = specs.mapping(obj.get("status"), "status")
        allocation = status.get("allocation")
        terms = None
        if isinstance(allocation, Mapping) and allocation.get("nodeSelector") is not None:
            terms = _terms(allocation["nodeSelector"], "status.allocation.nodeSelector")
        into.claims[(namespace, name)] = Claim(
            namespace,
            name,
            parse_claim_spec(obj.get("spec"), "spec"),
            isinstance(allocation, Mapping),
            terms,
            source,
        )


# --- where a pod's claims can be met ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bound:
    """What a pod template's claims say about where it lands."""

    allowed: frozenset[str]  # node names the DynamicResources filter passes
    why: Mapping[str, str]  # node name → why it fails (the first unmet request)
    one_zone: str = ""  # why every pod of the role lands in one zone ("": nothing says so)
    shared: tuple[str, ...] = ()  # names of the ResourceClaims its pods share
    notes: tuple[str, ...] = ()


class Matcher:
    """Which devices each (class, selectors) selects, each CEL expression compiled once and
    evaluated once per device; notes for selectors that could not be judged."""

    def __init__(self, devices: Devices) -> None:
        self.devices = devices
        self._compiled: dict[str, Any] = {}
        self._matching: dict[tuple[str, tuple[str, ...]], tuple[int, ...]] = {}
        self._by_node: dict[tuple[str, tuple[str, ...]], tuple[dict[str, int], tuple[Reach, ...]]] = {}
        self.notes: list[str] = []

    def _expression(self, source: str, owner: str) -> Any:
        if source in self._compiled:
            return self._compiled[source]
        from auditor.rules.cel_rules import CelError, compile_expression

        try:
            compiled: Any = compile_expression(source, ("device",), "bool", "devices")
        except CelError as exc:
            compiled = None
            self.notes.append(
                f"{owner}: selector {source!r} not evaluated ({exc}): every device counted as matching"
            )
        self._compiled[source] = compiled
        return compiled

    def matching(self, alt: Alternative, owner: str) -> tuple[int, ...]:
        """Indexes into devices.devices of the devices `alt` can take."""
        key = (alt.device_class, alt.selectors)
        found = self._matching.get(key)
        if found is not None:
            return found
        cls = self.devices.classes.get(alt.device_class)
        if cls is None:
            self._matching[key] = ()
            return ()
        from auditor.rules.cel_rules import CelError

        exprs = [
            e
            for e in (
                *(self._expression(s, f"DeviceClass {cls.name}") for s in cls.selectors),
                *(self._expression(s, owner) for s in alt.selectors),
            )
            if e is not None
        ]
        out = []
        failed = 0
        for i, d in enumerate(self.devices.devices):
            activation = d.activation()
            try:
                if all(e.evaluate(activation) for e in exprs):
                    out.append(i)
            except CelError:
                failed += 1
        if failed:
            self.notes.append(
                f"{owner}: a selector of DeviceClass {cls.name} fails on {failed} device(s) "
                "(a missing attribute?): the scheduler does not allocate those"
            )
        self._matching[key] = found = tuple(out)
        return found

    def available(self, alt: Alternative, owner: str, node: Node) -> int:
        """How many devices `alt` can take are reachable from `node`: node-local ones counted by
        node name once per alternative, the others (node selectors, allNodes) judged per node."""
        key = (alt.device_class, alt.selectors)
        split = self._by_node.get(key)
        if split is None:
            local: dict[str, int] = {}
            other: list[Reach] = []
            for i in self.matching(alt, owner):
                r = self.devices.devices[i].reach
                if r.node_name:
                    local[r.node_name] = local.get(r.node_name, 0) + 1
                else:
                    other.append(r)
            split = self._by_node[key] = (local, tuple(other))
        return split[0].get(node.name, 0) + sum(1 for r in split[1] if r.reaches(node))


def _requests_met(spec: ClaimSpec, owner: str, node: Node, matcher: Matcher) -> str:
    """Why `spec` cannot be met from `node` ("" when it can)."""
    for req in spec.requests:
        if not any(matcher.available(alt, owner, node) >= alt.count for alt in req.alternatives):
            classes = ", ".join(dict.fromkeys(a.device_class for a in req.alternatives))
            return f"no device for request {req.name} of {owner} (DeviceClass {classes}) reachable from it"
    return ""


def bound(
    template: PodTemplate,
    namespace: str,
    devices: Devices,
    nodes: Sequence[Node],
    zone_key: str,
    matcher: Matcher | None = None,
) -> Bound | None:
    """Where a pod of `template` (in `namespace`) can land by its claims; None without any."""
    if not template.resource_claims:
        return None
    m = matcher or Matcher(devices)
    why: dict[str, str] = {}
    notes: list[str] = []
    shared: list[str] = []
    one_zone = ""
    judged: list[tuple[str, ClaimSpec, Claim | None]] = []
    for ref, claim_name, template_name in template.resource_claims:
        if claim_name:
            claim = devices.claims.get((namespace, claim_name))
            shared.append(claim_name)
            if claim is None:
                notes.append(f"ResourceClaim {namespace}/{claim_name} (claim {ref}) is not among those read")
                continue
            judged.append((f"ResourceClaim {claim_name}", claim.spec, claim))
        else:
            found = devices.templates.get((namespace, template_name))
            if found is None:
                notes.append(
                    f"ResourceClaimTemplate {namespace}/{template_name} (claim {ref}) is not among those read"
                )
                continue
            judged.append((f"ResourceClaimTemplate {template_name}", found[0], None))
    if not judged:
        return Bound(frozenset(n.name for n in nodes), {}, "", tuple(shared), tuple(notes))
    allowed = []
    for node in nodes:
        reason = ""
        for owner, spec, claim in judged:
            if claim is not None and claim.allocated:
                if claim.allocation is not None and not any(_matches(t, node) for t in claim.allocation):
                    reason = f"{owner} is allocated to devices not reachable from it (status.allocation)"
                    break
                continue
            if node.provisioner:
                continue  # its devices are published once it is made
            reason = _requests_met(spec, owner, node, m)
            if reason:
                break
        if reason:
            why[node.name] = reason
        else:
            allowed.append(node)
    for owner, spec, claim in judged:
        if claim is None:
            continue
        zone = _one_zone(owner, spec, claim, allowed, m, zone_key)
        if zone:
            one_zone = zone
            break
    if any(s.constraints for _, s, _ in judged):
        notes.append("matchAttribute constraints between a claim's requests are not read")
    classes = {
        f"DeviceClass {a.device_class}" for _, s, _ in judged for r in s.requests for a in r.alternatives
    }
    owners = {o for o, _, _ in judged} | classes
    notes.extend(n for n in m.notes if n.split(":", 1)[0] in owners)
    return Bound(frozenset(n.name for n in allowed), why, one_zone, tuple(shared), tuple(notes))


def _matches(term: NodeSelectorTerm, node: Node) -> bool:
    from auditor.placement.filters import term_matches

    return term_matches(term, node)


def _one_zone(
    owner: str,
    spec: ClaimSpec,
    claim: Claim,
    allowed: Sequence[Node],
    matcher: Matcher,
    zone_key: str,
) -> str:
    """Why every pod sharing `claim` lands in one zone ("" when its allocation may span zones)."""
    if claim.allocated:
        zones = {z for n in allowed if (z := n.label_map.get(zone_key))}
        if len(zones) <= 1 and allowed:
            where = ", ".join(sorted(zones))
            return f"{owner} is allocated: every pod sharing it lands where its devices are ({where})"
        return ""
    for req in spec.requests:
        reachable_zones: set[str] = set()
        single = True
        for alt in req.alternatives:
            for i in matcher.matching(alt, owner):
                r = matcher.devices.devices[i].reach
                zones = {z for n in allowed if r.reaches(n) and (z := n.label_map.get(zone_key))}
                if len(zones) > 1:
                    single = False
                    break
                reachable_zones |= zones
            if not single:
                break
        if single and reachable_zones:
            return (
                f"{owner} is shared by every pod naming it, and each device its request {req.name} "
                "can take is reachable from one zone only: one allocation puts them all in that zone"
            )
    return ""


class Bounds:
    """`bound` per (namespace, template), worked out once per placement pass with one Matcher."""

    def __init__(self, devices: Devices, nodes: Sequence[Node], zone_key: str) -> None:
        self.devices, self.nodes, self.zone_key = devices, nodes, zone_key
        self.matcher = Matcher(devices)
        self._seen: dict[tuple[str, PodTemplate], Bound | None] = {}

    def of(self, namespace: str, template: PodTemplate) -> Bound | None:
        key = (namespace, template)
        if key not in self._seen:
            self._seen[key] = bound(
                template, namespace, self.devices, self.nodes, self.zone_key, self.matcher
            )
        return self._seen[key]

    def notes(self) -> list[str]:
        """Every note of the templates judged, then of the selectors, each once."""
        said = [n for b in self._seen.values() if b is not None for n in b.notes]
        return list(dict.fromkeys([*said, *self.matcher.notes]))
