"""The wheel ships policies/ and templates/ inside the package, and the bundled example."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from auditor.resources import examples_dir, migrations_dir, policies_dir, templates_dir

ROOT = Path(__file__).resolve().parents[1]


def test_installed_package_exposes_policies_templates_and_examples() -> None:
    assert (policies_dir() / "README.md").is_file()
    assert (templates_dir() / "README.md").is_file()
    assert (examples_dir() / "seed-lab" / "policies.yaml").is_file()
    assert (migrations_dir() / "env.py").is_file()


def test_wheel_contents(tmp_path: Path) -> None:
    # Its contents, not mypyc's two minutes (setup.py): tests/test_native.py checks the build.
    env = {**os.environ, "AUDITOR_PURE_PYTHON_BUILD": "1"}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        env=env,
    )
    (wheel,) = tmp_path.glob("placement_auditor-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in (
        "auditor/_policies/README.md",
        "auditor/_templates/README.md",
        "auditor/py.typed",
        "auditor/examples/seed-lab/before/workload.yaml",
        "auditor/reachability/engine.py",
        "auditor/examples/service.yaml",
        "auditor/_migrations/env.py",
        "auditor/_migrations/script.py.mako",
        "auditor/_migrations/versions/0001_initial.py",
        "auditor/store/schema.py",
    ):
        assert expected in names
    assert not any(n.startswith(("tests/", "benchmarks/")) for n in names)
