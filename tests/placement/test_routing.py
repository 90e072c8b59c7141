"""Service routing in the verdict and the cost (issue 35): trafficDistribution, internalTrafficPolicy
Local and topology-aware hints decide whether traffic through a ClusterIP Service crosses zones.

Test data: tests/data/routing (the Kubernetes documentation's Service examples; origin in its
README). A one-pod client names a Service in front of three `MyApp` pods; nodes in two zones.
"""

from __future__ import annotations

import pytest
from support import DATA, findings, inventory, node_yaml

from auditor.placement import routing
from auditor.rules.model import build_model

SERVICES = (DATA / "routing" / "services.yaml").read_text()
NODES = node_yaml("a1", "zone-a") + node_yaml("b1", "zone-b")


def workloads(service: str, backends: int = 3) -> str:
    return f"""
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: myapp, namespace: ml}}
spec:
  replicas: {backends}
  selector: {{matchLabels: {{app.kubernetes.io/name: MyApp}}}}
  template:
    metadata: {{labels: {{app.kubernetes.io/name: MyApp}}}}
    spec:
      containers: [{{name: app, image: x, ports: [{{containerPort: 9376}}]}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: client, namespace: ml}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: client}}}}
  template:
    metadata: {{labels: {{app: client}}}}
    spec:
      containers: [{{name: c, image: x, env: [{{name: BACKEND, value: "http://{service}:80"}}]}}]
"""


def traffic(service: str, backends: int = 3) -> list[tuple[str, str, str]]:
    text = NODES + "---\n" + SERVICES + workloads(service, backends)
    return [f for f in findings(text) if f[0] == "cross-zone-traffic"]


def test_without_routing_a_split_is_likely() -> None:
    assert traffic("plain") == [("cross-zone-traffic", "likely", "client")]


@pytest.mark.parametrize("service", ["prefer-close", "topology-auto"])
def test_a_zone_preference_makes_the_split_possible(service: str) -> None:
    assert traffic(service) == [("cross-zone-traffic", "possible", "client")]


def test_a_zone_preference_does_not_help_a_single_endpoint() -> None:
    # One MyApp pod: a client in the other zone has no endpoint in its own.
    assert traffic("prefer-close", backends=1) == [("cross-zone-traffic", "likely", "client")]


def test_internal_traffic_policy_local_never_crosses_zones() -> None:
    assert traffic("node-local") == []
    inv = inventory(text=NODES + "---\n" + SERVICES + workloads("node-local"))
    (edge,) = [a for a in build_model(inv).edges if a.edge.via is not None]
    assert all(za == zb for za, zb in edge.placement.pairs)
    assert "internalTrafficPolicy: Local" in edge.placement.coupling


def test_a_headless_service_is_not_routed() -> None:
    # trafficDistribution on a headless Service has no effect: its DNS names the pods.
    assert traffic("headless") == [("cross-zone-traffic", "likely", "client")]
    inv = inventory(text=NODES + "---\n" + SERVICES + workloads("headless"))
    assert all(a.edge.via is None for a in build_model(inv).edges)


def test_the_coupling_says_why() -> None:
    inv = inventory(text=NODES + "---\n" + SERVICES + workloads("prefer-close"))
    (edge,) = build_model(inv).edges
    assert edge.placement.split == "possible"
    assert edge.placement.coupling.startswith("Service ml/prefer-close has trafficDistribution: PreferClose")


def test_observed_pods_give_the_exact_pairs() -> None:
    pairs = (("zone-a", "zone-a"), ("zone-a", "zone-b"), ("zone-b", "zone-a"), ("zone-b", "zone-b"))
    # MyApp pods run in both zones: every client stays in its own.
    both = routing.routed_pairs(pairs, "zone", frozenset({"zone-a", "zone-b"}))
    assert both == (("zone-a", "zone-a"), ("zone-b", "zone-b"))
    # Only in zone-a: a client in zone-b crosses.
    only_a = (("zone-a", "zone-a"), ("zone-b", "zone-a"))
    assert routing.routed_pairs(only_a, "zone", frozenset({"zone-a"})) == only_a
    # Hints may be withheld by the controller's safeguards: observed pairs stay as they are.
    assert routing.routed_pairs(pairs, "hints", frozenset({"zone-a", "zone-b"})) == pairs


def test_topology_mode_annotations() -> None:
    assert routing.topology_mode({"service.kubernetes.io/topology-mode": "Auto"}) == "Auto"
    assert routing.topology_mode({"service.kubernetes.io/topology-aware-hints": "auto"}) == "Auto"
    assert routing.topology_mode({"service.kubernetes.io/topology-mode": "Disabled"}) == ""
    # The new annotation wins over the old one.
    both = {
        "service.kubernetes.io/topology-mode": "Disabled",
        "service.kubernetes.io/topology-aware-hints": "auto",
    }
    assert routing.topology_mode(both) == ""


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ("trafficDistribution: Nearby", "spec.trafficDistribution"),
        ("internalTrafficPolicy: Node", "spec.internalTrafficPolicy"),
    ],
)
def test_invalid_routing_settings_are_errors_naming_the_field(setting: str, field: str) -> None:
    text = SERVICES.split("---\n")[4].rstrip() + f"\n  {setting}\n"
    inv = inventory(text=text)
    assert [e.field for e in inv.errors] == [field], inv.errors
