"""One measured child run of bench_scan.py: `parse DIR` (PyYAML's C loader over every file, the
parse floor) or `scan DIR OUTPUT JOBS [FLAGS]` (`auditor scan` in this process). Its last stdout
line is a JSON object with the in-process seconds.

A module of its own, importing nothing but the standard library's basics and the auditor: the
child's process CPU is compared with the `auditor` program's, so it must not carry the parent
harness's imports (statistics, subprocess, the generator, Checkov's installer: 0.05 s a process,
a tenth of a re-scan).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SUFFIXES = (".yaml", ".yml", ".json")


def yaml_files(directory: Path) -> Iterator[Path]:
    """Files a scan of `directory` reads: by suffix, hidden directories skipped, sorted."""
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.endswith(SUFFIXES):
                yield Path(root) / name


def child_parse(directory: Path) -> dict[str, Any]:
    import yaml

    t0 = time.perf_counter()
    files = docs = 0
    for path in yaml_files(directory):
        text = path.read_text(encoding="utf-8")
        docs += len(list(yaml.load_all(text, Loader=yaml.CSafeLoader)))
        files += 1
    return {"seconds": time.perf_counter() - t0, "files": files, "documents": docs}


def child_scan(directory: Path, output: str, jobs: str = "0", *flags: str) -> dict[str, Any]:
    """`flags`: `--no-cache`, `--cache-dir DIR`, or `--base TREE` (import auditor from TREE, whose
    scan may know neither cache flag) followed by the flags that tree knows."""
    rest = list(flags)
    if rest[:1] == ["--base"]:
        sys.path.insert(0, rest[1])
        rest = rest[2:]
    # Imported as the `auditor` program imports it (its script is auditor.__main__:entry, which
    # imports the CLI with the collector paused; a --base tree may predate that).
    import auditor.__main__  # noqa: F401
    from auditor import cli

    argv = ["scan", str(directory), "--format", "json", "--output", output, "--fail-on", "none"]
    t0 = time.perf_counter()
    code = cli.main([*argv, "--jobs", jobs, *rest], one_shot=True)
    seconds = time.perf_counter() - t0
    # How many worker processes this `--jobs` value starts now (1: the work stays in this
    # process), decided as the scan decided it (auditor.parallel.workers_for; a --base tree may
    # predate it).
    parallel = sys.modules.get("auditor.parallel")
    decide = getattr(parallel, "workers_for", None)
    workers = decide(int(jobs) or None) if decide is not None else None
    return {"seconds": seconds, "exit": code, "auditor": cli.__file__, "workers": workers}


def main(argv: list[str]) -> int:
    kind, directory = argv[0], Path(argv[1])
    result = child_parse(directory) if kind == "parse" else child_scan(directory, *argv[2:])
    print(json.dumps(result), flush=True)
    cli = sys.modules.get("auditor.cli")
    if getattr(cli, "_KEPT", None):
        # Leave as the tree's own `auditor` program does after a one-shot audit (cli.entry:
        # os._exit, without freeing what the audit built), so process CPU is the program's.
        leave = getattr(cli, "leave", None)  # (a --base tree may predate it)
        if leave is not None:
            leave(0)
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
