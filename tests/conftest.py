"""Every test's `auditor scan` uses a cache of loaded files of its own session, never the user's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _document_cache_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    directory = tmp_path_factory.getbasetemp() / "document-cache"
    monkeypatch.setenv("AUDITOR_CACHE_DIR", str(directory))
    yield directory
