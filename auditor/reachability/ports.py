"""Sets of connections: per protocol, a set of destination-port intervals.

Rules name ports one by one, as ranges (`endPort`, `portRange`, Calico `a:b`), by name, or not at
all (every port). Verdicts are therefore sets, not booleans: "TCP 1-8079,8081-65535". A set is a
sorted tuple of disjoint, non-adjacent inclusive intervals, so equal sets compare equal.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping

from auditor.model.values import value

MIN_PORT = 1
MAX_PORT = 65535
# The protocols a Kubernetes Service or NetworkPolicy can name. Cilium's "ANY" means these three.
PROTOCOLS: tuple[str, ...] = ("TCP", "UDP", "SCTP")

Interval = tuple[int, int]


def _normalise(intervals: Iterable[Interval]) -> tuple[Interval, ...]:
    merged: list[list[int]] = []
    for lo, hi in sorted(intervals):
        if lo > hi:
            continue
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return tuple((lo, hi) for lo, hi in merged)


@value(frozen=True)
class PortSet:
    """A set of ports, as sorted disjoint inclusive intervals within 1..65535."""

    intervals: tuple[Interval, ...] = ()

    @staticmethod
    def of(*intervals: Interval) -> PortSet:
        return PortSet(_normalise((max(lo, MIN_PORT), min(hi, MAX_PORT)) for lo, hi in intervals))

    @staticmethod
    def all() -> PortSet:
        return _ALL_PORTS

    @staticmethod
    def single(port: int) -> PortSet:
        return PortSet.of((port, port))

    def __bool__(self) -> bool:
        return bool(self.intervals)

    def is_all(self) -> bool:
        return self.intervals == _ALL_PORTS.intervals

    def __contains__(self, port: object) -> bool:
        return isinstance(port, int) and any(lo <= port <= hi for lo, hi in self.intervals)

    def __or__(self, other: PortSet) -> PortSet:
        if not other.intervals:
            return self
        if not self.intervals:
            return other
        return PortSet(_normalise(self.intervals + other.intervals))

    def __and__(self, other: PortSet) -> PortSet:
        out: list[Interval] = []
        i = j = 0
        a, b = self.intervals, other.intervals
        while i < len(a) and j < len(b):
            lo = max(a[i][0], b[j][0])
            hi = min(a[i][1], b[j][1])
            if lo <= hi:
                out.append((lo, hi))
            if a[i][1] < b[j][1]:
                i += 1
            else:
                j += 1
        return PortSet(tuple(out))

    def complement(self) -> PortSet:
        out: list[Interval] = []
        nxt = MIN_PORT
        for lo, hi in self.intervals:
            if lo > nxt:
                out.append((nxt, lo - 1))
            nxt = hi + 1
        if nxt <= MAX_PORT:
            out.append((nxt, MAX_PORT))
        return PortSet(tuple(out))

    def __sub__(self, other: PortSet) -> PortSet:
        if not other.intervals or not self.intervals:
            return self
        return self & other.complement()

    def __len__(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.intervals)

    def __str__(self) -> str:
        return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in self.intervals)


_ALL_PORTS = PortSet(((MIN_PORT, MAX_PORT),))
_NO_PORTS = PortSet(())


@value(frozen=True)
class ConnSet:
    """Connections as protocol → ports. Protocols with no ports are left out, so equality works."""

    by_protocol: tuple[tuple[str, PortSet], ...] = ()

    @staticmethod
    def from_mapping(mapping: Mapping[str, PortSet]) -> ConnSet:
        return ConnSet(tuple((p, mapping[p]) for p in sorted(mapping) if mapping[p]))

    @staticmethod
    def all() -> ConnSet:
        return _ALL_CONNS

    @staticmethod
    def none() -> ConnSet:
        return _NO_CONNS

    @staticmethod
    def of(protocol: str, ports: PortSet | None = None) -> ConnSet:
        return ConnSet.from_mapping({protocol.upper(): ports if ports is not None else PortSet.all()})

    @staticmethod
    def single(protocol: str, port: int) -> ConnSet:
        return ConnSet.of(protocol, PortSet.single(port))

    def ports(self, protocol: str) -> PortSet:
        for proto, ports in self.by_protocol:
            if proto == protocol:
                return ports
        return _NO_PORTS

    def __bool__(self) -> bool:
        return bool(self.by_protocol)

    def is_all(self) -> bool:
        return self == _ALL_CONNS

    def contains(self, protocol: str, port: int) -> bool:
        return port in self.ports(protocol.upper())

    def _combine(self, other: ConnSet, op: Callable[[PortSet, PortSet], PortSet]) -> ConnSet:
        mine, theirs = dict(self.by_protocol), dict(other.by_protocol)
        return ConnSet.from_mapping(
            {p: op(mine.get(p, _NO_PORTS), theirs.get(p, _NO_PORTS)) for p in mine.keys() | theirs.keys()}
        )

    def __or__(self, other: ConnSet) -> ConnSet:
        if not other:
            return self
        if not self:
            return other
        return self._combine(other, operator.or_)

    def __and__(self, other: ConnSet) -> ConnSet:
        if not self or not other:
            return _NO_CONNS
        if other.is_all():
            return self
        if self.is_all():
            return other
        return self._combine(other, operator.and_)

    def __sub__(self, other: ConnSet) -> ConnSet:
        if not other or not self:
            return self
        if other.is_all():
            return _NO_CONNS
        return self._combine(other, operator.sub)

    def __str__(self) -> str:
        if self.is_all():
            return "All Connections"
        if not self:
            return "No Connections"
        return "; ".join(proto if ports.is_all() else f"{proto} {ports}" for proto, ports in self.by_protocol)


_ALL_CONNS = ConnSet(tuple((p, _ALL_PORTS) for p in sorted(PROTOCOLS)))
_NO_CONNS = ConnSet(())


def normalise_protocol(value: object) -> str | None:
    """`tcp`/`TCP` → `TCP`; None for anything that is not one of the three policy protocols."""
    if not isinstance(value, str):
        return None
    upper = value.upper()
    return upper if upper in PROTOCOLS else None
