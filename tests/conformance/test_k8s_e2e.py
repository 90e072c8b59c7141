"""Kubernetes e2e NetworkPolicy cases (restated in tests/data/netpol/k8s-e2e-derived/cases.yaml).

Each case: policies + a probe (port, protocol) + the expected 9×9 reachability matrix over the
pods x/a..z/c; '.' allowed, 'X' denied; loopback ignored, as the e2e suite does.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import yaml
from support import NETPOL, inventory, pod_endpoints

from auditor.inventory import policy_engine
from auditor.settings.config import NetworkConfig, Settings

E2E = NETPOL / "k8s-e2e-derived"
CASES: list[dict[str, Any]] = yaml.safe_load((E2E / "cases.yaml").read_text())["cases"]
PODS = [f"{ns}/{p}" for ns in "xyz" for p in "abc"]


def matrix(case: dict[str, Any], settings: Settings) -> dict[str, str]:
    inv = inventory(
        [E2E / "model-namespaces.yaml", E2E / "model-pods.yaml"], case["policies"], settings=settings
    )
    assert not inv.errors, inv.errors
    eps = pod_endpoints(inv)
    engine = policy_engine(inv)
    proto, port = case["probe"]["protocol"], case["probe"]["port"]
    rows = {}
    for src in PODS:
        row = ""
        for dst in PODS:
            if src == dst:
                row += "."  # loopback: ignored by the e2e suite
                continue
            row += "." if engine.flow(eps[src], eps[dst]).allows(proto, port) else "X"
        rows[src] = row
    return rows


def expected(case: dict[str, Any]) -> dict[str, str]:
    return {
        src: "".join("." if src == dst else c for dst, c in zip(PODS, row, strict=True))
        for src, row in case["expected"].items()
    }


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_e2e_case(case: dict[str, Any]) -> None:
    got = matrix(case, Settings(network=NetworkConfig(cni="generic")))
    want = expected(case)
    assert got == want, "\n".join(f"{s}: want {want[s]} got {got[s]}" for s in PODS if want[s] != got[s])


def test_ipblock_on_pod_ips_is_cni_defined() -> None:
    """ipBlock on pod IPs is implementation-defined. The e2e answer (pod IPs match) holds for
    generic NetworkPolicy implementations; Cilium matches pod IPs only with
    policy-cidr-match-mode=pods, otherwise x/a (egress only to the ipBlock) reaches no pod."""
    case = next(c for c in CASES if c["name"] == "ipblock-except-pod-ip")
    cilium = NetworkConfig(cni="cilium")
    got = matrix(case, Settings(network=cilium))
    assert got["x/a"] == "." + "X" * 8
    assert all(got[p] == "." * 9 for p in PODS if p != "x/a")
    with_pods = dataclasses.replace(
        cilium, cilium=dataclasses.replace(cilium.cilium, policy_cidr_match_mode="pods")
    )
    assert matrix(case, Settings(network=with_pods)) == expected(case)
