"""The all-pairs class matrix must agree with the per-pair engine, pair for pair."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import NETPOL, inventory, pod_endpoints

from auditor.inventory import policy_engine
from auditor.reachability.matrix import ClassMatrix, ConnectivityMap
from auditor.settings.config import NetworkConfig, Settings

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import synth

PROBES = [("TCP", 8080), ("TCP", 5432), ("UDP", 53), ("TCP", 9091), ("TCP", 8060), ("TCP", 443), ("SCTP", 1)]


@pytest.mark.parametrize(
    ("cni", "cilium_share", "seed"), [("generic", 0.0, 1), ("auto", 0.4, 2), ("auto", 0.9, 3)]
)
def test_matrix_matches_engine_on_synthetic_clusters(cni: str, cilium_share: float, seed: int) -> None:
    inv = inventory(objects=synth.generate(900, 80, seed=seed, cilium_share=cilium_share), cni=cni)
    assert not inv.errors
    eps = list(pod_endpoints(inv).values())
    engine = policy_engine(inv)
    matrix = ClassMatrix(engine, eps)
    assert len(matrix.identities) < len(eps) / 3  # replicas collapse into identities
    rng = random.Random(seed)
    wrong = []
    for _ in range(4000):
        a, b = rng.randrange(len(eps)), rng.randrange(len(eps))
        proto, port = rng.choice(PROBES)
        if matrix.allowed(a, b, proto, port) != engine.flow(eps[a], eps[b]).allows(proto, port):
            wrong.append((str(eps[a]), str(eps[b]), proto, port))
    assert not wrong, wrong[:5]


def test_connectivity_map_and_pair_counts_match_engine() -> None:
    inv = inventory(objects=synth.generate(300, 40, seed=5, cilium_share=0.3))
    eps = list(pod_endpoints(inv).values())
    engine = policy_engine(inv)
    matrix = ClassMatrix(engine, eps)
    cmap = ConnectivityMap(matrix)
    by_pair = [[engine.flow(a, b).allowed_conns() for b in eps] for a in eps]
    for i, a in enumerate(eps):
        for j in range(len(eps)):
            assert cmap.between(matrix.pod_identity[i], matrix.pod_identity[j]) == by_pair[i][j], (a, eps[j])
    for proto, port in PROBES[:4]:
        brute = sum(by_pair[i][j].contains(proto, port) for i in range(len(eps)) for j in range(len(eps)))
        assert matrix.allowed_pod_pairs(proto, port, block=64) == brute
    total = {}
    for i in range(len(eps)):
        for j in range(len(eps)):
            if i != j:
                total[by_pair[i][j]] = total.get(by_pair[i][j], 0) + 1
    assert cmap.pod_pairs == total


E2E = NETPOL / "k8s-e2e-derived"


@pytest.mark.parametrize(
    "case", yaml.safe_load((E2E / "cases.yaml").read_text())["cases"], ids=lambda c: c["name"]
)
def test_matrix_on_e2e_cases(case: dict[str, Any]) -> None:
    inv = inventory(
        [E2E / "model-namespaces.yaml", E2E / "model-pods.yaml"],
        case["policies"],
        settings=Settings(network=NetworkConfig(cni="generic")),
    )
    eps = pod_endpoints(inv)
    names = list(eps)
    matrix = ClassMatrix(policy_engine(inv), list(eps.values()))
    proto, port = case["probe"]["protocol"], case["probe"]["port"]
    for i, src in enumerate(names):
        row = "".join("." if i == j or matrix.allowed(i, j, proto, port) else "X" for j in range(len(names)))
        want = "".join("." if src == dst else c for dst, c in zip(names, case["expected"][src], strict=True))
        assert row == want, src


def test_connectivity_map_blocks_are_disjoint_and_cover_exactly_the_allowed_pairs() -> None:
    """Every ordered identity pair with some allowed connection is in exactly one block, with the
    connections between() gives; no block holds a pair allowed nothing."""
    inv = inventory(objects=synth.generate(400, 200, seed=4, cilium_share=0.2))
    eps = list(pod_endpoints(inv).values())
    matrix = ClassMatrix(policy_engine(inv), eps)
    cmap = ConnectivityMap(matrix)
    n = len(matrix.identities)
    seen: dict[tuple[int, int], object] = {}
    for block in cmap.blocks:
        assert block.conns
        for s in range(n):
            if block.sources >> s & 1:
                for d in range(n):
                    if block.destinations >> d & 1:
                        assert (s, d) not in seen, (s, d)
                        seen[(s, d)] = block.conns
    for s in range(n):
        for d in range(n):
            want = cmap.between(s, d)
            assert seen.get((s, d)) == (want or None), (s, d)
    # Far fewer blocks than identity pairs: the map never visits pairs one by one.
    assert len(cmap.blocks) < n * n / 20


def _first_match_world(seed: int, calico: bool) -> list[dict[str, Any]]:
    """Namespaces and pods with a few labels and named ports, NetworkPolicies, and policies of
    first-match tiers with Allow, Deny and Pass rules on ports, ranges and named ports: Calico
    policies in two tiers, or AdminNetworkPolicies and a BaselineAdminNetworkPolicy."""
    rng = random.Random(seed)
    houses, apps = ("red", "blue"), ("a", "b", "c")
    objects: list[dict[str, Any]] = []
    for n in range(4):
        labels = {"house": houses[n % 2], "kubernetes.io/metadata.name": f"ns{n}"}
        objects.append(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"ns{n}", "labels": labels}}
        )
    for i in range(48):
        ports = [{"name": "http", "containerPort": rng.choice((80, 8080)), "protocol": "TCP"}]
        if rng.random() < 0.5:
            ports.append({"name": "dns", "containerPort": 53, "protocol": "UDP"})
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"p{i}",
                    "namespace": f"ns{i % 4}",
                    "labels": {"app": rng.choice(apps), "role": rng.choice(("x", "y"))},
                },
                "spec": {"containers": [{"name": "c", "image": "i", "ports": ports}]},
            }
        )
    for k in range(6):
        ns = f"ns{k % 4}"
        rule: dict[str, Any] = {"from": [{"podSelector": {"matchLabels": {"role": rng.choice(("x", "y"))}}}]}
        if rng.random() < 0.7:
            rule["ports"] = [{"port": rng.choice((80, 8080, "http")), "protocol": "TCP"}]
        spec = {"podSelector": {"matchLabels": {"app": rng.choice(apps)}}, "ingress": [rule]}
        objects.append(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {"name": f"np{k}", "namespace": ns},
                "spec": spec,
            }
        )
    actions = ("Allow", "Deny", "Pass")
    if calico:
        objects.append(
            {
                "apiVersion": "projectcalico.org/v3",
                "kind": "Tier",
                "metadata": {"name": "security"},
                "spec": {"order": 100},
            }
        )
        for k in range(10):

            def calico_rule(direction: str) -> dict[str, Any]:
                peer: dict[str, Any] = {"selector": f"app == '{rng.choice(apps)}'"}
                local: dict[str, Any] = {}
                if rng.random() < 0.3:  # criteria on the policy's own side too
                    local["selector"] = f"app != '{rng.choice(apps)}'"
                destination = peer if direction == "egress" else local
                if rng.random() < 0.6:
                    destination["ports"] = rng.sample(
                        [80, "1000:2000", 8080, "http", "50:90"], rng.randint(1, 2)
                    )
                source = local if direction == "egress" else peer
                rule = {"action": rng.choice(actions), "protocol": rng.choice(("TCP", "UDP"))}
                return {**rule, "source": source, "destination": destination}

            spec: dict[str, Any] = {
                "order": rng.randint(1, 5),
                "selector": f"role == '{rng.choice(('x', 'y'))}'",
                "types": ["Ingress", "Egress"],
                "ingress": [calico_rule("ingress") for _ in range(rng.randint(0, 3))],
                "egress": [calico_rule("egress") for _ in range(rng.randint(0, 3))],
            }
            if rng.random() < 0.5:
                spec["tier"] = "security"
            objects.append(
                {
                    "apiVersion": "projectcalico.org/v3",
                    "kind": "NetworkPolicy",
                    "metadata": {"name": f"{spec.get('tier', 'default')}.c{k}", "namespace": f"ns{k % 4}"},
                    "spec": spec,
                }
            )
        return objects

    def ports() -> list[dict[str, Any]]:
        choices: list[dict[str, Any]] = [
            {"portNumber": {"protocol": "TCP", "port": 80}},
            {"portRange": {"protocol": "TCP", "start": 1000, "end": 8080}},
            {"namedPort": "http"},
            {"portNumber": {"protocol": "UDP", "port": 53}},
        ]
        return rng.sample(choices, rng.randint(1, 2))

    def admin_rules(direction: str) -> list[dict[str, Any]]:
        out = []
        for j in range(rng.randint(1, 3)):
            peer = (
                {"namespaces": {"matchLabels": {"house": rng.choice(houses)}}}
                if rng.random() < 0.5
                else {
                    "pods": {
                        "namespaceSelector": {},
                        "podSelector": {"matchLabels": {"app": rng.choice(apps)}},
                    }
                }
            )
            rule: dict[str, Any] = {
                "name": f"{direction}-{j}",
                "action": rng.choice(actions),
                "from" if direction == "ingress" else "to": [peer],
            }
            if rng.random() < 0.7:
                rule["ports"] = ports()
            out.append(rule)
        return out

    for k in range(6):
        objects.append(
            {
                "apiVersion": "policy.networking.k8s.io/v1alpha1",
                "kind": "AdminNetworkPolicy",
                "metadata": {"name": f"anp{k}"},
                "spec": {
                    "priority": rng.randint(1, 20),
                    "subject": {
                        "pods": {
                            "namespaceSelector": {"matchLabels": {"house": rng.choice(houses)}},
                            "podSelector": {"matchLabels": {"role": rng.choice(("x", "y"))}},
                        }
                    },
                    "ingress": admin_rules("ingress"),
                    "egress": admin_rules("egress"),
                },
            }
        )
    baseline = {
        "subject": {"namespaces": {}},
        "ingress": [r for r in admin_rules("ingress") if r["action"] != "Pass"],
        "egress": [r for r in admin_rules("egress") if r["action"] != "Pass"],
    }
    objects.append(
        {
            "apiVersion": "policy.networking.k8s.io/v1alpha1",
            "kind": "BaselineAdminNetworkPolicy",
            "metadata": {"name": "default"},
            "spec": baseline,
        }
    )
    return objects


@pytest.mark.parametrize(("calico", "seed"), [(False, 1), (False, 2), (True, 3), (True, 4)])
def test_matrix_matches_engine_on_first_match_tiers(calico: bool, seed: int) -> None:
    """Admin/Baseline and Calico tiers (first match, Pass, end-of-tier deny): the connections the
    map gives every identity pair are the engine's, on every port."""
    inv = inventory(objects=_first_match_world(seed, calico), cni="calico" if calico else "generic")
    assert not inv.errors, inv.errors[:3]
    engine = policy_engine(inv)
    assert {p.tier for p in engine.policies} - {"namespace", "calico:default"}, "no first-match policy loaded"
    eps = list(pod_endpoints(inv).values())
    matrix = ClassMatrix(engine, eps)
    cmap = ConnectivityMap(matrix)
    wrong = []
    for i, a in enumerate(eps):
        for j, b in enumerate(eps):
            want = engine.flow(a, b).allowed_conns()
            if cmap.between(matrix.pod_identity[i], matrix.pod_identity[j]) != want:
                wrong.append((str(a), str(b), str(want)))
    assert not wrong, wrong[:5]
    assert len({str(c) for c in cmap.pod_pairs}) > 3  # the world is not trivially open or closed
