"""Baseline: IBM/np-guard network-config-analyzer (`nca`) computing the full connectivity map of a
synthetic cluster from `world.netpol`, on NCA's own input format (a NamespaceList, a PodList and the
policies, as `--ns_list`, `--pod_list`, `--connectivity`), so our engine can be compared with it.

NCA lives in its own venv (benchmarks/.venv-nca/, git-ignored) so its pinned dependencies never touch
ours. At 5,000 pods and one policy per two pods NCA takes about 40 minutes on this machine, so it is
run once and its answer kept: `--record` writes the pod-pair connectivity it printed
(`--output_format txt_no_fw_rules`: one `src => dst : connections` line per pod pair it allows
anything) to benchmarks/reference/, with the input files' hashes, its wall and CPU time and the date.
bench_reachability.py compares every pod pair with that answer. Usage:

    python benchmarks/nca_baseline.py 5000 --record      # ~40 min: writes the reference
    python benchmarks/nca_baseline.py 600                # a quick timing, nothing written
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from world import netpol

NCA_VERSION = "2.1.0"
HERE = Path(__file__).resolve().parent
DEFAULT_VENV = HERE / ".venv-nca"
REFERENCE_DIR = HERE / "reference"
OUTPUT_FORMAT = "txt_no_fw_rules"
INPUT_FILES = ("namespaces", "pods", "policies")


def policies_for(pods: int) -> int:
    """One NetworkPolicy per two pods (issue 17's NCA comparison)."""
    return pods // 2


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def ensure_nca(venv_dir: Path = DEFAULT_VENV) -> Path:
    """Create `venv_dir` with network-config-analyzer==2.1.0 unless already there; return its `nca`."""
    nca = venv_dir / "bin" / "nca"
    dist_info = f"network_config_analyzer-{NCA_VERSION}.dist-info"
    if nca.exists() and any(venv_dir.glob(f"lib/python*/site-packages/{dist_info}")):
        return nca
    if not (venv_dir / "bin" / "python").exists():
        subprocess.run(["python3", "-m", "venv", str(venv_dir)], check=True, capture_output=True, text=True)
    proc = subprocess.run(
        [
            str(venv_dir / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            f"network-config-analyzer=={NCA_VERSION}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0 or not nca.exists():
        raise RuntimeError(
            f"installing network-config-analyzer=={NCA_VERSION} into {venv_dir} failed "
            f"(exit {proc.returncode}):\n{_tail(proc.stderr or proc.stdout)}"
        )
    return nca


def world(pods: int, seed: int = 1) -> list[dict[str, Any]]:
    """The NetworkPolicy-only world of `pods` pods and one policy per two pods."""
    return netpol.generate(pods, policies_for(pods), seed=seed, cilium_share=0.0)


def write_inputs(pods: int, directory: Path, seed: int = 1) -> dict[str, Path]:
    """`world(pods)` in NCA's input format; returns the three files."""
    return netpol.write_yaml(world(pods, seed), directory)


def input_hashes(files: dict[str, Path]) -> dict[str, str]:
    return {name: hashlib.sha256(files[name].read_bytes()).hexdigest() for name in INPUT_FILES}


def nca_command(nca: Path, files: dict[str, Path], output_format: str = OUTPUT_FORMAT) -> list[str]:
    return [
        str(nca),
        "--connectivity",
        str(files["policies"]),
        "--ns_list",
        str(files["namespaces"]),
        "--pod_list",
        str(files["pods"]),
        "--output_format",
        output_format,
    ]


@dataclass(frozen=True)
class NcaRun:
    seconds: float  # wall
    cpu_seconds: float  # user + system of the nca process
    stdout: str


def run_nca(nca: Path, files: dict[str, Path], timeout: float, output_format: str = OUTPUT_FORMAT) -> NcaRun:
    cmd = nca_command(nca, files, output_format)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"nca timed out after {timeout:g} s: {' '.join(cmd)}") from exc
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0 or "=>" not in proc.stdout:
        raise RuntimeError(
            f"nca exited {proc.returncode} without a connectivity map: {' '.join(cmd)}\n"
            f"stdout:\n{_tail(proc.stdout)}\nstderr:\n{_tail(proc.stderr)}"
        )
    return NcaRun(seconds, cpu, proc.stdout)


# -- NCA's answer ---------------------------------------------------------------------------------

_LINE = re.compile(r"^(?P<src>\S+) => (?P<dst>\S+) : (?P<conns>.*)$")
_CUBE = re.compile(r"\{protocols:(?P<protocols>[^:]*?)(?:,dst_ports:(?P<ports>[0-9,\-]+))?\}")
ALL = "all"  # NCA's "All connections": every protocol (not only TCP/UDP/SCTP), every port

Conns = str | dict[str, tuple[tuple[int, int], ...]]  # ALL, or protocol → sorted port intervals


def parse_connections(text: str) -> Conns:
    """NCA's text for one pair's connections: `All connections` or `{protocols:TCP, UDP,dst_ports:53,80-90}`
    cubes joined by commas. Anything else is an error (an unknown shape must not pass as agreement)."""
    if text == "All connections":
        return ALL
    out: dict[str, list[tuple[int, int]]] = {}
    rest = text
    while rest:
        m = _CUBE.match(rest)
        if not m:
            raise ValueError(f"unrecognised NCA connections {text!r} at {rest!r}")
        ports: list[tuple[int, int]] = []
        for item in (m["ports"] or "1-65535").split(","):
            lo, _, hi = item.partition("-")
            ports.append((int(lo), int(hi or lo)))
        for proto in m["protocols"].split(","):
            out.setdefault(proto.strip(), []).extend(ports)
        rest = rest[m.end() :]
        rest = rest[1:] if rest.startswith(",") else rest
    return {p: _merge(iv) for p, iv in out.items()}


def _merge(intervals: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(intervals):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return tuple(merged)


@dataclass(frozen=True)
class NcaAnswer:
    pairs: dict[tuple[str, str], Conns]  # ("ns/pod", "ns/pod") → connections; absent = nothing
    ip_lines: int  # lines with an IP range on one side (not pod pairs)
    endpoints: int  # "cluster has N unique endpoints"


def parse_answer(stdout: str) -> NcaAnswer:
    pairs: dict[tuple[str, str], Conns] = {}
    ip_lines = 0
    endpoints = -1
    for line in stdout.splitlines():
        if line.startswith("global: cluster has "):
            endpoints = int(line.split()[3])
        m = _LINE.match(line)
        if not m:
            continue
        src, dst = m["src"], m["dst"]
        if src[0].isdigit() or dst[0].isdigit():
            ip_lines += 1
            continue
        for end in (src, dst):
            if not end.endswith("[Pod]"):
                raise ValueError(f"NCA line names a {end!r}, not a pod: {line!r}")
        pairs[(src[: -len("[Pod]")], dst[: -len("[Pod]")])] = parse_connections(m["conns"])
    if endpoints < 0:
        raise ValueError("NCA output has no 'global: cluster has N unique endpoints' line")
    return NcaAnswer(pairs, ip_lines, endpoints)


def reference_path(pods: int) -> Path:
    return REFERENCE_DIR / f"nca-{NCA_VERSION}-pods{pods}.txt.gz"


def save_reference(pods: int, files: dict[str, Path], run: NcaRun) -> Path:
    path = reference_path(pods)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {
        "nca": NCA_VERSION,
        "pods": pods,
        "policies": policies_for(pods),
        "inputs_sha256": input_hashes(files),
        "wall_seconds": round(run.seconds, 1),
        "cpu_seconds": round(run.cpu_seconds, 1),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(["nca", *nca_command(Path("nca"), files)[1:]]),
    }
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=9) as out:
        out.write("# " + json.dumps(header) + "\n" + run.stdout)
    return path


def load_reference(pods: int) -> tuple[dict[str, object], str]:
    """(header, NCA's stdout) of a recorded run."""
    with gzip.open(reference_path(pods), "rt", encoding="utf-8") as f:
        first = f.readline()
        return json.loads(first[2:]), f.read()


def adopt(pods: int, directory: Path, seed: int) -> int:
    """Record the answer of an nca run started by hand on `write_inputs(pods)` in `directory`."""
    with tempfile.TemporaryDirectory(prefix="nca-bench-") as tmp:
        files = write_inputs(pods, Path(tmp), seed)
        want = input_hashes(files)
    have = input_hashes({n: directory / f"{n}.yaml" for n in INPUT_FILES})
    if have != want:
        print(f"{directory} does not hold the inputs of {pods} pods (seed {seed})", file=sys.stderr)
        return 1
    fields = (directory / "time.txt").read_text().split()
    wall, user, system = float(fields[0]), float(fields[3]), float(fields[6])
    run = NcaRun(wall, user + system, (directory / "out.txt").read_text())
    parse_answer(run.stdout)
    files = {n: directory / f"{n}.yaml" for n in INPUT_FILES}
    print(f"recorded {save_reference(pods, files, run)}: wall {wall:.0f}s, cpu {user + system:.0f}s")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("sizes", nargs="*", type=int, default=[5000], help="pod counts")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=4 * 3600)
    parser.add_argument("--record", action="store_true", help="keep NCA's answer in benchmarks/reference/")
    parser.add_argument(
        "--adopt",
        type=Path,
        default=None,
        help="record a run made by hand in DIR instead (DIR/out.txt, DIR/time.txt from GNU time "
        "-f '%%e s wall %%U s user %%S s sys %%M KB maxrss', inputs checked by hash)",
    )
    parser.add_argument("--keep", type=Path, default=None, help="write the YAML here instead of a temp dir")
    args = parser.parse_args(argv)

    if args.adopt:
        return adopt(args.sizes[0], args.adopt, args.seed)
    nca = ensure_nca()
    for pods in args.sizes:
        with tempfile.TemporaryDirectory(prefix="nca-bench-") as tmp:
            directory = args.keep / f"p{pods}" if args.keep else Path(tmp)
            files = write_inputs(pods, directory, args.seed)
            print("$ " + " ".join(nca_command(nca, files)), file=sys.stderr)
            run = run_nca(nca, files, args.timeout)
            answer = parse_answer(run.stdout)
            print(
                f"nca pods={pods} policies={policies_for(pods)} wall={run.seconds:.1f}s "
                f"cpu={run.cpu_seconds:.1f}s "
                f"pod pairs with connections={len(answer.pairs)}",
                flush=True,
            )
            if args.record:
                print(f"recorded {save_reference(pods, files, run)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
