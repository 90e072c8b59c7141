"""The package type-checks under mypy --strict (pyproject.toml), and `@value` classes are read-only
to it: their immutability is the type checker's (auditor/model/values.py), so the suite runs it."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from auditor.model.values import value

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mypy cache for both runs (the second reads the package's analysis from it)."""
    return tmp_path_factory.mktemp("mypy-cache")


def _mypy(cache: Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("mypy")
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(cache), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
        check=False,
    )


def test_the_package_type_checks_strictly(cache: Path) -> None:
    done = _mypy(cache)  # pyproject.toml: strict, files = auditor
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_mypy_refuses_an_assignment_to_a_value_field(cache: Path, tmp_path: Path) -> None:
    (tmp_path / "mutates.py").write_text(
        "from auditor.reachability.endpoints import PodEndpoint\n"
        "from auditor.model.objects import NamedPort\n"
        "ep = PodEndpoint('ns', 'a')\n"
        "ep.node = 'n1'\n"
        "port = NamedPort('http', 'TCP', 80)\n"
        "port.port = 81\n",
        encoding="utf-8",
    )
    done = _mypy(cache, str(tmp_path / "mutates.py"))  # with pyproject.toml's strict settings
    out = done.stdout
    assert done.returncode == 1, out
    assert 'mutates.py:4: error: Property "node" defined in "PodEndpoint" is read-only' in out, out
    assert 'mutates.py:6: error: Property "port" defined in "NamedPort" is read-only' in out, out


@value(frozen=True)
class _Point:
    x: int
    y: int = 0
    tags: tuple[str, ...] = dataclasses.field(default=(), compare=False)


@value(frozen=True, order=True)
class _Ranked:
    rank: int
    name: str


def test_value_classes_are_slotted_hashable_and_compare_by_field() -> None:
    a, b = _Point(1, 2), _Point(1, 2, ("x",))
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1  # `tags` is not compared
    assert a != _Point(2, 2) and not hasattr(a, "__dict__")
    assert dataclasses.replace(a, y=5) == _Point(1, 5)
    assert sorted([_Ranked(2, "b"), _Ranked(1, "z"), _Ranked(2, "a")]) == [
        _Ranked(1, "z"),
        _Ranked(2, "a"),
        _Ranked(2, "b"),
    ]
