"""Baseline: time IBM/np-guard network-config-analyzer (`nca`) computing the full connectivity map of a
synthetic cluster from `synth`, so our engine can be compared with it in the same run.

NCA lives in its own venv (benchmarks/.venv-nca/, git-ignored) so its pinned dependencies never touch
ours. Usage:

    python benchmarks/nca_baseline.py                 # 2000 and 5000 pods, policies = pods // 15
    python benchmarks/nca_baseline.py 2000 --policies 150
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import synth

NCA_VERSION = "2.1.0"
DEFAULT_VENV = Path(__file__).resolve().parent / ".venv-nca"


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


def nca_command(nca: Path, files: dict[str, Path], output_format: str = "txt") -> list[str]:
    """The connectivity-map invocation for the files written by `synth.write_yaml`."""
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


def time_nca(
    nca: Path, files: dict[str, Path], timeout: float = 900, *, output_format: str = "txt"
) -> tuple[float, str]:
    """Run NCA's connectivity-map query on `files`; return (wall seconds, stdout)."""
    cmd = nca_command(nca, files, output_format)
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"nca timed out after {timeout:g} s: {' '.join(cmd)}") from exc
    seconds = time.perf_counter() - start
    out = proc.stdout
    if proc.returncode != 0:
        raise RuntimeError(f"nca exited {proc.returncode}: {' '.join(cmd)}\n{_tail(proc.stderr or out)}")
    # txt output: "final fw rules for query: ..." then one "src..." rule line per connection group.
    rules = [line for line in out.splitlines() if line.startswith("src")]
    if not out.strip() or (output_format == "txt" and not rules):
        raise RuntimeError(
            f"nca printed no connectivity map: {' '.join(cmd)}\n"
            f"stdout:\n{_tail(out)}\nstderr:\n{_tail(proc.stderr)}"
        )
    return seconds, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("sizes", nargs="*", type=int, default=[2000, 5000], help="pod counts")
    parser.add_argument("--policies", type=int, default=None, help="policy count (default: pods // 15)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument(
        "--output-format", default="txt", help="nca --output_format (txt, txt_no_fw_rules, ...)"
    )
    parser.add_argument("--keep", type=Path, default=None, help="write the YAML here instead of a temp dir")
    args = parser.parse_args(argv)

    nca = ensure_nca()
    for pods in args.sizes:
        policies = args.policies if args.policies is not None else pods // 15
        objects = synth.generate(pods, policies, seed=args.seed, cilium_share=0.0)
        with tempfile.TemporaryDirectory(prefix="nca-bench-") as tmp:
            directory = args.keep / f"p{pods}" if args.keep else Path(tmp)
            files = synth.write_yaml(objects, directory)
            print("$ " + " ".join(nca_command(nca, files, args.output_format)), file=sys.stderr)
            seconds, out = time_nca(nca, files, args.timeout, output_format=args.output_format)
        print(
            f"nca pods={pods} policies={policies} seconds={seconds:.2f} lines={len(out.splitlines())}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
