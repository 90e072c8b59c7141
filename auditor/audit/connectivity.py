"""The connectivity map: who can reach whom, per namespace × zone, on one probe (by default the
ephemeral TCP range that NCCL/Gloo all-reduce and MPI data use), from the class matrix of the
policy engine (reachability/matrix.py). Pure once the inventory is loaded.

Every workload role is placed as the audit places it (scheduler filters) and stands, in each zone
it can land in, for one endpoint whose labels are the ones copied onto the pod at binding (the
zone label, when PodTopologyLabels or a webhook copies it). Endpoints that policy cannot tell apart
collapse into one *class* (identity). For each ordered pair of cells (namespace, zone) the map counts
the class pairs and how many of them the policies allow on every port of the probe, both directions
(source egress and destination ingress): `open` when all are, `closed` when none is, else `partial`.

The count needs no pod-pair loop: the egress verdict depends only on the source's row and the
destination, the ingress verdict only on the destination's row and the source, so for sources S
sharing an egress row e and destinations D sharing an ingress row i the allowed pairs are
|e ∩ D| · |i ∩ S| — bit counts over rows, cells × rows², not classes².
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from auditor.inventory import Inventory, policy_engine, role_endpoint
from auditor.reachability.endpoints import PodEndpoint
from auditor.reachability.matrix import ClassMatrix
from auditor.reachability.policy import Direction
from auditor.rules.model import RoleEndpoints, place_inventory_roles
from auditor.workloads.dataports import LINUX_EPHEMERAL

UNKNOWN_ZONE = ""  # no Node objects: every role in one cell per namespace


@dataclass(frozen=True, slots=True, order=True)
class Cell:
    namespace: str
    zone: str


@dataclass(frozen=True, slots=True)
class CellInfo:
    cell: Cell
    pods: int  # replicas of the roles that can land here (a role counts in every zone it can land in)
    roles: int
    classes: int


@dataclass(frozen=True, slots=True)
class CellPair:
    source: Cell
    destination: Cell
    class_pairs: int
    allowed: int  # class pairs allowed on every port of the probe

    @property
    def state(self) -> str:
        if self.allowed == self.class_pairs:
            return "open"
        return "closed" if self.allowed == 0 else "partial"


@dataclass(frozen=True, slots=True)
class ConnectivityMap:
    protocol: str
    ports: tuple[int, int]
    cells: tuple[CellInfo, ...]
    pairs: tuple[CellPair, ...]
    notes: tuple[str, ...]


def connectivity(
    inv: Inventory, protocol: str = "TCP", ports: tuple[int, int] = LINUX_EPHEMERAL
) -> ConnectivityMap:
    roles = [r for w in inv.workloads for r in w.roles]
    notes: list[str] = []
    endpoints: list[PodEndpoint] = []
    cells: list[Cell] = []
    replicas: list[int] = []
    if inv.nodes:
        placements = place_inventory_roles(inv, roles)  # as the scan places them
        role_endpoints = RoleEndpoints(inv)
        unschedulable = 0
        for role in roles:
            placement = placements[role]
            unschedulable += placement.unschedulable
            for zone in placement.zones:
                endpoints.append(role_endpoints.get(role, zone, placement))
                cells.append(Cell(role.workload.namespace, zone))
                replicas.append(role.replicas)
        if unschedulable:
            notes.append(f"{unschedulable} role(s) can land on no node and are not in the map")
    else:
        notes.append("no Node objects: zones are unknown, so the map is per namespace only (add --nodes)")
        for role in roles:
            endpoints.append(role_endpoint(inv, role, None, None))
            cells.append(Cell(role.workload.namespace, UNKNOWN_ZONE))
            replicas.append(role.replicas)
    pods: Counter[Cell] = Counter()
    for cell, n in zip(cells, replicas, strict=True):
        pods[cell] += n
    role_count = Counter(cells)
    if not endpoints:
        return ConnectivityMap(protocol, ports, (), (), tuple(notes))

    matrix = ClassMatrix(policy_engine(inv), endpoints)
    lo, hi = ports
    members: dict[Cell, int] = {}  # identities present in the cell, as a bitset
    for i, cell in enumerate(cells):
        members[cell] = members.get(cell, 0) | (1 << matrix.pod_identity[i])
    egress = [row.bits_over(protocol, lo, hi) for row in matrix.row_of[Direction.EGRESS]]
    ingress = [row.bits_over(protocol, lo, hi) for row in matrix.row_of[Direction.INGRESS]]
    sources = {c: _by_row(bits, egress) for c, bits in members.items()}
    destinations = {c: _by_row(bits, ingress) for c, bits in members.items()}
    ordered = sorted(members)
    pairs = []
    for a in ordered:
        size_a = members[a].bit_count()
        for b in ordered:
            allowed = sum(
                (e & d).bit_count() * (i & s).bit_count()
                for e, s in sources[a].items()
                for i, d in destinations[b].items()
            )
            pairs.append(CellPair(a, b, size_a * members[b].bit_count(), allowed))
    infos = tuple(CellInfo(c, pods[c], role_count[c], members[c].bit_count()) for c in ordered)
    return ConnectivityMap(protocol, ports, infos, tuple(pairs), tuple(notes))


def _by_row(identities: int, rows: list[int]) -> dict[int, int]:
    """The identities of a cell grouped by their row (allowed peers on the probe): row → members."""
    out: dict[int, int] = {}
    while identities:
        low = identities & -identities
        i = low.bit_length() - 1
        out[rows[i]] = out.get(rows[i], 0) | low
        identities ^= low
    return out
