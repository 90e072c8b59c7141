"""Every test's `auditor scan` uses a cache of loaded files of its own session, never the user's;
`generated` / `repo`: a small generated infrastructure repository (benchmarks/gen_repo.py) and a
copy of it a test may change."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(autouse=True)
def _document_cache_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    directory = tmp_path_factory.getbasetemp() / "document-cache"
    monkeypatch.setenv("AUDITOR_CACHE_DIR", str(directory))
    yield directory


@pytest.fixture(scope="session")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import gen_repo
    finally:
        sys.path.remove(str(BENCHMARKS))
    root = tmp_path_factory.mktemp("generated") / "repo"
    gen_repo.generate_repo(root, jobs=40, policies=100, nodes=20, seed=3)
    return root


@pytest.fixture
def repo(generated: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "repo"
    shutil.copytree(generated, copy)
    return copy
