"""network-policy-api conformance (AdminNetworkPolicy v1alpha1, ClusterNetworkPolicy v1alpha2).

Expectations restated in tests/data/netpol/network-policy-api/expectations-derived.yaml: suites of
cumulative steps, each with optional mutations of the live objects and TCP probes.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import NETPOL, inventory, pod_endpoints

from auditor import yamlio
from auditor.inventory import policy_engine

NPA = NETPOL / "network-policy-api"
SPEC = yaml.safe_load((NPA / "expectations-derived.yaml").read_text())
BASE = NPA / "head-v1alpha2" / "conformance" / "base" / "manifests.yaml"
HOUSES = {"gryffindor": "harry-potter", "slytherin": "draco-malfoy"}


def _load(path: Path) -> list[dict[str, Any]]:
    docs, errors = yamlio.load_paths([path])
    assert not errors, errors
    return [copy.deepcopy(dict(d.data)) for d in docs]


def _set(obj: dict[str, Any], path: str, value: Any) -> None:
    node: Any = obj
    parts = path.replace("]", "").replace("[", ".").split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    last = parts[-1]
    node[int(last) if last.isdigit() else last] = value


def _steps(suite: dict[str, Any]) -> list[dict[str, Any]]:
    if "steps" in suite:
        return list(suite["steps"])
    # "same six steps and verdicts as above" (the v1alpha1 suite restates the v1alpha2 one).
    return list(SPEC["suites"][0]["steps"])


def _cases() -> list[tuple[str, dict[str, Any], int]]:
    out = []
    for suite in SPEC["suites"]:
        for i, _step in enumerate(_steps(suite)):
            out.append((f"{suite['name'].split(' ')[0]}-step{i}", suite, i))
    return out


CASES = _cases()


def test_base_manifests_load_except_the_templated_document() -> None:
    """The hostNetwork StatefulSet is a Go template ({{ ... }} in YAML): one error entry, the rest loads."""
    docs, errors = yamlio.load_paths([BASE])
    assert len(errors) == 1 and errors[0].line > 0
    assert {d.data["metadata"]["name"] for d in docs} >= {"harry-potter", "draco-malfoy", "luna-lovegood"}


@pytest.mark.parametrize(("suite", "upto"), [(s, i) for _, s, i in CASES], ids=[c[0] for c in CASES])
def test_step(suite: dict[str, Any], upto: int) -> None:
    policies: list[dict[str, Any]] = []
    for m in suite["manifests"]:
        policies += _load(NPA / m)
    steps = _steps(suite)
    for step in steps[: upto + 1]:
        mutate = step.get("mutate") or {}
        if "delete" in mutate:
            kind, *rest = mutate["delete"].split("/")
            policies = [p for p in policies if not (p["kind"] == kind and p["metadata"]["name"] == rest[-1])]
        if "target" in mutate:
            kind, name = mutate["target"].split("/")
            if suite["name"].startswith("ANPIntegration"):
                kind = "AdminNetworkPolicy"
            target = next(p for p in policies if p["kind"] == kind and p["metadata"]["name"] == name)
            for path, value in mutate["set"].items():
                _set(target, path, value)
    docs, _ = yamlio.load_paths([BASE])
    inv = inventory(objects=[*(d.data for d in docs), *policies])
    assert not inv.errors, inv.errors
    eps = pod_endpoints(inv)
    engine = policy_engine(inv)
    for probe in steps[upto]["probes"]:
        src_house, _src_pod = probe["from"].split("/")
        dst_house, _dst_pod = probe["to"].split("/")
        src = eps[f"network-policy-conformance-{src_house}/{HOUSES[src_house]}"]
        dst = eps[f"network-policy-conformance-{dst_house}/{HOUSES[dst_house]}"]
        verdict = engine.flow(src, dst)
        allowed = verdict.allows(probe["proto"].upper(), probe["port"])
        assert allowed == (probe["expect"] == "allow"), (
            f"{probe}: egress {verdict.egress.at('TCP', probe['port'])}, "
            f"ingress {verdict.ingress.at('TCP', probe['port'])}"
        )
