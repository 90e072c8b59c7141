"""Kubernetes resource quantities, pod requests and the NodeResourcesFit filter (pure).

* `parse_quantity` reads a `resource.Quantity` string ("500m", "1.5Gi", "1e3", "2") exactly as a
  `Fraction`, with apimachinery's rules: decimal SI suffixes n u m k M G T P E, binary Ki..Ei,
  exponents e<n>/E<n>; non-zero values are rounded up to the nano, SI values are capped at the
  int64 maximum; anything else raises `ValueError` naming the text.
* `pod_requests` is kube-scheduler's effective pod request, summed once when the template is read
  (workloads/podspec.py): app containers and running sidecars, raised to the largest init container,
  pod-level requests replacing cpu/memory/hugepages, plus `spec.overhead`.
* `insufficient_resources` / `fits` compare it with node allocatable minus what the pods already on
  the node request (cpu in milli-units, everything else in whole units, each rounded up as the
  scheduler's `MilliValue()`/`Value()` do). Each pod also takes one `pods` slot.

Where the node's data is partial (hand-written or trimmed Node objects), unknown means fitting: a node
without allocatable data fits, and a cpu/memory/ephemeral-storage/pods entry missing from allocatable
is not checked. Extended and other scalar resources (`nvidia.com/gpu`, `hugepages-2Mi`) missing from
allocatable count as 0, as in kube-scheduler, so a GPU pod does not fit a node without GPUs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from auditor.model.objects import Node, PodTemplate

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
HUGEPAGES_PREFIX = "hugepages-"
# The resources the scheduler tracks in fields of its own; the rest are "scalar" resources.
_FIXED = (CPU, MEMORY, EPHEMERAL_STORAGE)

_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_MAX_INT64 = 2**63 - 1
# apimachinery accepts any int exponent; bounding it keeps exact arithmetic cheap on hostile input.
_MAX_EXPONENT = 1000
_NANO = Fraction(1, 10**9)


def parse_quantity(text: Any) -> Fraction:
    """The exact value of a Kubernetes quantity; `ValueError` naming the text when it is not one."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise ValueError(f"invalid quantity {text!r}: must be a string or number")
    return _parse(str(text))  # YAML gives `cpu: 2` or `cpu: 0.5` as numbers


# Filters parse the same few quantities for every node a role is tried on; remember them.
@functools.lru_cache(maxsize=4096)
def _parse(raw: str) -> Fraction:
    s = raw
    sign = 1
    if s[:1] in ("+", "-"):
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    i = 0
    while i < len(s) and s[i].isascii() and s[i].isdigit():
        i += 1
    whole = s[:i]
    frac = ""
    if i < len(s) and s[i] == ".":
        j = i + 1
        while j < len(s) and s[j].isascii() and s[j].isdigit():
            j += 1
        frac = s[i + 1 : j]
        i = j
    suffix = s[i:]
    if not whole and not frac:
        raise ValueError(f"invalid quantity {raw!r}: no digits")
    number = Fraction(int(whole or "0")) + (Fraction(int(frac), 10 ** len(frac)) if frac else 0)
    capped = True
    if suffix in _DECIMAL_SUFFIXES:
        value = number * Fraction(10) ** _DECIMAL_SUFFIXES[suffix]
    elif suffix in _BINARY_SUFFIXES:
        value = number * 2 ** _BINARY_SUFFIXES[suffix]
    elif len(suffix) > 1 and suffix[0] in "eE" and _is_int(suffix[1:]):
        exponent = int(suffix[1:])
        if abs(exponent) > _MAX_EXPONENT:
            raise ValueError(f"invalid quantity {raw!r}: exponent out of range")
        value = number * Fraction(10) ** exponent
        capped = False  # apimachinery caps DecimalSI/BinarySI values only
    else:
        raise ValueError(f"invalid quantity {raw!r}: unknown suffix {suffix!r}")
    # Any non-zero amount is rounded up to the smallest unit (1n): asking for a little gets a little.
    if value and value.denominator != 1:
        value = Fraction(math.ceil(value / _NANO)) * _NANO
    if capped and value > _MAX_INT64:
        value = Fraction(_MAX_INT64)
    return sign * value


def _is_int(s: str) -> bool:
    digits = s[1:] if s[:1] in ("+", "-") else s
    return bool(digits) and digits.isascii() and digits.isdigit()


def milli_value(q: Fraction) -> int:
    """The value in milli-units rounded up, as `Quantity.MilliValue()` (used for cpu)."""
    return math.ceil(q * 1000)


def whole_value(q: Fraction) -> int:
    """The value rounded up to a whole unit, as `Quantity.Value()` (memory, GPUs, pods...)."""
    return math.ceil(q)


def scheduler_units(resource: str, q: Fraction) -> int:
    """The integer the scheduler compares for `resource`: milli-cpu, otherwise whole units."""
    return milli_value(q) if resource == CPU else whole_value(q)


def is_scalar_resource(name: str) -> bool:
    """Whether kube-scheduler checks `name` as a scalar resource (extended, hugepages, prefixed native).

    Names without a domain other than cpu/memory/ephemeral-storage/pods/hugepages are not resources the
    scheduler knows, and it ignores them.
    """
    if name.startswith((HUGEPAGES_PREFIX, "attachable-volumes-")):
        return True
    return "/" in name and not name.startswith("requests.")


def is_extended_resource(name: str) -> bool:
    """apimachinery's IsExtendedResourceName: a domain-qualified name outside `kubernetes.io/`
    (`nvidia.com/gpu`), not a quota `requests.` name."""
    prefix, slash, _ = name.partition("/")
    if not slash or prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io"):
        return False
    return not name.startswith("requests.")


def extended_resources(template: PodTemplate) -> frozenset[str]:
    """The extended resources any container of the pod requests (what ExtendedResourceToleration reads)."""
    return frozenset(
        name for container in template.requests for name, _ in container if is_extended_resource(name)
    )


ResourceList = dict[str, Fraction]


def pod_requests(template: PodTemplate) -> ResourceList:
    """The pod's effective requests (`PodTemplate.pod_requests`, summed when the template was
    read, workloads/podspec.py); `ValueError` naming the field of a quantity that does not parse."""
    if template.pod_requests.error is not None:
        raise ValueError(template.pod_requests.error)
    return dict(template.pod_requests.amounts)


@dataclass(frozen=True, slots=True)
class Insufficient:
    """One resource the node cannot give the pod, in scheduler units (milli-cpu, else whole units)."""

    resource: str
    requested: int
    used: int
    capacity: int

    @property
    def reason(self) -> str:
        return "Too many pods" if self.resource == PODS else f"Insufficient {self.resource}"

    @property
    def unresolvable(self) -> bool:
        """The node could not fit the pod even if it were empty (kube-scheduler: no preemption helps)."""
        return self.resource != PODS and self.requested > self.capacity


def _allocatable(node: Node) -> dict[str, int]:
    try:
        return dict(_allocatable_units(node.allocatable))
    except ValueError as e:
        raise ValueError(f"node {node.name} status.allocatable.{e}") from None


@functools.lru_cache(maxsize=1024)
def _allocatable_units(allocatable: tuple[tuple[str, str], ...]) -> tuple[tuple[str, int], ...]:
    out: list[tuple[str, int]] = []
    for name, quantity in allocatable:
        try:
            out.append((name, scheduler_units(name, parse_quantity(quantity))))
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
    return tuple(out)


@functools.lru_cache(maxsize=1024)
def _allocatable_map(allocatable: tuple[tuple[str, str], ...]) -> Mapping[str, int] | None:
    """`_allocatable_units` as a mapping (never changed: it is shared), None for a bad quantity."""
    try:
        return dict(_allocatable_units(allocatable))
    except ValueError:
        return None


def _in_units(requests: Mapping[str, Fraction]) -> dict[str, int]:
    return {k: scheduler_units(k, v) for k, v in requests.items()}


# A scan filters each distinct pod template against every node: compute its requests once. Keyed
# by identity (cheaper than hashing the template), holding the template so the id cannot be
# reused while the entry lives.
_UNITS: dict[int, tuple[PodTemplate, dict[str, int]]] = {}


def _units_of(template: PodTemplate) -> dict[str, int]:
    found = _UNITS.get(id(template))
    if found is None or found[0] is not template:
        if len(_UNITS) > 100_000:
            _UNITS.clear()
        found = _UNITS[id(template)] = (template, _in_units(pod_requests(template)))
    return found[1]


def insufficient_resources(
    template: PodTemplate, node: Node, existing: Iterable[PodTemplate] = ()
) -> list[Insufficient]:
    """Every resource the node lacks for the pod, in kube-scheduler's order (pods, cpu, memory,
    ephemeral-storage, then scalar resources by name). `existing` are the pods already on the node.

    Raises `ValueError` for a quantity that does not parse.
    """
    if not node.allocatable:
        return []  # nothing known about the node's capacity: assume it fits
    allocatable = _allocatable(node)
    want = _units_of(template)
    used: dict[str, int] = {}
    count = 0
    for pod in existing:
        count += 1
        for k, v in _in_units(pod_requests(pod)).items():
            used[k] = used.get(k, 0) + v
    out: list[Insufficient] = []
    if PODS in allocatable and count + 1 > allocatable[PODS]:
        out.append(Insufficient(PODS, 1, count, allocatable[PODS]))
    for name, requested, capacity in _checked(want, allocatable):
        if requested > capacity - used.get(name, 0):
            out.append(Insufficient(name, requested, used.get(name, 0), capacity))
    return out


def _checked(want: Mapping[str, int], allocatable: Mapping[str, int]) -> Iterator[tuple[str, int, int]]:
    """(resource, requested, allocatable) of every resource the filter checks, in its order:
    cpu, memory and ephemeral-storage when the node reports them, then scalar resources by name
    (an extended resource the node lacks is 0)."""
    for name in _FIXED:
        requested = want.get(name, 0)
        if requested > 0 and name in allocatable:
            yield name, requested, allocatable[name]
    for name in sorted(want):
        requested = want[name]
        if name not in _FIXED and requested > 0 and is_scalar_resource(name):
            yield name, requested, allocatable.get(name, 0)


def pods_per_node(template: PodTemplate, allocatable: tuple[tuple[str, str], ...]) -> tuple[int, str] | None:
    """How many pods of `template` one empty node with this `allocatable` holds at most, and the
    resource that bounds it: NodeResourcesFit applied pod after pod (`pods` slots, then each
    requested resource's allocatable over the pod's request, as `insufficient_resources` checks
    them). None when nothing bounds it: no allocatable data, or requests that do not parse (the
    resource filter reports those)."""
    if not allocatable or template.pod_requests.error is not None:
        return None
    have = _allocatable_map(allocatable)
    if have is None:
        return None
    bounds = [
        (capacity // requested, name) for name, requested, capacity in _checked(_units_of(template), have)
    ]
    if PODS in have:
        bounds.append((have[PODS], PODS))
    return min(bounds) if bounds else None


def fits(template: PodTemplate, node: Node, existing: Iterable[PodTemplate] = ()) -> str | None:
    """None when the pod fits the node, else the first reason ("Insufficient nvidia.com/gpu")."""
    missing = insufficient_resources(template, node, existing)
    return missing[0].reason if missing else None
