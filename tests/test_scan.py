"""`auditor scan` end to end: the seed scenario, the corpus, the cost arithmetic, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support import DATA

from auditor.cli import main

LAB = DATA / "seed-lab"
NODES_2Z = """\
apiVersion: v1
kind: NodeList
items:
- {apiVersion: v1, kind: Node, metadata: {name: a1, labels: {topology.kubernetes.io/zone: za, cloud.provider.com/topology-block: block-a, cloud.provider.com/topology-rack: rack-a1, cloud.provider.com/node-group: tas-group}}, status: {allocatable: {cpu: "64", nvidia.com/gpu: "8"}}}
- {apiVersion: v1, kind: Node, metadata: {name: b1, labels: {topology.kubernetes.io/zone: zb, cloud.provider.com/topology-block: block-b, cloud.provider.com/topology-rack: rack-b1, cloud.provider.com/node-group: tas-group}}, status: {allocatable: {cpu: "64", nvidia.com/gpu: "8"}}}
"""  # the Kueue TAS examples' levels (block, rack) as a TAS cluster labels them, nested in the zones,
# and the node group the examples' ResourceFlavor `tas-flavor` selects (its nodeLabels join the pods')


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["scan", *args, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_seed_before_reports_exactly_the_cross_zone_blocked_finding(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out = run_json(capsys, str(LAB / "before"), str(LAB / "policies.yaml"), str(LAB / "nodes.yaml"))
    assert code == 1
    assert out["schema"] == "placement-auditor/findings/v1"
    assert [(f["rule"], f["severity"], f["certainty"]) for f in out["findings"]] == [
        ("cross-zone-blocked", "critical", "always")
    ]
    f = out["findings"][0]
    assert f["symptoms"] == ["blocked"]
    assert (
        f["workload"]["kind"] == "Job"
        and f["workload"]["name"] == "trainer-workers"
        and f["workload"]["line"] > 0
    )
    assert f["edge"] == {
        "from": {"role": "trainer-workers", "zones": ["zone-a"]},
        "to": {"role": "trainer-coordinator", "zones": ["zone-b"]},
        "port": 9999,
        "protocol": "TCP",
    }
    assert {p["name"] for p in f["policies"]} == {"zone-a-only", "gpu-workers-stay-in-zone-a", "zone-b-only"}
    assert len(f["fingerprint"]) == 32
    assert out["summary"]["findings"] == 1 and out["summary"]["by_severity"] == {"critical": 1}
    assert out["errors"] == []


def test_seed_after_reports_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_json(capsys, str(LAB / "after"), str(LAB / "policies.yaml"), str(LAB / "nodes.yaml"))
    assert code == 0 and out["findings"] == []


def test_fingerprint_is_stable_across_runs_and_paths(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _, first = run_json(capsys, "--example", "seed-lab/before")
    for name in ("before", "policies.yaml", "nodes.yaml"):
        src = LAB / name
        if src.is_dir():
            (tmp_path / name).mkdir()
            for f in src.iterdir():
                (tmp_path / name / f.name).write_text(f.read_text())
        else:
            (tmp_path / name).write_text(src.read_text())
    _, second = run_json(capsys, str(tmp_path))
    assert first["findings"][0]["fingerprint"] == second["findings"][0]["fingerprint"]


def test_corpus_training_jobs_without_constraints_are_likely_split(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "nodes.yaml").write_text(NODES_2Z)
    code, out = run_json(capsys, str(DATA / "workloads"), "--nodes", str(tmp_path / "nodes.yaml"))
    found = {f["workload"]["name"]: f for f in out["findings"] if f["rule"] == "cross-zone-traffic"}
    for name in (
        "pytorch-simple",
        "pytorch-dist-mnist-nccl",
        "elastic-example-imagenet",
        "dist-mnist-for-e2e-test",
        "multi-worker",
        "xgboost-dist-iris-test-train",
        "tensorflow-mnist",
        "tensorflow-benchmarks",
        "pi",
        "pytorch",
        "coordinator-example",
        "multi-node-example",
        "rayjob-sample",
    ):
        assert found[name]["certainty"] == "likely" and found[name]["severity"] == "medium", name
    # Kueue TAS couples these: no cross-zone finding.
    assert not {"jobset-tas-required", "nginx-leaderworkerset"} & {
        f["workload"]["name"] for f in out["findings"]
    }
    # The runtime patch's nodeSelector (node-type: training) matches none of these nodes.
    high = [(f["rule"], f["workload"]["name"]) for f in out["findings"] if f["severity"] == "high"]
    assert high == [("role-unschedulable", "runtime-patches-example")]
    assert code == 1
    assert out["summary"]["skipped_kinds"]["ConfigMap"] == 1


def test_single_zone_cluster_has_no_cross_zone_traffic(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "nodes.yaml").write_text(NODES_2Z.replace("zb", "za"))
    _, out = run_json(capsys, str(DATA / "workloads"), "--nodes", str(tmp_path / "nodes.yaml"))
    assert [f for f in out["findings"] if f["rule"] == "cross-zone-traffic"] == []


PYTORCH_32 = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: big
  namespace: ml
  annotations:
    placement-auditor.io/gradient-bytes: "500000000"
    placement-auditor.io/steps-per-second: "2"
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template: {spec: {containers: [{name: t, image: x}]}}
    Worker:
      replicas: 32
      template: {spec: {containers: [{name: t, image: x}]}}
"""


def test_cross_zone_cost_follows_the_ring_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(PYTORCH_32)
    (tmp_path / "nodes.yaml").write_text(NODES_2Z)
    _, out = run_json(capsys, str(tmp_path))
    (f,) = [f for f in out["findings"] if f["rule"] == "cross-zone-traffic"]
    n, g, sps = 33, 500_000_000, 2.0  # 32 workers + master in the ring
    crossing_per_step = 2 * 2 * (n - 1) / n * g  # k = 2 zones, 2(N−1)/N × G per link
    monthly_bytes = crossing_per_step * sps * 30 * 24 * 3600
    expected = monthly_bytes / 1e9 * 0.01 * 2  # AWS: $0.01/GB on each side
    assert f["estimated_monthly_cost_usd"] == pytest.approx(round(expected, 2))
    assert f["estimated_monthly_cost_usd"] == pytest.approx(201_076.36, abs=0.01)
    assert f["estimated_slowdown_pct"] > 0
    assert any("ring all-reduce over 33 ranks" in a for a in f["assumptions"])
    assert out["summary"]["estimated_monthly_cost_usd"] == f["estimated_monthly_cost_usd"]


def test_gcp_price_from_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(PYTORCH_32)
    (tmp_path / "nodes.yaml").write_text(NODES_2Z)
    cfg = tmp_path / "auditor.yaml"
    cfg.write_text("cost:\n  provider: gcp\n")
    _, out = run_json(capsys, str(tmp_path / "job.yaml"), str(tmp_path / "nodes.yaml"), "--config", str(cfg))
    (f,) = [f for f in out["findings"] if f["rule"] == "cross-zone-traffic"]
    monthly_bytes = 2 * 2 * 32 / 33 * 500_000_000 * 2 * 30 * 24 * 3600
    assert f["estimated_monthly_cost_usd"] == pytest.approx(round(monthly_bytes / 2**30 * 0.01, 2))


def test_bad_input_is_reported_and_the_rest_audited(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name in ("before", "policies.yaml", "nodes.yaml"):
        src = LAB / name
        target = tmp_path / name
        if src.is_dir():
            target.mkdir()
            (target / "workload.yaml").write_text((src / "workload.yaml").read_text())
        else:
            target.write_text(src.read_text())
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    (tmp_path / "scalar.yaml").write_text("just text\n")
    (tmp_path / "wrong-type.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: x}\nspec:\n  replicas: many\n"
        "  template: {spec: {containers: []}}\n"
    )
    (tmp_path / "future.yaml").write_text(
        "apiVersion: kubeflow.org/v9\nkind: PyTorchJob\nmetadata: {name: p}\nspec: {}\n"
    )
    (tmp_path / "ingress.yaml").write_text(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: i}\n"
    )
    (tmp_path / "bomb.yaml").write_text(
        "a: &a [x,x,x,x,x,x,x,x,x,x]\n"
        + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(10)
        )
    )
    code, out = run_json(capsys, str(tmp_path))
    assert [f["rule"] for f in out["findings"]] == ["cross-zone-blocked"]
    errors = {Path(e["file"]).name: e for e in out["errors"]}
    assert set(errors) == {"list.yaml", "scalar.yaml", "wrong-type.yaml", "future.yaml", "bomb.yaml"}
    assert errors["wrong-type.yaml"]["field"] == "spec.replicas" and errors["wrong-type.yaml"]["line"] == 5
    assert "kubeflow.org/v9" in errors["future.yaml"]["message"]
    assert out["summary"]["skipped_kinds"] == {"Ingress": 1}
    # The alias bomb was not read, so the audit is partial (3 wins over findings' 1); objects
    # that were read but are not understood are errors, not gaps.
    assert [Path(n["path"]).name for n in out["summary"]["not_audited"]] == ["bomb.yaml"]
    assert out["summary"]["complete"] is False and code == 3


def test_nothing_auditable_exits_3(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("a: [\n")
    assert main(["scan", str(tmp_path)]) == 3


def test_exit_code_does_not_depend_on_format(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    args = ["scan", "--example", "seed-lab/before"]
    assert main([*args, "--format", "json"]) == main([*args, "--format", "table"]) == 1
    assert main([*args, "--fail-on", "none"]) == 0
    out = tmp_path / "report.json"
    assert main([*args, "--format", "json", "--output", str(out)]) == 1
    assert json.loads(out.read_text())["summary"]["findings"] == 1


def test_policy_pack_and_waiver_through_the_cli(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    _, first = run_json(capsys, "--example", "seed-lab/before")
    fingerprint = first["findings"][0]["fingerprint"]
    pack = tmp_path / "team.yaml"
    pack.write_text(f"""\
apiVersion: placement-auditor.io/v1
kind: Waiver
metadata: {{name: lab-known}}
spec: {{rule: cross-zone-blocked, fingerprint: {fingerprint}, reason: lab scenario, expires: "2999-01-01"}}
""")
    code, out = run_json(capsys, "--example", "seed-lab/before", "--policy", str(pack))
    assert code == 0 and out["findings"] == [] and out["summary"]["waived"] == 1
    assert out["waived"][0]["waiver"]["reason"] == "lab scenario"
    pack.write_text(pack.read_text().replace("2999-01-01", "2020-01-01"))
    code, out = run_json(capsys, "--example", "seed-lab/before", "--policy", str(pack))
    assert code == 1 and len(out["findings"]) == 1 and out["expired_waivers"][0]["fingerprint"] == fingerprint
    pack.write_text(
        "apiVersion: placement-auditor.io/v1\nkind: PolicyPack\nmetadata: {name: t}\nspec: {rulez: {}}\n"
    )
    assert main(["scan", "--example", "seed-lab/before", "--policy", str(pack)]) == 2
    assert "spec.rulez" in capsys.readouterr().err


ZONAL_VOLUME = """\
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-1}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [za]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: strategy-volume, namespace: default}
spec: {volumeName: pv-1, accessModes: [ReadWriteOnce], resources: {requests: {storage: 10Gi}}}
"""


def test_zonal_volume_keeps_the_tfjob_in_one_zone(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "nodes.yaml").write_text(NODES_2Z)
    job = next((DATA / "workloads").glob("05-*.yaml"))
    _, out = run_json(capsys, str(job), str(tmp_path / "nodes.yaml"))
    assert [f["rule"] for f in out["findings"]] == ["cross-zone-traffic"]
    (tmp_path / "pv.yaml").write_text(ZONAL_VOLUME)
    _, out = run_json(capsys, str(job), str(tmp_path / "nodes.yaml"), str(tmp_path / "pv.yaml"))
    assert out["findings"] == [] and out["errors"] == []


def test_statefulset_claim_templates_follow_their_storage_class(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "nodes.yaml").write_text(NODES_2Z)
    (tmp_path / "sts.yaml").write_text("""\
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: zb-only}
provisioner: ebs.csi.aws.com
allowedTopologies:
- matchLabelExpressions: [{key: topology.ebs.csi.aws.com/zone, values: [zb]}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: ml}
spec:
  replicas: 3
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: c, image: x}]}
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {storageClassName: zb-only, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
""")
    from auditor.audit.explain import find_role
    from auditor.inventory import role_claim_zones
    from auditor.placement.coupling import place_roles
    from auditor.settings.config import Settings
    from auditor.sources.manifests import load_inventory

    inv = load_inventory([tmp_path], Settings())
    role = find_role(inv, "ml/db")
    placed = place_roles(
        [role], inv.nodes, "topology.kubernetes.io/zone", {role: role_claim_zones(inv, role)}
    )
    assert placed[role].zones == ("zb",)


def test_two_findings_that_differ_only_in_their_workload_reference_sort(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """before/ and after/ together: the same rule on workloads of one name in two files (findings
    sort by their references too, which once raised TypeError)."""
    code, out = run_json(capsys, str(LAB))
    assert code == 1
    # Two Jobs named trainer-workers (one per directory), each split from its coordinator by the
    # other directory's Deployment of the same name: one finding each, in file order.
    assert [(f["rule"], Path(f["workload"]["file"]).parent.name) for f in out["findings"]] == [
        ("cross-zone-blocked", "after"),
        ("cross-zone-blocked", "before"),
    ]


def test_the_report_does_not_depend_on_hash_order(tmp_path: Path) -> None:
    """One workload declared in two files (seed-lab's before/ and after/ both hold
    ml-demo/trainer-*): their edges print alike, and their order in the report once followed
    Python's string hashing. The same input must give the same bytes under any PYTHONHASHSEED."""
    import os
    import subprocess
    import sys

    args = [
        sys.executable,
        "-m",
        "auditor",
        "scan",
        str(LAB),
        str(DATA / "workloads"),
        "--format",
        "json",
        "--no-cache",
    ]
    outputs = set()
    for seed in ("0", "3", "5"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(args, check=False, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode in (0, 1), done.stderr
        outputs.add(done.stdout)
    assert len(outputs) == 1
