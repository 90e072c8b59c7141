"""The cost of reading the schedulers of 2026 (issue 35): a cold scan of the generated ~20,000-object
repository (gen_repo.py) against the same repository with the objects that decide zones besides
the nodes added, measured alternately in one run.

Added to the copy (`clusters/platform/schedulers/`):
- one Karpenter NodePool per zone for H100 capacity (the generator's H100 nodes are in two zones
  only): template labels and taint of the H100 node pool, `zone In [<zone>]`, `instance-type In
  [p5.48xlarge]`, a GPU limit;
- per-zone Kueue ResourceFlavors for the A100 pool (`node-pool: gpu-a100` and the zone, the GPU
  toleration), with every team's ClusterQueue rewritten to list the three instead of its single
  `gpu-a100` flavor (the generator already writes LocalQueues, ClusterQueues and a Topology, and
  labels a share of its jobs with a queue);
- Volcano HyperNodes for the GPU racks (tier 1, by rack label), blocks (tier 2) and zones (tier 3);
- DRA: a `gpu.nvidia.com` DeviceClass and one node-local ResourceSlice per GPU node with its GPUs
  (the generated workloads request GPUs as extended resources, so the slices are read, not claimed).

Each measurement is a child process (scan_child.py, `auditor scan --no-cache --jobs 1`), plain and
with-objects alternated, `--runs` times; medians and their ratio are printed. Target: the scan with
the objects within 5 % of the plain one (ratio ≤ 1.05). Never fails on time.

Checks (exit 1 when one fails): the plain tree gives the same report on every run; every finding
that differs between the two trees concerns a workload the added objects reach (one labelled with a
Kueue queue, or one whose finding names a NodePool), and both kinds of difference occur (the
objects were read and changed answers).

    .venv/bin/python benchmarks/bench_schedulers.py               # 20,000 objects, 3 runs
    .venv/bin/python benchmarks/bench_schedulers.py --jobs 500 --policies 1000 --nodes 150 --runs 2
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gen_repo  # noqa: E402
from bench_scan import Measured, build_mode, compile_sources, run_child  # noqa: E402
from scan_child import yaml_files  # noqa: E402
from world import growth  # noqa: E402
from world.vocabulary import BLOCK_KEY, RACK_KEY, ZONES  # noqa: E402

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _h100_labels(directory: Path) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """The labels and taints an H100 node of the generated tree carries (less its name and zone)."""
    for path in sorted((directory / "clusters/platform/nodes/gpu-h100").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "Node":
                labels = dict(doc["metadata"].get("labels") or {})
                for k in (
                    "kubernetes.io/hostname",
                    "topology.kubernetes.io/zone",
                    "eks.amazonaws.com/nodegroup",
                ):
                    labels.pop(k, None)
                return labels, list((doc.get("spec") or {}).get("taints") or [])
    raise SystemExit("WRONG: the generated tree has no H100 node")


def add_scheduler_objects(directory: Path) -> dict[str, int]:
    """Write the NodePools and per-zone flavors into `directory`; rewrite its ClusterQueues."""
    labels, taints = _h100_labels(directory)
    pools = [
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": f"gpu-h100-{zone}"},
            "spec": {
                "template": {
                    "metadata": {
                        "labels": {k: v for k, v in labels.items() if k != "node.kubernetes.io/instance-type"}
                    },
                    "spec": {
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
                        "taints": taints,
                        "requirements": [
                            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]},
                            {
                                "key": "node.kubernetes.io/instance-type",
                                "operator": "In",
                                "values": ["p5.48xlarge"],
                            },
                            {
                                "key": "karpenter.sh/capacity-type",
                                "operator": "In",
                                "values": ["on-demand", "reserved"],
                            },
                        ],
                    },
                },
                "limits": {"nvidia.com/gpu": 256},
            },
        }
        for zone in ZONES
    ]
    flavors = [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ResourceFlavor",
            "metadata": {"name": f"gpu-a100-{zone}"},
            "spec": {
                "nodeLabels": {"node-pool": "gpu-a100", "topology.kubernetes.io/zone": zone},
                "tolerations": [GPU_TOLERATION],
                "topologyName": "aws-topology",
            },
        }
        for zone in ZONES
    ]
    racks, blocks = set(), set()
    slices = []
    for path in sorted((directory / "clusters/platform/nodes").rglob("*.yaml")):
        for doc in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader):
            labels = ((doc or {}).get("metadata") or {}).get("labels") or {}
            gpus = str((((doc or {}).get("status") or {}).get("allocatable") or {}).get("nvidia.com/gpu", ""))
            if gpus.isdigit() and int(gpus):
                slices.append(_slice(str(doc["metadata"]["name"]), int(gpus)))
            if RACK_KEY in labels:
                racks.add((labels[BLOCK_KEY], labels[RACK_KEY]))
                blocks.add((labels["topology.kubernetes.io/zone"], labels[BLOCK_KEY]))
    hypernodes = [
        _hypernode(rack, 1, [{"type": "Node", "selector": {"labelMatch": {"matchLabels": {RACK_KEY: rack}}}}])
        for _, rack in sorted(racks)
    ]
    hypernodes += [
        _hypernode(
            block,
            2,
            [
                {"type": "HyperNode", "selector": {"exactMatch": {"name": r}}}
                for b, r in sorted(racks)
                if b == block
            ],
        )
        for _, block in sorted(blocks)
    ]
    hypernodes += [
        _hypernode(
            f"zone-{zone}",
            3,
            [
                {"type": "HyperNode", "selector": {"exactMatch": {"name": b}}}
                for z, b in sorted(blocks)
                if z == zone
            ],
        )
        for zone in ZONES
    ]
    out = directory / "clusters/platform/schedulers"
    out.mkdir(parents=True, exist_ok=True)
    (out / "nodepools.yaml").write_text(yaml.safe_dump_all(pools, sort_keys=False))
    (out / "flavors.yaml").write_text(yaml.safe_dump_all(flavors, sort_keys=False))
    (out / "hypernodes.yaml").write_text(yaml.safe_dump_all(hypernodes, sort_keys=False))
    (out / "dra.yaml").write_text(yaml.safe_dump_all([DEVICE_CLASS, *slices], sort_keys=False))
    queues_file = directory / "clusters/platform/kueue/cluster-queues.yaml"
    queues = [d for d in yaml.safe_load_all(queues_file.read_text()) if d]
    for cq in queues:
        for group in cq["spec"]["resourceGroups"]:
            resources = group["flavors"][0]["resources"]
            group["flavors"] = [{"name": f["metadata"]["name"], "resources": resources} for f in flavors]
    queues_file.write_text(yaml.safe_dump_all(queues, sort_keys=False))
    return {
        "NodePool": len(pools),
        "ResourceFlavor": len(flavors),
        "ClusterQueue": len(queues),
        "HyperNode": len(hypernodes),
        "ResourceSlice": len(slices),
    }


DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
}


def _slice(node: str, gpus: int) -> dict[str, Any]:
    """The ResourceSlice NVIDIA's DRA driver publishes for a GPU node: its GPUs, node-local."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {"index": {"int": i}, "productName": {"string": "NVIDIA H100 80GB HBM3"}},
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for i in range(gpus)
            ],
        },
    }


def _hypernode(name: str, tier: int, members: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "topology.volcano.sh/v1alpha1",
        "kind": "HyperNode",
        "metadata": {"name": name},
        "spec": {"tier": tier, "members": members},
    }


def queued_workloads(directory: Path) -> set[tuple[str, str]]:
    """(namespace, name) of every object labelled with a Kueue queue."""
    out: set[tuple[str, str]] = set()
    for path in yaml_files(directory):
        text = path.read_text()
        if QUEUE_LABEL not in text:
            continue
        for doc in yaml.load_all(text, Loader=yaml.CSafeLoader):
            meta = (doc or {}).get("metadata") or {}
            if QUEUE_LABEL in (meta.get("labels") or {}):
                out.add((str(meta.get("namespace") or "default"), str(meta.get("name"))))
    return out


def findings(report: Path) -> dict[str, dict[str, Any]]:
    data = json.loads(report.read_text())
    return {f["fingerprint"]: f for f in data["findings"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--policies", type=int, default=5000)
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    print(growth.machine_load())
    mode, why = build_mode()
    print(f"auditor build: {mode} ({why})")
    with tempfile.TemporaryDirectory(prefix="bench-sched-") as tmp_:
        tmp = Path(tmp_)
        plain, sched = tmp / "plain", tmp / "sched"
        counts = gen_repo.generate_repo(plain, args.jobs, args.policies, args.nodes, args.seed)
        shutil.copytree(plain, sched)
        added = add_scheduler_objects(sched)
        print(f"repository: {counts['objects']:,} objects in {counts['files']:,} files; added {added}")
        compile_sources(HERE.parent)
        runs = {"plain": Measured(), "sched": Measured()}
        reports: dict[str, list[str]] = {"plain": [], "sched": []}
        for i in range(args.runs):
            for name, tree in (("plain", plain), ("sched", sched)):
                out = tmp / f"{name}-{i}.json"
                run_child(["scan", str(tree), str(out), "1", "--no-cache"], runs[name])
                reports[name].append(out.read_text())
        p, s = runs["plain"], runs["sched"]
        ratio = s.median / p.median
        print(
            f"cold scan, one process, median of {args.runs}: plain {p.median:.2f} s "
            f"(peak RSS {p.peak_rss / 2**20:,.0f} MiB), with the scheduler objects {s.median:.2f} s "
            f"(peak RSS {s.peak_rss / 2**20:,.0f} MiB): ratio {ratio:.3f} (target ≤ 1.05: "
            f"{'met' if ratio <= 1.05 else 'MISSED'})"
        )
        plain_runs = ", ".join(f"{x:.2f}" for x in p.seconds)
        sched_runs = ", ".join(f"{x:.2f}" for x in s.seconds)
        print(f"  runs plain: {plain_runs}; with objects: {sched_runs}")
        wrong: list[str] = []
        if len(set(reports["plain"])) != 1:
            wrong.append("the plain tree's reports differ between runs")
        if len(set(reports["sched"])) != 1:
            wrong.append("the with-objects tree's reports differ between runs")
        before, after = findings(tmp / "plain-0.json"), findings(tmp / "sched-0.json")
        queued = queued_workloads(sched)
        changed = [after[k] for k in after.keys() - before.keys()] + [
            before[k] for k in before.keys() - after.keys()
        ]
        by_queue = by_pool = 0
        for f in changed:
            w = f.get("workload") or {}
            key = (str(w.get("namespace")), str(w.get("name")))
            if "NodePool" in f.get("message", ""):
                by_pool += 1
            elif key in queued:
                by_queue += 1
            else:
                wrong.append(
                    f"a finding changed for a workload the added objects do not reach: {f['rule']} {key}"
                )
        print(
            f"findings: {len(before):,} plain, {len(after):,} with the objects; {len(changed):,} differ "
            f"({by_pool:,} naming a NodePool, {by_queue:,} of Kueue-queued workloads)"
        )
        if not by_pool:
            wrong.append("no finding names a NodePool: the pools were not read")
        if not by_queue:
            wrong.append("no finding of a queued workload changed: the flavors were not read")
        for w in wrong[:20]:
            print(f"WRONG: {w}")
        if statistics.median(p.seconds) <= 0:
            wrong.append("no time measured")
        return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
