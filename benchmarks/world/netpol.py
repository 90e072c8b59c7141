"""Synthetic clusters for benchmarks: namespaces, pods with realistic label sets, and
NetworkPolicies (optionally Cilium policies) of the shapes platform teams write.

Deterministic for a seed. Objects are plain dicts as `kubectl get -o yaml` would show them, so
they can be written as YAML for other tools or fed to our inventory directly.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from world.objects import DNS_EGRESS, cilium_policy, namespace, network_policy

TIERS = ("frontend", "backend", "db", "cache", "worker")
TEAMS = ("payments", "search", "ml", "platform", "data", "web", "infra", "risk")
ENVS = ("prod", "staging", "dev")
PODS_PER_NAMESPACE = 300
APPS_PER_NAMESPACE = 12
PLATFORM_NAMESPACES = ("kube-system", "monitoring", "ingress-nginx")


def make_namespaces(count: int, rng: random.Random) -> list[dict[str, Any]]:
    """`count` app namespaces `ns-0000`... of random teams and envs, then the platform ones."""
    out = [
        namespace(f"ns-{i:04d}", {"team": rng.choice(TEAMS), "env": rng.choice(ENVS)}) for i in range(count)
    ]
    return out + [namespace(name, {"team": "platform"}) for name in PLATFORM_NAMESPACES]


def _pods(namespaces: list[str], total: int, rng: random.Random) -> Iterator[dict[str, Any]]:
    per_ns = max(1, total // len(namespaces))
    made = 0
    for n, ns in enumerate(namespaces):
        count = per_ns if n < len(namespaces) - 1 else total - made
        apps = max(1, min(APPS_PER_NAMESPACE, count // 5 or 1))
        for i in range(count):
            app = i % apps
            tier = TIERS[app % len(TIERS)]
            labels = {
                "app": f"app-{app}",
                "tier": tier,
                "version": f"v{rng.randint(1, 3)}",
                "pod-template-hash": f"{n:04x}{app:02x}{rng.randint(0, 3):x}",
            }
            if tier == "db":
                labels["statefulset.kubernetes.io/pod-name"] = f"app-{app}-{i}"
            ports = [
                {"name": "http", "containerPort": 8080, "protocol": "TCP"},
                {"name": "metrics", "containerPort": 9090 + (app % 3), "protocol": "TCP"},
            ]
            if tier == "db":
                ports.append({"name": "postgres", "containerPort": 5432, "protocol": "TCP"})
            made += 1
            yield {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"app-{app}-{i}", "namespace": ns, "labels": labels},
                "spec": {"containers": [{"name": "main", "image": "registry.example/app:1", "ports": ports}]},
                "status": {"podIP": f"10.{(made >> 16) & 255}.{(made >> 8) & 255}.{made & 255}"},
            }


def network_policies(ns: str, index: int, count: int, rng: random.Random) -> Iterator[dict[str, Any]]:
    """`count` NetworkPolicies for one namespace, cycling through common shapes."""
    shapes = [
        lambda k: network_policy(
            f"default-deny-{k}", ns, {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
        ),
        lambda k: network_policy(
            f"allow-dns-{k}",
            ns,
            {
                "podSelector": {},
                "policyTypes": ["Egress"],
                "egress": [copy.deepcopy(DNS_EGRESS)],  # a copy: YAML would write an alias
            },
        ),
        lambda k: network_policy(
            f"frontend-from-ingress-{k}",
            ns,
            {
                "podSelector": {"matchLabels": {"tier": "frontend"}},
                "ingress": [
                    {
                        "from": [
                            {
                                "namespaceSelector": {
                                    "matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}
                                }
                            }
                        ],
                        "ports": [{"port": "http"}, {"port": 443}],
                    }
                ],
            },
        ),
        lambda k: network_policy(
            f"backend-from-frontend-{k}",
            ns,
            {
                "podSelector": {"matchLabels": {"tier": "backend"}},
                "ingress": [
                    {
                        "from": [{"podSelector": {"matchLabels": {"tier": "frontend"}}}],
                        "ports": [{"port": 8080}],
                    }
                ],
            },
        ),
        lambda k: network_policy(
            f"db-from-backend-{k}",
            ns,
            {
                "podSelector": {"matchLabels": {"tier": "db"}},
                "ingress": [
                    {
                        "from": [
                            {
                                "podSelector": {
                                    "matchExpressions": [
                                        {"key": "tier", "operator": "In", "values": ["backend", "worker"]}
                                    ]
                                }
                            }
                        ],
                        "ports": [{"port": "postgres"}],
                    }
                ],
            },
        ),
        lambda k: network_policy(
            f"metrics-{k}",
            ns,
            {
                "podSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
                "ingress": [
                    {
                        "from": [
                            {
                                "namespaceSelector": {
                                    "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}
                                },
                                "podSelector": {"matchLabels": {"app": "prometheus"}},
                            }
                        ],
                        "ports": [{"port": "metrics"}],
                    }
                ],
            },
        ),
        lambda k: network_policy(
            f"app-egress-{k}",
            ns,
            {
                "podSelector": {"matchLabels": {"app": f"app-{k % APPS_PER_NAMESPACE}"}},
                "policyTypes": ["Egress"],
                "egress": [
                    {
                        "to": [
                            {"podSelector": {"matchLabels": {"app": f"app-{(k + 1) % APPS_PER_NAMESPACE}"}}}
                        ],
                        "ports": [{"port": 8000 + k % 50, "endPort": 8100 + k % 50}],
                    },
                    {"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": [f"10.{k % 200}.0.0/16"]}}]},
                ],
            },
        ),
        lambda k: network_policy(
            f"team-peers-{k}",
            ns,
            {
                "podSelector": {
                    "matchLabels": {"app": f"app-{k % APPS_PER_NAMESPACE}", "version": f"v{1 + k % 3}"}
                },
                "ingress": [
                    {
                        "from": [
                            {
                                "namespaceSelector": {"matchLabels": {"team": TEAMS[k % len(TEAMS)]}},
                                "podSelector": {
                                    "matchExpressions": [
                                        {"key": "tier", "operator": "NotIn", "values": ["db"]}
                                    ]
                                },
                            }
                        ]
                    }
                ],
            },
        ),
    ]
    for k in range(count):
        yield shapes[k % len(shapes)](k + index * 1000)


def cilium_policies(ns: str, count: int) -> Iterator[dict[str, Any]]:
    for k in range(count):
        app = f"app-{k % APPS_PER_NAMESPACE}"
        if k % 3 == 0:
            spec: dict[str, Any] = {
                "endpointSelector": {"matchLabels": {"app": app}},
                "egress": [
                    {"toEntities": ["kube-apiserver"]},
                    {
                        "toEndpoints": [
                            {
                                "matchLabels": {
                                    "k8s:io.kubernetes.pod.namespace": "kube-system",
                                    "k8s-app": "kube-dns",
                                }
                            }
                        ],
                        "toPorts": [{"ports": [{"port": "53", "protocol": "ANY"}]}],
                    },
                ],
            }
        elif k % 3 == 1:
            spec = {
                "endpointSelector": {"matchLabels": {"app": app}},
                "ingress": [
                    {
                        "fromEndpoints": [{"matchLabels": {"tier": "frontend"}}],
                        "toPorts": [{"ports": [{"port": "8080", "protocol": "TCP"}]}],
                    }
                ],
            }
        else:
            spec = {
                "endpointSelector": {"matchLabels": {"tier": "db"}},
                "ingressDeny": [{"fromEntities": ["world"]}],
                "ingress": [{"fromEndpoints": [{}]}],
            }
        yield cilium_policy(f"cnp-{k}", ns, spec)


def generate(pods: int, policies: int, seed: int = 1, cilium_share: float = 0.0) -> list[dict[str, Any]]:
    """A cluster of `pods` pods and `policies` policies (a `cilium_share` of them Cilium)."""
    rng = random.Random(seed)
    ns_count = max(1, round(pods / PODS_PER_NAMESPACE))
    namespaces = make_namespaces(ns_count, rng)
    app_ns = [n["metadata"]["name"] for n in namespaces[:ns_count]]
    objects: list[dict[str, Any]] = [*namespaces]
    system = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "coredns", "namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}},
            "spec": {
                "containers": [
                    {
                        "name": "dns",
                        "image": "coredns",
                        "ports": [{"name": "dns", "containerPort": 53, "protocol": "UDP"}],
                    }
                ]
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "prometheus-0", "namespace": "monitoring", "labels": {"app": "prometheus"}},
            "spec": {"containers": [{"name": "prom", "image": "prometheus"}]},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "ingress-nginx",
                "namespace": "ingress-nginx",
                "labels": {"app": "ingress-nginx"},
            },
            "spec": {"containers": [{"name": "nginx", "image": "nginx"}]},
        },
    ]
    objects += system
    objects += list(_pods(app_ns, max(0, pods - len(system)), rng))
    n_cilium = round(policies * cilium_share)
    n_np = policies - n_cilium
    for i, ns in enumerate(app_ns):
        share = n_np // len(app_ns) + (1 if i < n_np % len(app_ns) else 0)
        objects += list(network_policies(ns, i, share, rng))
        cshare = n_cilium // len(app_ns) + (1 if i < n_cilium % len(app_ns) else 0)
        objects += list(cilium_policies(ns, cshare))
    return objects


def write_yaml(objects: list[dict[str, Any]], directory: Path) -> dict[str, Path]:
    """Write namespaces, pods and policies as three files (NamespaceList, PodList, policies)."""
    directory.mkdir(parents=True, exist_ok=True)
    groups: dict[str, list[dict[str, Any]]] = {"namespaces": [], "pods": [], "policies": []}
    for o in objects:
        groups[
            "namespaces" if o["kind"] == "Namespace" else "pods" if o["kind"] == "Pod" else "policies"
        ].append(o)
    paths = {}
    for name, items in groups.items():
        path = directory / f"{name}.yaml"
        if name == "policies":
            path.write_text(yaml.safe_dump_all(items, sort_keys=False))
        else:
            kind = "NamespaceList" if name == "namespaces" else "PodList"
            path.write_text(
                yaml.safe_dump({"apiVersion": "v1", "kind": kind, "items": items}, sort_keys=False)
            )
        paths[name] = path
    return paths
