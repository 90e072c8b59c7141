"""Object builders both synthetic worlds write the same way (gen_repo.py's manifests,
world.cluster's live objects, world.netpol's policies): the required zone node affinity and the
NetworkPolicy envelope with the DNS egress rule every default-deny namespace needs."""

from __future__ import annotations

from typing import Any

from world.vocabulary import ZONE_KEY

Obj = dict[str, Any]

DNS_EGRESS: Obj = {
    "to": [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ],
    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
}


def zone_node_affinity(zone: str) -> Obj:
    """nodeAffinity that requires the node's zone label to be `zone`."""
    return {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": ZONE_KEY, "operator": "In", "values": [zone]}]}
            ]
        }
    }


def network_policy(name: str, namespace: str, spec: Obj) -> Obj:
    """A networking.k8s.io/v1 NetworkPolicy."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
