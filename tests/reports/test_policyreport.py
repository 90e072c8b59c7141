"""PolicyReports in both APIs (wgpolicyk8s.io/v1alpha2, openreports.io/v1alpha1), validated against
the upstream CRDs' openAPIV3Schema (tests/data/policyreport/): from the store (pass, fail, skip,
error; --since turns resolved findings into passes), and from a live audit published into the
cluster by server-side apply through the official client, against the local API server."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from dbsupport import Clock, engine_for
from schemas import crd_schema, policyreport_problems
from sqlalchemy import Engine
from storedata import seeded_store

from auditor.reports import compliance, policyreport
from auditor.resources import examples_dir
from auditor.service import wire
from auditor.service.runner import AuditRunner
from auditor.settings.config import load_settings
from auditor.sources.manifests import Tools
from auditor.store.repository import Store, TargetSpec

sys.path.insert(0, str(Path(__file__).parents[1] / "cluster"))
from fakeapi import ApplyKind, FakeCluster, kubeconfig, serve
from seedcluster import objects

from auditor import cli

SEED = examples_dir() / "seed-lab"
FLAVOURS = ["policyreport", "openreports"]


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    with engine_for("sqlite", tmp_path) as e:
        yield e


def _docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.mark.parametrize("fmt", FLAVOURS)
def test_store_reports_validate_and_carry_every_result_kind(fmt: str, tmp_path: Path, engine: Engine) -> None:
    store, clock, settings = seeded_store(tmp_path, engine)
    report = compliance.build(wire.record_json(store.export()), settings.reports, clock.now, None)  # type: ignore[attr-defined]
    docs = _docs(compliance.render(report, fmt).decode())
    assert docs and all(policyreport_problems(d) == [] for d in docs)
    flavour = policyreport.FLAVOURS["openreports" if fmt == "openreports" else "wgpolicyk8s"]
    assert {d["apiVersion"] for d in docs} == {flavour.api_version}
    assert {d["kind"] for d in docs} == {flavour.kind, flavour.cluster_kind}
    ml = next(d for d in docs if d["metadata"].get("namespace") == "ml-prod")
    assert (ml["summary"]["fail"], ml["summary"]["skip"]) == (1, 1)  # the waived one is a skip
    cluster = next(d for d in docs if "namespace" not in d["metadata"])
    results = {(r["properties"]["target"], r["policy"]): r["result"] for r in cluster["results"]}
    assert results["lab", "cross-zone-traffic"] == "pass"  # audited, no finding of it
    assert results["web", "cross-zone-blocked"] == "error"  # never audited successfully
    for d in docs:
        counted = {k: sum(r["result"] == k for r in d["results"]) for k in d["summary"]}
        assert counted == d["summary"]
        assert all(isinstance(v, str) for r in d["results"] for v in r["properties"].values())


def test_since_reports_resolved_findings_as_pass(tmp_path: Path, engine: Engine) -> None:
    """Before, --since listed a finding fixed in the period as `fail`."""
    tree = tmp_path / "seed"
    shutil.copytree(SEED, tree)
    config = tmp_path / "auditor.yaml"
    config.write_text(
        f"targets:\n  - name: lab\n    directory: '{tree}'\n    paths: [before, policies.yaml]\n    nodes: [nodes.yaml]\n"
    )
    settings = load_settings(config)
    clock = Clock()
    store = Store(engine, clock)
    store.sync_targets(TargetSpec(t.name, t.kind, t.location) for t in settings.targets)
    runner = AuditRunner(settings, store, Tools(None, None))
    runner.run("lab")
    since = clock.advance(days=1)
    shutil.copyfile(SEED / "after" / "workload.yaml", tree / "before" / "workload.yaml")  # fixed
    runner.run("lab")
    with_since = compliance.build(
        wire.record_json(store.export(None, since - timedelta(hours=1))), settings.reports, clock.now, since
    )
    docs = _docs(compliance.to_policyreport(with_since, "openreports"))
    assert all(policyreport_problems(d) == [] for d in docs)
    (ns,) = [d for d in docs if d["metadata"].get("namespace") == "ml-demo"]
    (blocked,) = [r for r in ns["results"] if r["policy"] == "cross-zone-blocked"]
    assert blocked["result"] == "pass" and blocked["properties"]["status"] == "resolved"
    assert blocked["message"].startswith("resolved: ") and ns["summary"]["fail"] == 0
    without = compliance.build(wire.record_json(store.export()), settings.reports, clock.now, None)
    assert not [
        d for d in _docs(compliance.to_policyreport(without)) if d["metadata"].get("namespace") == "ml-demo"
    ]


def test_the_schema_check_rejects_a_wrong_result() -> None:
    good = {
        "apiVersion": "wgpolicyk8s.io/v1alpha2",
        "kind": "PolicyReport",
        "metadata": {"name": "x", "namespace": "ns"},
        "results": [{"policy": "p", "result": "pass"}],
    }
    assert policyreport_problems(good) == []
    bad = {**good, "results": [{"policy": "p", "result": "failed", "severity": "urgent"}]}
    assert len(policyreport_problems(bad)) == 2
    assert policyreport_problems({**good, "results": [{"result": "pass"}]})  # policy is required


def _apply_kinds() -> dict[str, ApplyKind]:
    out = {}
    for flavour in policyreport.FLAVOURS.values():
        base = f"/apis/{flavour.group}/{flavour.version}"
        out[f"{base}/{flavour.plural}"] = ApplyKind(
            flavour.kind, True, crd_schema(flavour.group, flavour.kind, flavour.version)
        )
        out[f"{base}/{flavour.cluster_plural}"] = ApplyKind(
            flavour.cluster_kind, False, crd_schema(flavour.group, flavour.cluster_kind, flavour.version)
        )
    return out


CRDS = {"/apis/cilium.io/v2/ciliumnetworkpolicies"}


@pytest.mark.parametrize("api", ["wgpolicyk8s", "openreports"])
def test_cluster_publishes_namespaced_reports_by_server_side_apply(
    api: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flavour = policyreport.FLAVOURS[api]
    kinds = _apply_kinds()
    fake = FakeCluster(objects("before"), CRDS | set(kinds), apply_kinds=kinds)
    with serve(fake) as url:
        config = str(kubeconfig(tmp_path / "kubeconfig", url))
        args = ["cluster", "--kubeconfig", config, "--format", "json", "--publish-reports", api]
        assert cli.main(args) == 1  # the finding still decides the exit code
        err = capsys.readouterr().err
        path = (
            f"/apis/{flavour.group}/{flavour.version}/namespaces/ml-demo/{flavour.plural}/placement-auditor"
        )
        report = fake.applied[path]
        assert f"published {flavour.kind} ml-demo/placement-auditor" in err
        assert policyreport_problems(report) == []
        results = {(r["policy"], r["resources"][0]["name"]): r["result"] for r in report["results"]}
        assert results["cross-zone-blocked", "trainer-workers"] == "fail"
        assert results["role-unschedulable", "trainer-workers"] == "pass"  # checked, did not fire
        assert report["summary"]["fail"] == 1 and report["summary"]["pass"] >= 1
        assert report["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "placement-auditor"}
        (patch_path, content_type) = next(p for p in fake.patches if p[0].startswith(path))
        assert content_type == "application/apply-patch+yaml"
        assert "fieldManager=placement-auditor" in patch_path and "force=true" in patch_path
        assert report["metadata"]["managedFields"][0]["manager"] == "placement-auditor"
        # Publishing again updates the same object (apply is idempotent), not a second one.
        assert cli.main(args) == 1
        capsys.readouterr()
        assert fake.applied[path]["metadata"]["generation"] == 2
        assert fake.applied[path]["metadata"]["uid"] == report["metadata"]["uid"]
        assert len([p for p in fake.applied if p.startswith(f"/apis/{flavour.group}/")]) == 1


def test_a_missing_crd_or_permission_fails_the_publish_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeCluster(objects("before"), CRDS)  # no PolicyReport CRD installed
    with serve(fake) as url:
        config = str(kubeconfig(tmp_path / "kubeconfig", url))
        assert cli.main(["cluster", "--kubeconfig", config, "--publish-reports", "--format", "json"]) == 3
        err = capsys.readouterr().err
        assert "HTTP 404" in err and "is the CRD installed" in err
    kinds = _apply_kinds()
    fake = FakeCluster(objects("before"), CRDS | set(kinds), apply_kinds=kinds)
    fake.faults.forbidden.add("/apis/wgpolicyk8s.io/v1alpha2/policyreports")
    with serve(fake) as url:
        config = str(kubeconfig(tmp_path / "kubeconfig", url))
        assert cli.main(["cluster", "--kubeconfig", config, "--publish-reports", "--format", "json"]) == 3
        err = capsys.readouterr().err
        assert "HTTP 403" in err and "deploy/kustomize/components/publish-reports/rbac.yaml" in err


def test_reports_of_namespaces_that_are_gone_are_deleted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kinds = _apply_kinds()
    fake = FakeCluster(objects("before"), CRDS | set(kinds), apply_kinds=kinds)
    base = "/apis/wgpolicyk8s.io/v1alpha2"
    stale = f"{base}/namespaces/old-team/policyreports/placement-auditor"
    theirs = f"{base}/namespaces/old-team/policyreports/kyverno-report"
    for path, labels in (
        (stale, {"app.kubernetes.io/managed-by": "placement-auditor"}),
        (theirs, {"app.kubernetes.io/managed-by": "kyverno"}),
    ):
        name = path.rsplit("/", 1)[-1]
        fake.applied[path] = {
            "apiVersion": "wgpolicyk8s.io/v1alpha2",
            "kind": "PolicyReport",
            "metadata": {
                "name": name,
                "namespace": "old-team",
                "labels": labels,
                "managedFields": [{"manager": "x"}],
            },
            "results": [],
        }
    with serve(fake) as url:
        config = str(kubeconfig(tmp_path / "kubeconfig", url))
        assert cli.main(["cluster", "--kubeconfig", config, "--publish-reports", "--format", "json"]) == 1
    err = capsys.readouterr().err
    assert "deleted the stale PolicyReport old-team/placement-auditor" in err
    assert stale not in fake.applied and theirs in fake.applied  # another tool's report is left alone
    assert f"{base}/namespaces/ml-demo/policyreports/placement-auditor" in fake.applied
