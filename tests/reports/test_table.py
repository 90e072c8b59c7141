"""The terminal table prints what the manifests say, never what a terminal would obey: control
characters in workload names, namespaces, file paths, messages and errors are shown escaped."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from auditor.reports.table import clean
from auditor.resources import examples_dir

ROOT = Path(__file__).resolve().parents[2]
SEED = examples_dir() / "seed-lab"
# Anything a terminal acts on: C0 (ESC, BEL, CR, BS …), DEL and C1 (CSI, OSC as one byte).
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def _hostile_tree(tmp: Path) -> Path:
    """The seed lab's broken workload, its Job renamed (a YAML double-quoted string may hold any
    control character), in a file whose name holds an escape sequence too."""
    workload = (SEED / "before" / "workload.yaml").read_text(encoding="utf-8")
    workload = workload.replace("  name: trainer-workers\n", '  name: "trainer\\e[2J\\rok\\a\\u009b31m"\n', 1)
    tree = tmp / "tree"
    tree.mkdir()
    (tree / "work\x1b]0;pwned\x07load.yaml").write_text(workload, encoding="utf-8")
    (tree / "broken\x1b[8m.yaml").write_text("kind: [unclosed\n", encoding="utf-8")
    return tree


def test_control_characters_in_names_and_paths_are_escaped(tmp_path: Path) -> None:
    tree = _hostile_tree(tmp_path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "auditor",
            "scan",
            str(tree),
            str(SEED / "policies.yaml"),
            str(SEED / "nodes.yaml"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    out = done.stdout
    # 3, not 1: the broken file was not audited, and an incomplete audit never looks like a result.
    assert done.returncode == 3, done.stderr
    assert CONTROL.search(done.stderr) is None, repr(done.stderr)
    assert "CRITICAL  cross-zone-blocked" in out
    assert CONTROL.search(out) is None, repr(out)
    assert "Job ml-demo/trainer\\x1b[2J\\rok\\x07\\x9b31m  " in out
    assert "work\\x1b]0;pwned\\x07load.yaml:" in out
    assert "broken\\x1b[8m.yaml" in out  # the error line names the file it could not read


def test_colour_codes_are_ours_alone() -> None:
    assert clean("a\x1b[31mb\tc\nd\x7f\x85") == "a\\x1b[31mb\\tc\\nd\\x7f\\x85"
    assert clean("zone-a → zone-b, ünïcode") == "zone-a → zone-b, ünïcode"
