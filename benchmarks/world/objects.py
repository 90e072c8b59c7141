"""Object builders both synthetic worlds write the same way (gen_repo.py's manifests,
world.cluster's live objects, world.netpol's policies): the object envelope and its metadata,
Namespaces, ConfigMaps, Service ports, container env, the required zone node affinity and the
NetworkPolicy envelope with the DNS egress rule every default-deny namespace needs.

They build manifests as a team writes them; world.cluster adds what the API server and the
controllers add (uid, resourceVersion, defaults, status) around them."""

from __future__ import annotations

from typing import Any

from world.vocabulary import ZONE_KEY

Obj = dict[str, Any]
ServicePort = tuple[int, str, str, "int | str"]  # port, name, protocol, targetPort

DNS_EGRESS: Obj = {
    "to": [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ],
    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
}

# CoreDNS's container ports and the kube-dns Service's ports.
COREDNS_PORTS = [(53, "dns", "UDP"), (53, "dns-tcp", "TCP"), (9153, "metrics", "TCP")]
KUBE_DNS_PORTS: list[ServicePort] = [(53, "dns", "UDP", 53), (53, "dns-tcp", "TCP", 53)]


def metadata(name: str, namespace: str | None = None, **extra: Any) -> Obj:
    """metadata: the name, the namespace (if namespaced), then the non-empty `extra` fields."""
    meta: Obj = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta.update({k: v for k, v in extra.items() if v})
    return meta


def manifest(api_version: str, kind: str, meta: Obj, **body: Any) -> Obj:
    """An object: apiVersion, kind, metadata, then `body`'s fields (spec, data, ...) in order."""
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, **body}


def namespace(name: str, labels: dict[str, str], annotations: dict[str, str] | None = None) -> Obj:
    """A Namespace carrying `kubernetes.io/metadata.name` before its own labels."""
    meta = metadata(name, labels={"kubernetes.io/metadata.name": name, **labels}, annotations=annotations)
    return manifest("v1", "Namespace", meta)


def config_map(name: str, namespace: str, data: dict[str, str], labels: dict[str, str] | None = None) -> Obj:
    return manifest("v1", "ConfigMap", metadata(name, namespace, labels=labels), data=data)


def service_ports(ports: list[ServicePort]) -> list[Obj]:
    """Service ports from (port, name, protocol, targetPort); a numeric string target is a number."""
    return [
        {
            "name": name,
            "port": port,
            "protocol": protocol,
            "targetPort": int(target) if isinstance(target, str) and target.isdigit() else target,
        }
        for port, name, protocol, target in ports
    ]


def env_values(*pairs: tuple[str, str]) -> list[Obj]:
    """A container's env of plain values."""
    return [{"name": k, "value": v} for k, v in pairs]


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
    return manifest("networking.k8s.io/v1", "NetworkPolicy", metadata(name, namespace), spec=spec)


def cilium_policy(name: str, namespace: str | None, spec: Obj, labels: dict[str, str] | None = None) -> Obj:
    """A CiliumNetworkPolicy, or without a namespace a CiliumClusterwideNetworkPolicy."""
    kind = "CiliumNetworkPolicy" if namespace else "CiliumClusterwideNetworkPolicy"
    return manifest("cilium.io/v2", kind, metadata(name, namespace, labels=labels), spec=spec)
