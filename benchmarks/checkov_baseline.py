"""Baseline: time Checkov's Kubernetes scan of a directory, so our scan can be compared with it in
the same run.

Checkov lives in its own venv (benchmarks/.venv-checkov/, git-ignored) so its many pinned
dependencies never touch ours. It runs offline (`--skip-download`: no guideline or policy
download from the Prisma/Bridgecrew platform) with only the `kubernetes` framework, JSON output
written to a file. Checkov exits 1 when checks fail, which is the normal outcome: a run counts
when its JSON report exists and names the kubernetes check type.

    python benchmarks/checkov_baseline.py DIR            # time Checkov on an existing directory
    python benchmarks/checkov_baseline.py                # generated repos: 1,000 and 4,000 objects
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CHECKOV_VERSION = "3.3.30"
DEFAULT_VENV = HERE / ".venv-checkov"


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _installed_version(venv_dir: Path) -> str | None:
    found = sorted(venv_dir.glob("lib/python*/site-packages/checkov-*.dist-info"))
    return found[-1].name.removeprefix("checkov-").removesuffix(".dist-info") if found else None


def ensure_checkov(venv_dir: Path = DEFAULT_VENV, version: str = CHECKOV_VERSION) -> Path:
    """Create `venv_dir` with checkov==`version` unless already there; return its `checkov`.

    Fast when present (a directory look-up, no pip call). Prints the version in use."""
    checkov = venv_dir / "bin" / "checkov"
    if not (checkov.exists() and _installed_version(venv_dir) == version):
        if not (venv_dir / "bin" / "python").exists():
            subprocess.run(
                [sys.executable, "-m", "venv", str(venv_dir)], check=True, capture_output=True, text=True
            )
        print(f"installing checkov=={version} into {venv_dir} (a minute or so) ...", flush=True)
        proc = subprocess.run(
            [
                str(venv_dir / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                f"checkov=={version}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0 or not checkov.exists():
            raise RuntimeError(
                f"installing checkov=={version} into {venv_dir} failed "
                f"(exit {proc.returncode}):\n{_tail(proc.stderr or proc.stdout)}"
            )
    print(f"checkov {_installed_version(venv_dir)} ({checkov})", flush=True)
    return checkov


@dataclass(frozen=True)
class CheckovRun:
    seconds: float
    peak_rss_bytes: int
    resources: int  # Checkov's resource_count (objects plus their containers)
    passed: int
    failed: int
    parsing_errors: int
    version: str


def run_checkov(checkov: Path, directory: Path, timeout: float = 3600) -> CheckovRun:
    """One Checkov Kubernetes scan of `directory`, timed as a whole process (wall clock), with the
    child's own peak RSS. Raises RuntimeError when it crashes, times out or writes no report."""
    with tempfile.TemporaryDirectory(prefix="checkov-out-") as out_dir:
        err_path = Path(out_dir) / "stderr.txt"
        cmd = [
            str(checkov),
            "-d",
            str(directory),
            "--framework",
            "kubernetes",
            "--quiet",
            "--compact",
            "--skip-download",
            "-o",
            "json",
            "--output-file-path",
            out_dir,
        ]
        env = {**os.environ, "LOG_LEVEL": "WARNING", "BC_SKIP_MAPPING": "TRUE"}
        with err_path.open("w") as err:
            t0 = time.perf_counter()
            proc = subprocess.Popen(
                cmd, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL, env=env
            )
            deadline = t0 + timeout
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if time.perf_counter() > deadline:
                    proc.kill()
                    os.wait4(proc.pid, 0)
                    raise RuntimeError(f"checkov timed out after {timeout:.0f} s on {directory}")
                time.sleep(0.05)
            seconds = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        report = Path(out_dir) / "results_json.json"
        stderr = err_path.read_text(errors="replace")
        # Exit 1 means "some checks failed": expected. Anything else, or no report, is an error.
        if proc.returncode not in (0, 1) or not report.exists():
            raise RuntimeError(
                f"checkov failed on {directory} (exit {proc.returncode}, report "
                f"{'present' if report.exists() else 'missing'}):\n{_tail(stderr)}"
            )
        data: Any = json.loads(report.read_text())
        runs = data if isinstance(data, list) else [data]
        k8s = next((r for r in runs if isinstance(r, dict) and r.get("check_type") == "kubernetes"), None)
        if k8s is None:
            raise RuntimeError(f"checkov wrote no kubernetes results for {directory}:\n{_tail(stderr)}")
        summary = k8s.get("summary", {})
    return CheckovRun(
        seconds,
        usage.ru_maxrss * 1024,
        int(summary.get("resource_count", 0)),
        int(summary.get("passed", 0)),
        int(summary.get("failed", 0)),
        int(summary.get("parsing_errors", 0)),
        str(summary.get("checkov_version", "")),
    )


def time_checkov(checkov: Path, directory: Path, timeout: float = 3600) -> float:
    """Seconds (wall clock, whole process) of one Checkov Kubernetes scan of `directory`."""
    return run_checkov(checkov, directory, timeout).seconds


def describe(run: CheckovRun) -> str:
    return (
        f"{run.seconds:.1f} s, peak RSS {run.peak_rss_bytes / 2**20:,.0f} MiB, "
        f"{run.resources:,} resources, {run.failed:,} failed / {run.passed:,} passed checks, "
        f"{run.parsing_errors} parsing errors"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time Checkov's Kubernetes scan.")
    parser.add_argument(
        "directory", nargs="?", type=Path, help="directory to scan (default: generated repos)"
    )
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args(argv)
    checkov = ensure_checkov(args.venv)
    if args.directory:
        print(f"{args.directory}: {describe(run_checkov(checkov, args.directory, args.timeout))}")
        return 0
    sys.path.insert(0, str(HERE))
    from gen_repo import generate_repo

    for jobs, policies, nodes in ((100, 250, 25), (400, 1000, 100)):
        with tempfile.TemporaryDirectory(prefix="checkov-repo-") as tmp:
            counts = generate_repo(Path(tmp), jobs, policies, nodes)
            run = run_checkov(checkov, Path(tmp), args.timeout)
            print(f"{counts['objects']:,} objects in {counts['files']:,} files: {describe(run)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
