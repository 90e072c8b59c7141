"""Service routing: whether traffic a role sends through a ClusterIP Service stays in its zone (pure).

kube-proxy (or a CNI replacing it) picks the endpoint of a ClusterIP Service per connection. By
default any ready endpoint in the cluster; three settings keep traffic close:

* ``spec.trafficDistribution: PreferClose`` (1.31+; ``PreferSameZone``, its 1.33 name, the same)
  and ``PreferSameNode`` (1.33+, falls back to the zone): the EndpointSlice controller gives every
  endpoint a hint for its own zone, and a client uses the endpoints hinted for its zone whenever
  there are some. Traffic crosses zones only from a zone where the destination has no pod.
* ``service.kubernetes.io/topology-mode: Auto`` (``service.kubernetes.io/topology-aware-hints:
  auto`` before 1.27): the same, but the controller sets hints only when the endpoints are many
  and spread enough over the zones (its safeguards); otherwise traffic goes anywhere. It may keep
  traffic in the zone, never certainly.
* ``spec.internalTrafficPolicy: Local``: only endpoints on the client's own node; with none there
  the connection is dropped, never sent to another node, so never to another zone.

Headless Services (``clusterIP: None``, most training rendezvous: the PyTorch master, the MPI
hostfile, JobSet and LeaderWorkerSet pod names) are not routed: their DNS names the pods, and the
client connects to the pod it named, wherever it is. None of this applies to them.

For a path the scan found through a Service (workloads/edges.py, ``CommEdge.via``), `routed`
turns the pair placement of its two ends into the zone pairs its traffic can take: with a zone
preference, a `likely` split of a destination with several pods becomes `possible` (it crosses
only if every destination pod lands outside the client's zone); observed pods give the exact
answer; ``Local`` keeps every flow in its zone. Costed `cross-zone-traffic` and the zone verdicts
of `cross-zone-blocked` follow from those pairs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from auditor.model.objects import Service

TRAFFIC_DISTRIBUTIONS = ("PreferClose", "PreferSameZone", "PreferSameNode")
TOPOLOGY_MODE = "service.kubernetes.io/topology-mode"
TOPOLOGY_HINTS = "service.kubernetes.io/topology-aware-hints"  # before Kubernetes 1.27


def topology_mode(annotations: Mapping[str, Any]) -> str:
    """``Auto`` when the annotations ask for topology-aware routing, else "" (the controller reads
    the new annotation first, then the old one; any other value, such as ``Disabled``, is off)."""
    for key in (TOPOLOGY_MODE, TOPOLOGY_HINTS):
        value = annotations.get(key)
        if value is not None:
            return "Auto" if str(value).lower() == "auto" else ""
    return ""


def routing(svc: Service) -> tuple[str, str]:
    """(kind, why) of a Service's routing: kind ``node`` (internalTrafficPolicy Local), ``zone``
    (trafficDistribution), ``hints`` (topology-mode Auto) or "" (any endpoint; headless)."""
    name = f"Service {svc.namespace}/{svc.name}"
    if svc.headless:
        return "", ""
    if svc.internal_traffic_policy == "Local":
        return "node", f"{name} has internalTrafficPolicy: Local: traffic stays on the client's node"
    if svc.traffic_distribution:
        return "zone", (
            f"{name} has trafficDistribution: {svc.traffic_distribution}: a client uses endpoints "
            "in its own zone when there are some"
        )
    if svc.topology_mode == "Auto":
        return "hints", (
            f"{name} has topology-mode Auto: topology-aware hints keep traffic in the client's zone "
            "when the controller sets them (enough endpoints in every zone)"
        )
    return "", ""


def routed_pairs(
    pairs: tuple[tuple[str, str], ...], kind: str, destination_zones: frozenset[str] | None
) -> tuple[tuple[str, str], ...]:
    """The zone pairs traffic takes. `destination_zones`: the zones the destination has pods in
    for certain (observed pods), or None when they are only possible (placement)."""
    if kind == "node":
        same = tuple(p for p in pairs if p[0] == p[1])
        return same or pairs  # no zone the two can share: nothing stays local, keep what was found
    if kind == "zone" and destination_zones is not None:
        return tuple(p for p in pairs if p[0] == p[1] or p[0] not in destination_zones)
    return pairs


def routed_split(split: str | None, kind: str, destination_replicas: int, single_zone: bool) -> str | None:
    """The split of a routed path whose pairs are only possible (placement, not observed): a
    zone preference makes a `likely` split `possible` when the destination has several pods that
    may cover the client's zone; one pod, or pods kept in one zone, are reached where they are."""
    if kind in ("zone", "hints") and split == "likely" and destination_replicas > 1 and not single_zone:
        return "possible"
    return split
