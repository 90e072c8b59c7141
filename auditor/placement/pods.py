"""Pod endpoints for workload roles: the labels a pod carries once it lands in a zone."""

from __future__ import annotations

from collections.abc import Sequence

from auditor.model.objects import Labels, Node, Role, freeze_labels
from auditor.placement.filters import feasible_nodes
from auditor.reachability.endpoints import PodEndpoint, parse_ip


def pod_endpoint(
    role: Role,
    namespace_labels: Labels,
    zone: str | None,
    node: Node | None,
    pod_zone_labels: Sequence[tuple[str, str]],
    zone_key: str,
    name: str | None = None,
) -> PodEndpoint:
    """A replica of `role` placed on `node` (or somewhere in `zone` when the node is not known).

    Labels copied from the node at binding (PodTopologyLabels admission, zone-label webhooks)
    overwrite the template's values, so a verdict can depend on the zone.
    """
    labels = dict(role.template.labels)
    node_labels = node.label_map if node is not None else ({zone_key: zone} if zone else {})
    for pod_key, node_key in pod_zone_labels:
        if node_key in node_labels:
            labels[pod_key] = node_labels[node_key]
    ips = tuple(parse_ip(ip) for ip in role.template.pod_ips)
    return PodEndpoint(
        namespace=role.workload.namespace,
        name=name or str(role),
        labels=freeze_labels(labels),
        namespace_labels=namespace_labels,
        service_account=role.template.service_account,
        named_ports=role.template.named_ports,
        ips=ips,
        node=node.name if node is not None else None,
        zone=zone,
        host_network=role.template.host_network,
        node_labels=node.labels if node is not None else (),
    )


def representative_node(
    role: Role,
    nodes: Sequence[Node],
    zone: str | None,
    zone_key: str,
    feasible: Sequence[str] | None = None,
) -> Node | None:
    """The node the pod is bound to, else a feasible node in `zone` (for its region/zone labels):
    one of `feasible` (the nodes `place_roles` left it) when given, else of the node filters'."""
    if role.template.node_name:
        return next((n for n in nodes if n.name == role.template.node_name), None)
    if feasible is not None:
        allowed = set(feasible)
        candidates = [n for n in nodes if n.name in allowed]
    else:
        candidates = feasible_nodes(role.template, nodes)
    return next((n for n in candidates if zone is None or n.label_map.get(zone_key) == zone), None)
