"""Cilium policy-engine script tests (tests/data/netpol/cilium/*.txtar).

The scripts allocate identities from Cilium label strings (`k8s:io.kubernetes.pod.namespace=default,
k8s:app=test`, `reserved:kube-apiserver`), import policies and look flows up. We turn identities
into endpoints (a pod in the namespace the labels name, with `io.cilium.k8s.namespace.labels.*` as
namespace labels; reserved identities as entities) and replay each lookup in order.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import NETPOL, inventory

from auditor.inventory import policy_engine
from auditor.model.objects import freeze_labels
from auditor.reachability.endpoints import Endpoint, EntityEndpoint, ExternalEndpoint, PodEndpoint, parse_ip
from auditor.reachability.policy import Direction
from auditor.settings.config import NetworkConfig, Settings

CILIUM = NETPOL / "cilium"


def parse_txtar(path: Path) -> tuple[list[str], dict[str, str]]:
    script: list[str] = []
    files: dict[str, str] = {}
    current = None
    for line in path.read_text().splitlines():
        m = re.match(r"^-- (.+) --$", line)
        if m:
            current = m.group(1)
            files[current] = ""
        elif current is None:
            script.append(line)
        else:
            files[current] += line + "\n"
    return script, files


def endpoint(labels: str) -> Endpoint:
    if labels.startswith("reserved:"):
        entity = labels.split(":", 1)[1]
        return ExternalEndpoint(parse_ip("203.0.113.7")) if entity == "world" else EntityEndpoint(entity)
    pod: dict[str, str] = {}
    ns_labels: dict[str, str] = {}
    namespace = "default"
    for item in labels.split(","):
        key, _, value = item.partition("=")
        key = key.removeprefix("k8s:")
        if key == "io.kubernetes.pod.namespace":
            namespace = value
        elif key.startswith("io.cilium.k8s.namespace.labels."):
            ns_labels[key.removeprefix("io.cilium.k8s.namespace.labels.")] = value
        else:
            pod[key] = value
    return PodEndpoint(namespace, labels, freeze_labels(pod), freeze_labels(ns_labels))


def run_script(path: Path) -> list[tuple[str, bool, bool]]:
    """Replay the script; returns (lookup, expected allowed, got allowed) per lookup."""
    script, files = parse_txtar(path)
    env: dict[str, str] = {}
    identities: dict[str, Endpoint] = {}
    active: dict[str, list[dict[str, Any]]] = {}
    results = []
    last_allocated = ""
    pending: tuple[str, bool] | None = None
    for raw in script:
        line = re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), m.group(0)), raw.strip())
        if not line or line.startswith("#"):
            continue
        words = line.split()
        if words[0] == "env" and words[1] != "--from-stdout":
            key, _, value = line[4:].partition("=")
            env[key.strip()] = value
        elif words[0] == "identity/allocate":
            last_allocated = words[1]
            identities[last_allocated] = endpoint(words[1])
        elif words[:2] == ["env", "--from-stdout"]:
            env[words[2]] = last_allocated
        elif words[0] in ("policy/import", "k8s/add"):
            active[words[1]] = list(yaml.safe_load_all(files[words[1]]))
        elif words[0] == "policy/remove":
            active.pop(words[1], None)
        elif words[0] == "policy/lookup-flow":
            args = [w for w in words[1:] if w != "--egress"]
            pending = (" ".join(args), True)
        elif words[0] == "stdout" and pending is not None:
            lookup, _ = pending
            src, dst, proto, port = lookup.split()
            inv = inventory(
                objects=[o for objs in active.values() for o in objs],
                settings=Settings(network=NetworkConfig(cni="cilium")),
            )
            assert not inv.errors, inv.errors
            source, destination = identities[src], identities[dst]
            verdict = policy_engine(inv).directional(source, Direction.EGRESS, destination)
            got = verdict.at(proto.upper(), int(port)).allowed
            want = words[1].split("=")[-1] == "allowed"
            results.append((f"{_short(src)} -> {_short(dst)} {proto}/{port}", want, got))
            pending = None
    return results


def _short(labels: str) -> str:
    return re.sub(r"a{20,}", "a…", labels)[:80]


@pytest.mark.parametrize("name", ["kube-apiserver-allow", "kube-apiserver-deny", "namespace-label-limits"])
def test_lookup_script(name: str) -> None:
    results = run_script(CILIUM / f"{name}.txtar")
    assert results, "the script has lookups"
    wrong = [(lookup, want) for lookup, want, got in results if want != got]
    assert not wrong, wrong


def test_policymap_realised_entries() -> None:
    """policymap.txtar's goldens, restated as flow lookups: ep1 (app=web) admits ep2 (app=backend)
    on 80/TCP and 8080-8095/TCP only (with an L7 proxy), sends anything to ep2, nothing to the host;
    ep2 is selected by nothing and allows all."""
    _, files = parse_txtar(CILIUM / "policymap.txtar")
    inv = inventory(text=files["policy.yaml"], cni="cilium")
    assert not inv.errors
    engine = policy_engine(inv)
    web = endpoint("k8s:io.kubernetes.pod.namespace=default,k8s:app=web")
    backend = endpoint("k8s:io.kubernetes.pod.namespace=default,k8s:app=backend")
    ingress = engine.directional(web, Direction.INGRESS, backend)
    allowed = ingress.allowed_conns()
    assert allowed.contains("TCP", 80) and allowed.contains("TCP", 8080) and allowed.contains("TCP", 8095)
    assert not allowed.contains("TCP", 8096) and not allowed.contains("TCP", 81)
    assert not allowed.contains("UDP", 80)
    assert "L7" in ingress.at("TCP", 80).reason
    assert not engine.directional(web, Direction.INGRESS, EntityEndpoint("world")).at("TCP", 80).allowed
    egress = engine.directional(web, Direction.EGRESS, backend)
    assert egress.allowed_conns().is_all()
    assert not engine.directional(web, Direction.EGRESS, EntityEndpoint("host")).at("TCP", 22).allowed
    assert not engine.directional(web, Direction.EGRESS, EntityEndpoint("host")).at("UDP", 53).allowed
    for peer in (web, EntityEndpoint("host"), ExternalEndpoint(parse_ip("198.51.100.1"))):
        assert engine.directional(backend, Direction.INGRESS, peer).allowed_conns().is_all()
        assert engine.directional(backend, Direction.EGRESS, peer).allowed_conns().is_all()
