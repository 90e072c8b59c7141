"""`auditor explain --placement NS/NAME`: per role, the zones it can reach and every object that
narrowed or widened them, with file and line (auditor/audit/placement_explain.py).

Test data: tests/data/capacity (the Karpenter documentation's NodePool), tests/data/dra (the
dra-example-driver's claim template, DeviceClasses and slices: worker-c in zone-c has no GPU),
tests/data/kueue (one ResourceFlavor per zone); the rest is written here, into files, so every
file:line the output names can be checked against the file it points at.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support import DATA, inventory, node_yaml

from auditor.audit.explain import ExplainError
from auditor.audit.placement_explain import (
    SCHEMA,
    Origin,
    PlacementExplanation,
    Step,
    clean,
    explain_placement,
    to_json,
    to_text,
)
from auditor.cli import main
from auditor.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE

CAP = DATA / "capacity"
DRA = DATA / "dra"
KUEUE = DATA / "kueue"
ZONE = "topology.kubernetes.io/zone"


def deployment(spec: str = "", name: str = "web", replicas: int = 3) -> str:
    """A Deployment in namespace ml; `spec` is extra pod spec lines (indented 6 spaces)."""
    return f"""apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: ml}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
{spec}      containers: [{{name: c, image: x}}]
"""


def tainted_node(name: str, zone: str) -> str:
    return (
        f"---\napiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{{ZONE}: {zone}}}}}\n"
        "spec:\n  taints: [{key: gpu, value: 'true', effect: NoSchedule}]\n"
    )


def write(tmp_path: Path, **files: str) -> list[Path]:
    out = []
    for name, text in files.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        out.append(path)
    return out


def steps(exp: PlacementExplanation, role: int = 0) -> dict[str, Step]:
    """The narrowing steps of one role, by plugin."""
    return {s.plugin: s for s in exp.roles[role].narrowed}


# --- narrowing ---------------------------------------------------------------------------------


def test_a_node_selector_narrows_to_one_zone_and_names_the_workload(tmp_path: Path) -> None:
    nodes, web = write(
        tmp_path,
        nodes=node_yaml("a1", "za") + node_yaml("a2", "za") + node_yaml("b1", "zb"),
        web=deployment(f"      nodeSelector: {{{ZONE}: za}}\n"),
    )
    exp = explain_placement(inventory(paths=[nodes, web]), "ml/web")
    (role,) = exp.roles
    assert [(z.zone, z.present) for z in role.start] == [("za", 2), ("zb", 1)]
    (step,) = role.narrowed
    assert (step.plugin, step.nodes, step.removed_zones) == ("NodeAffinity", ("b1",), ("zb",))
    assert step.decided_by == (Origin("Deployment", "ml/web", str(web), 1),)
    assert f"nodeSelector {ZONE}=za, node has {ZONE}=zb" in step.detail
    assert role.zones == ("za",) and role.nodes == 2 and role.max_replicas is None
    assert "one zone only" in role.one_zone and exp.placeable
    text = to_text(exp)
    assert "    - NodeAffinity: 1 node (b1), removes zone zb" in text
    assert f"      decided by Deployment ml/web ({web}:1)" in text
    assert "  result: placeable: zones za; 2 nodes" in text


def test_a_taint_on_the_nodes_of_one_zone_names_each_node(tmp_path: Path) -> None:
    nodes, web = write(
        tmp_path,
        nodes=node_yaml("a1", "za") + tainted_node("b1", "zb") + tainted_node("b2", "zb"),
        web=deployment(),
    )
    exp = explain_placement(inventory(paths=[nodes, web]), "ml/web")
    (step,) = exp.roles[0].narrowed
    assert step.plugin == "TaintToleration" and step.reason == "untolerated taint gpu=true:NoSchedule"
    assert step.nodes == ("b1", "b2") and step.removed_zones == ("zb",)
    # node_yaml is 4 lines with its `---`; each tainted node 6: b1 starts on line 6, b2 on line 12.
    assert step.decided_by == (Origin("Node", "b1", str(nodes), 6), Origin("Node", "b2", str(nodes), 12))
    assert nodes.read_text().splitlines()[5] == "apiVersion: v1"
    assert f"decided by Node b1 ({nodes}:6), Node b2 ({nodes}:12)" in to_text(exp)


def test_zones_are_removed_by_the_step_that_rejects_their_last_node(tmp_path: Path) -> None:
    # zb: one node fails the nodeSelector, the other the taint; zc: every node fails the selector.
    text = (
        node_yaml("a1", "za", pool="gpu")
        + node_yaml("b1", "zb")
        + tainted_node("b2", "zb").replace(f"{ZONE}: zb", f"{ZONE}: zb, pool: gpu")
        + node_yaml("c1", "zc")
    )
    nodes, web = write(tmp_path, nodes=text, web=deployment("      nodeSelector: {pool: gpu}\n"))
    exp = explain_placement(inventory(paths=[nodes, web]), "ml/web")
    found = steps(exp)
    assert list(found) == ["NodeAffinity", "TaintToleration"]  # the filters' order
    affinity, taint = exp.roles[0].narrowed
    assert affinity.nodes == ("b1", "c1") and affinity.removed_zones == ("zc",)
    assert "nodeSelector pool=gpu, node has no pool label" in affinity.detail
    assert taint.nodes == ("b2",) and taint.removed_zones == ("zb",)
    assert exp.roles[0].zones == ("za",)


def test_an_unschedulable_role_exits_1_and_says_so(tmp_path: Path) -> None:
    nodes, web = write(
        tmp_path, nodes=node_yaml("a1", "za"), web=deployment("      nodeSelector: {gpu: 'true'}\n")
    )
    exp = explain_placement(inventory(paths=[nodes, web]), "ml/web")
    assert exp.roles[0].unschedulable and not exp.placeable and exp.outcome == "unschedulable"
    assert exp.roles[0].narrowed[0].removed_zones == ("za",)
    assert "  result: UNSCHEDULABLE: no node passes the filters" in to_text(exp)
    assert main(["explain", str(tmp_path), "--placement", "ml/web"]) == EXIT_FINDINGS


def test_a_cordoned_node_is_decided_by_the_node(tmp_path: Path) -> None:
    cordoned = (
        f"---\napiVersion: v1\nkind: Node\nmetadata: {{name: b1, labels: {{{ZONE}: zb}}}}\n"
        "spec: {unschedulable: true}\n"
    )
    nodes, web = write(tmp_path, nodes=node_yaml("a1", "za") + cordoned, web=deployment())
    (step,) = explain_placement(inventory(paths=[nodes, web]), "ml/web").roles[0].narrowed
    assert step.plugin == "NodeUnschedulable" and step.removed_zones == ("zb",)
    assert step.decided_by == (Origin("Node", "b1", str(nodes), 6),)


def test_only_some_replicas_fitting_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gpu_node = (
        "---\napiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{{zone}: {z}}}}}\n"
        "status: {{allocatable: {{cpu: '64', memory: 512Gi, pods: '110', nvidia.com/gpu: '8'}}}}\n"
    )
    nodes = "".join(gpu_node.format(name=n, zone=ZONE, z=z) for n, z in (("a1", "za"), ("b1", "zb")))
    gpus = "      containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: '8'}}}]\n"
    web = deployment(replicas=3).replace("      containers: [{name: c, image: x}]\n", gpus)
    write(tmp_path, nodes=nodes, web=web)
    exp = explain_placement(inventory(paths=sorted(tmp_path.glob("*.yaml"))), "ml/web")
    (role,) = exp.roles
    assert role.max_replicas == 2 and role.partly_unschedulable and exp.outcome == "partly-unschedulable"
    assert "nvidia.com/gpu" in role.capacity_reason
    assert "only 2 of 3 replicas can be placed" in to_text(exp)
    assert main(["explain", str(tmp_path), "--placement", "ml/web"]) == EXIT_FINDINGS
    assert "PARTLY UNSCHEDULABLE" in capsys.readouterr().out


# --- widening ----------------------------------------------------------------------------------


def test_a_karpenter_node_pool_widens_to_a_new_zone_with_its_file_and_line(tmp_path: Path) -> None:
    tolerate = "      tolerations: [{key: example.com/special-taint, operator: Exists, effect: NoSchedule}]\n"
    nodes, web = write(tmp_path, nodes=node_yaml("n1", "us-west-2a"), web=deployment(tolerate))
    pool = CAP / "nodepool-docs.yaml"
    exp = explain_placement(inventory(paths=[nodes, web, pool]), "ml/web")
    (role,) = exp.roles
    at_pool = Origin("NodePool", "default", str(pool), 1)
    assert [(z.zone, z.present, z.to_be_made) for z in role.start] == [
        ("us-west-2a", 1, (at_pool,)),
        ("us-west-2b", 0, (at_pool,)),
    ]
    assert role.narrowed == ()
    assert [(w.zone, w.through) for w in role.widened] == [("us-west-2b", (at_pool,))]
    assert role.zones == ("us-west-2a", "us-west-2b") and role.nodes == 1 and role.made_by == (at_pool,)
    text = to_text(exp)
    assert f"    + us-west-2b only through NodePool default ({pool}:1)" in text
    assert f"    us-west-2b: 0 nodes; to be made by NodePool default ({pool}:1)" in text


def test_a_pool_whose_taint_the_pod_does_not_tolerate_is_a_narrowing_step(tmp_path: Path) -> None:
    nodes, web = write(tmp_path, nodes=node_yaml("n1", "us-west-2a"), web=deployment())
    pool = CAP / "nodepool-docs.yaml"
    exp = explain_placement(inventory(paths=[nodes, web, pool]), "ml/web")
    (step,) = exp.roles[0].narrowed
    assert step.plugin == "TaintToleration" and step.removed_zones == ("us-west-2b",)
    assert set(step.nodes) == {"nodepool/default/us-west-2a", "nodepool/default/us-west-2b"}
    assert step.decided_by == (Origin("NodePool", "default", str(pool), 1),)
    assert exp.roles[0].widened == ()


# --- DRA, Kueue, Volcano -----------------------------------------------------------------------


def test_a_claim_template_rejects_the_node_without_a_gpu() -> None:
    files = [DRA / f for f in ("nodes.yaml", "deviceclass.yaml", "slices.yaml", "resourceclaimtemplate.yaml")]
    inv = inventory(paths=files)
    assert not inv.errors
    exp = explain_placement(inv, "basic-resourceclaimtemplate/pod0")
    (step,) = exp.roles[0].narrowed
    assert (step.plugin, step.nodes, step.removed_zones) == ("DynamicResources", ("worker-c",), ("zone-c",))
    assert "ResourceClaimTemplate single-gpu" in step.reason
    template, device_class = step.decided_by
    assert template == Origin(
        "ResourceClaimTemplate",
        "basic-resourceclaimtemplate/single-gpu",
        str(DRA / "resourceclaimtemplate.yaml"),
        1,
    )
    assert device_class == Origin("DeviceClass", "gpu.example.com", str(DRA / "deviceclass.yaml"), 1)
    assert exp.roles[0].zones == ("zone-a", "zone-b")


def kueue_job(tmp_path: Path) -> list[Path]:
    spec = (
        "{containers: [{name: t, image: x, resources: {requests: {cpu: '1', nvidia.com/gpu: '1'}, "
        "limits: {nvidia.com/gpu: '1'}}}]}"
    )
    job = f"""apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: j, namespace: ml, labels: {{kueue.x-k8s.io/queue-name: team-queue}}}}
spec:
  pytorchReplicaSpecs:
    Master: {{replicas: 1, template: {{metadata: {{labels: {{app: train}}}}, spec: {spec}}}}}
    Worker: {{replicas: 4, template: {{metadata: {{labels: {{app: train}}}}, spec: {spec}}}}}
"""
    nodes = node_yaml("a1", "zone-a") + node_yaml("b1", "zone-b") + node_yaml("c1", "zone-c")
    return [*write(tmp_path, nodes=nodes, job=job), KUEUE / "zone-flavors.yaml"]


def test_kueue_flavors_and_the_cluster_queue_decide_with_the_template(tmp_path: Path) -> None:
    paths = kueue_job(tmp_path)
    exp = explain_placement(inventory(paths=paths), "ml/j/Worker")
    (role,) = exp.roles
    assert role.role == "ml/j/Worker" and role.replicas == 4
    flavors = KUEUE / "zone-flavors.yaml"
    queue = Origin("ClusterQueue", "gpu-queue", str(flavors), 18)
    zone_a = Origin("ResourceFlavor", "zone-a", str(flavors), 2)
    zone_b = Origin("ResourceFlavor", "zone-b", str(flavors), 10)
    assert role.admitted_by == (queue, zone_a, zone_b)
    (step,) = role.narrowed
    assert step.plugin == "NodeAffinity" and step.removed_zones == ("zone-c",)
    # The Worker's replica spec is line 7 of the job file.
    assert step.decided_by == (Origin("PyTorchJob", "ml/j", str(paths[1]), 7), queue, zone_a, zone_b)
    assert "ResourceFlavor" in role.one_zone or "Kueue" in role.one_zone


def test_a_workload_name_explains_every_role_in_order(tmp_path: Path) -> None:
    exp = explain_placement(inventory(paths=kueue_job(tmp_path)), "ml/j")
    assert [r.role for r in exp.roles] == ["ml/j/Master", "ml/j/Worker"]
    assert (
        explain_placement(inventory(paths=kueue_job(tmp_path)), "ml/j/worker").roles[0].role == "ml/j/Worker"
    )


def test_volcano_network_topology_names_the_hypernodes() -> None:
    volcano = DATA / "volcano"
    nodes = "".join(
        f"---\napiVersion: v1\nkind: Node\nmetadata: {{name: node-{i}, labels: {{{ZONE}: "
        f"{'zone-a' if i < 4 else 'zone-b'}}}}}\n"
        for i in range(9)  # node-8 is in no HyperNode
    )
    inv = inventory(
        text=nodes + "---\n" + (volcano / "job.yaml").read_text(), paths=[volcano / "hypernodes.yaml"]
    )
    exp = explain_placement(inv, "ml/mindspore-cpu")
    step = steps(exp)["NetworkTopology"]
    assert step.nodes == ("node-8",)
    kinds = [o.kind for o in step.decided_by]
    assert kinds[0] == "Job" and set(kinds[1:]) == {"HyperNode"}
    assert all(o.file == str(volcano / "hypernodes.yaml") and o.line > 0 for o in step.decided_by[1:])


# --- output ------------------------------------------------------------------------------------


def test_json_output_shape(tmp_path: Path) -> None:
    nodes, web = write(
        tmp_path, nodes=node_yaml("a1", "za") + tainted_node("b1", "zb"), web=deployment(replicas=2)
    )
    doc: Any = to_json(explain_placement(inventory(paths=[nodes, web]), "ml/web"), [])
    assert doc["schema"] == SCHEMA and doc["name"] == "ml/web" and doc["verdict"] == "placeable"
    assert doc["zone_key"] == ZONE and doc["errors"] == []
    (role,) = doc["roles"]
    assert role["role"] == "ml/web" and role["replicas"] == 2 and role["verdict"] == "placeable"
    assert role["workload"] == {"kind": "Deployment", "name": "ml/web", "file": str(web), "line": 1}
    assert role["start"] == [
        {"zone": "za", "nodes": 1, "to_be_made_by": []},
        {"zone": "zb", "nodes": 1, "to_be_made_by": []},
    ]
    assert role["narrowed"] == [
        {
            "plugin": "TaintToleration",
            "reason": "untolerated taint gpu=true:NoSchedule",
            "node_count": 1,
            "nodes": ["b1"],
            "removed_zones": ["zb"],
            "decided_by": [{"kind": "Node", "name": "b1", "file": str(nodes), "line": 6}],
        }
    ]
    assert role["widened"] == []
    assert role["result"] == {
        "zones": ["za"],
        "nodes": 1,
        "to_be_made_nodes": 0,
        "to_be_made_by": [],
        "max_replicas": None,
        "capacity_reason": "",
        "one_zone": "ml/web can land in one zone only",
        "forced_spread": "",
    }
    assert role["admitted_by"] == [] and role["shared_claims"] == [] and role["notes"] == []
    json.dumps(doc)  # serialisable as is


def test_a_volume_zone_names_the_claim_without_inventing_its_location(tmp_path: Path) -> None:
    # The inventory keeps the zones of a claim, not where the claim was read: the claim is named
    # without a file:line, the workload that mounts it with its own.
    storage = f"""apiVersion: v1
kind: PersistentVolume
metadata: {{name: pv-data}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{{key: {ZONE}, operator: In, values: [za]}}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data, namespace: ml}}
spec: {{volumeName: pv-data, accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Gi}}}}}}
"""
    mount = "      volumes: [{name: d, persistentVolumeClaim: {claimName: data}}]\n"
    nodes, web, _ = write(
        tmp_path,
        nodes=node_yaml("a1", "za") + node_yaml("b1", "zb"),
        web=deployment(mount),
        storage=storage,
    )
    exp = explain_placement(inventory(paths=[nodes, web, tmp_path / "storage.yaml"]), "ml/web")
    (step,) = exp.roles[0].narrowed
    assert (step.plugin, step.nodes, step.removed_zones) == ("VolumeZone", ("b1",), ("zb",))
    claim, workload = step.decided_by
    assert claim == Origin("PersistentVolumeClaim", "ml/data") and claim.where == ""
    assert workload == Origin("Deployment", "ml/web", str(web), 1)
    assert f"decided by PersistentVolumeClaim ml/data, Deployment ml/web ({web}:1)" in to_text(exp)
    doc: Any = to_json(exp, [])
    assert doc["roles"][0]["narrowed"][0]["decided_by"][0] == {
        "kind": "PersistentVolumeClaim",
        "name": "ml/data",
    }


def test_control_characters_from_manifests_are_escaped_in_text(tmp_path: Path) -> None:
    evil = (
        f'---\napiVersion: v1\nkind: Node\nmetadata: {{name: "evil\\e[2J\\u202e", labels: {{{ZONE}: zb}}}}\n'
    )
    nodes, web = write(
        tmp_path, nodes=node_yaml("a1", "za") + evil, web=deployment(f"      nodeSelector: {{{ZONE}: za}}\n")
    )
    text = to_text(explain_placement(inventory(paths=[nodes, web]), "ml/web"))
    assert "\x1b" not in text and "\u202e" not in text
    assert "evil\\x1b[2J\\u202e" in text
    assert clean("a\rb\tc\x9b") == "a\\rb\\tc\\x9b"


# --- names -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("ml/wbe", "no pod or workload ml/wbe in the manifests (did you mean: ml/web)"),
        ("ml/web/Worker", "ml/web has no role 'Worker' (roles: web)"),
        ("ml", "expected NS/NAME or NS/WORKLOAD/ROLE"),
        ("other/thing", "(known: ml/web)"),
    ],
)
def test_unknown_names_are_explained(tmp_path: Path, name: str, message: str) -> None:
    inv = inventory(paths=write(tmp_path, nodes=node_yaml("a1", "za"), web=deployment()))
    with pytest.raises(ExplainError) as caught:
        explain_placement(inv, name)
    assert message in str(caught.value)


def test_without_nodes_there_is_nothing_to_explain(tmp_path: Path) -> None:
    with pytest.raises(ExplainError, match="no Node objects"):
        explain_placement(inventory(paths=write(tmp_path, web=deployment())), "ml/web")


# --- the CLI -----------------------------------------------------------------------------------


def test_cli_end_to_end_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, nodes=node_yaml("a1", "za") + tainted_node("b1", "zb"), web=deployment())
    (tmp_path / "broken.yaml").write_text("kind: [unclosed\n")
    assert main(["explain", str(tmp_path), "--placement", "ml/web"]) == EXIT_OK
    out, err = capsys.readouterr()
    assert out.startswith(f"ml/web: 3 replicas of Deployment ml/web ({tmp_path / 'web.yaml'}:1)\n")
    assert "TaintToleration: 1 node (b1), removes zone zb" in out
    assert "warning:" in err and "broken.yaml" in err
    assert main(["explain", str(tmp_path), "--placement", "ml/web", "--format", "json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == SCHEMA and doc["roles"][0]["narrowed"][0]["plugin"] == "TaintToleration"
    assert any("broken.yaml" in e["file"] for e in doc["errors"])


def test_cli_unknown_name_exits_2_with_close_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, nodes=node_yaml("a1", "za"), web=deployment())
    assert main(["explain", str(tmp_path), "--placement", "ml/webb"]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == ""
    assert (
        err.strip() == "error: 'ml/webb': no pod or workload ml/webb in the manifests (did you mean: ml/web)"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--placement", "ml/web", "--from", "ml/web"], "--placement cannot be combined with --from"),
        (["--placement", "ml/web", "--to-zone", "za"], "--placement cannot be combined with --to-zone"),
        (["--from", "ml/web", "--to", "ml/web"], "missing: --port"),
        ([], "explain needs --from, --to and --port"),
    ],
)
def test_cli_asks_exactly_one_question(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    write(tmp_path, nodes=node_yaml("a1", "za"), web=deployment())
    assert main(["explain", str(tmp_path), *args]) == EXIT_USAGE
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: ") and message in line


def test_the_module_runs_as_a_program(tmp_path: Path) -> None:
    import subprocess
    import sys

    write(tmp_path, nodes=node_yaml("a1", "za"), web=deployment("      nodeSelector: {gpu: 'true'}\n"))
    done = subprocess.run(
        [sys.executable, "-m", "auditor", "explain", ".", "--placement", "ml/web"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        timeout=120,
    )
    assert done.returncode == EXIT_FINDINGS, done.stderr
    assert "decided by Deployment ml/web (web.yaml:1)" in done.stdout
    assert "UNSCHEDULABLE" in done.stdout
