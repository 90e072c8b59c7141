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
