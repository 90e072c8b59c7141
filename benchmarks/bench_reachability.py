"""Reachability benchmarks. Prints figures; never fails on time.

1. Scale: all-pairs verdicts over identity classes (ClassMatrix: every ordered pair, both
   directions, every protocol/port piece) for a synthetic cluster of 150,000 pods and 10,000
   policies (30 % Cilium). Reports the median of several runs, peak RSS of the process, and as a
   baseline in the same run the per-pair engine (cached per identity) on a sample of pairs,
   extrapolated to all identity pairs.
2. Against network-config-analyzer 2.1.0 (installed into benchmarks/.venv-nca by nca_baseline):
   the same NetworkPolicy-only YAML (2,000 and 5,000 pods), full connectivity map. Ours includes
   loading the YAML, building the inventory and the map; NCA is timed as a whole process.

Each case runs in a child process so its peak RSS is its own. Targets on the 2-core machine:
scale case under 30 s and 2 GiB; at least 20× faster than NCA.

    python benchmarks/bench_reachability.py                # everything
    python benchmarks/bench_reachability.py --skip-nca     # scale case only
    python benchmarks/bench_reachability.py --pods 30000 --policies 2000 --runs 3
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import synth  # noqa: E402

from auditor import yamlio  # noqa: E402
from auditor.config import Settings  # noqa: E402
from auditor.explain import endpoint_for  # noqa: E402
from auditor.inventory import Inventory, build_inventory  # noqa: E402
from auditor.model.source import SourceRef  # noqa: E402
from auditor.reachability.matrix import ClassMatrix, ConnectivityMap  # noqa: E402

PROBES = (("TCP", 8080), ("TCP", 5432), ("UDP", 53))


def _endpoints(inv: Inventory) -> list[Any]:
    return [endpoint_for(inv, r, None) for w in inv.workloads for r in w.roles]


def child_scale(pods: int, policies: int, cilium_share: float) -> dict[str, Any]:
    objects = synth.generate(pods, policies, seed=1, cilium_share=cilium_share)
    docs = [yamlio.Document(o, SourceRef("synthetic", 1, i)) for i, o in enumerate(objects)]
    t0 = time.perf_counter()
    inv = build_inventory(docs, Settings())
    eps = _endpoints(inv)
    t1 = time.perf_counter()
    engine = inv.engine()
    matrix = ClassMatrix(engine, eps)
    t2 = time.perf_counter()
    probe_counts = {f"{p}/{n}": matrix.allowed_pod_pairs(p, n) for p, n in PROBES}
    t3 = time.perf_counter()
    # Baseline: the per-pair engine on a sample of identity pairs (fresh engine: no shared cache).
    reference = inv.engine()
    rng = random.Random(7)
    ids = matrix.identities
    sample = 20_000
    tb = time.perf_counter()
    for _ in range(sample):
        reference.flow(ids[rng.randrange(len(ids))], ids[rng.randrange(len(ids))])
    per_pair = (time.perf_counter() - tb) / sample
    return {
        "pods": pods,
        "policies": policies,
        "cilium_share": cilium_share,
        "identities": len(ids),
        "rows": len(matrix._rows),
        "inventory_s": t1 - t0,
        "matrix_s": t2 - t1,
        "probes_s": t3 - t2,
        "probe_pod_pairs": probe_counts,
        "per_pair_engine_all_identity_pairs_s": per_pair * len(ids) ** 2,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def child_map(directory: str) -> dict[str, Any]:
    files = [Path(directory) / f for f in ("namespaces.yaml", "pods.yaml", "policies.yaml")]
    t0 = time.perf_counter()
    docs, errors = yamlio.load_paths(files)
    inv = build_inventory(docs, Settings(), errors)
    matrix = ClassMatrix(inv.engine(), _endpoints(inv))
    cmap = ConnectivityMap(matrix)
    seconds = time.perf_counter() - t0
    return {
        "seconds": seconds,
        "identities": len(matrix.identities),
        "errors": len(inv.errors),
        "distinct_connection_sets": len(cmap.pod_pairs),
        "pod_pairs_with_connections": sum(v for k, v in cmap.pod_pairs.items() if k),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_child(*args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=True
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=150_000)
    ap.add_argument("--policies", type=int, default=10_000)
    ap.add_argument("--cilium-share", type=float, default=0.3)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--nca-sizes", type=int, nargs="*", default=[2000, 5000])
    ap.add_argument("--skip-nca", action="store_true")
    ap.add_argument("--child", nargs="*")
    args = ap.parse_args(argv)
    if args.child:
        kind, *rest = args.child
        result = (
            child_scale(int(rest[0]), int(rest[1]), float(rest[2])) if kind == "scale" else child_map(rest[0])
        )
        print(json.dumps(result))
        return 0

    runs = [
        run_child("scale", str(args.pods), str(args.policies), str(args.cilium_share))
        for _ in range(args.runs)
    ]
    med = {
        k: statistics.median(r[k] for r in runs)
        for k in (
            "inventory_s",
            "matrix_s",
            "probes_s",
            "peak_rss_mib",
            "per_pair_engine_all_identity_pairs_s",
        )
    }
    r0 = runs[0]
    print(
        f"scale: {args.pods} pods, {args.policies} policies ({args.cilium_share:.0%} Cilium), "
        f"{r0['identities']} identities, {r0['rows']} distinct rows; median of {args.runs} runs"
    )
    print(
        f"  inventory+endpoints {med['inventory_s']:.1f}s  all-pairs matrix {med['matrix_s']:.1f}s  "
        f"total {med['inventory_s'] + med['matrix_s']:.1f}s (target < 30 s)  "
        f"peak RSS {med['peak_rss_mib']:.0f} MiB (target < 2048)"
    )
    print(f"  pod-pair counts for {len(PROBES)} probes {med['probes_s']:.1f}s: {r0['probe_pod_pairs']}")
    print(
        f"  baseline, per-pair engine over all identity pairs (extrapolated from 20,000): "
        f"{med['per_pair_engine_all_identity_pairs_s']:.0f}s → matrix is "
        f"{med['per_pair_engine_all_identity_pairs_s'] / med['matrix_s']:.0f}× faster"
    )
    if args.skip_nca:
        return 0
    import nca_baseline

    nca = nca_baseline.ensure_nca()
    for pods in args.nca_sizes:
        with tempfile.TemporaryDirectory() as tmp:
            synth.write_yaml(synth.generate(pods, pods // 15, seed=1), Path(tmp))
            ours = [run_child("map", tmp) for _ in range(args.runs)]
            nca_seconds, _ = nca_baseline.time_nca(
                nca, {n: Path(tmp) / f"{n}.yaml" for n in ("namespaces", "pods", "policies")}
            )
        mine = statistics.median(o["seconds"] for o in ours)
        print(
            f"vs NCA {nca_baseline.NCA_VERSION}: {pods} pods, {pods // 15} NetworkPolicies: ours {mine:.2f}s "
            f"(median of {args.runs}, {ours[0]['identities']} identities, "
            f"{ours[0]['distinct_connection_sets']} distinct connection sets), NCA {nca_seconds:.1f}s → "
            f"{nca_seconds / mine:.1f}× faster (target ≥ 20×)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
