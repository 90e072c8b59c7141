"""Read manifests from the file system through the one YAML loader."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from auditor import yamlio
from auditor.config import Settings
from auditor.inventory import Inventory, build_inventory


def load_inventory(paths: Sequence[Path], settings: Settings) -> Inventory:
    documents, errors = yamlio.load_paths(list(paths))
    return build_inventory(documents, settings, errors)
