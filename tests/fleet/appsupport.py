"""The App's repository of the fleet tests: a bare `acme/infra` on disk holding the seed lab's
workload and nodes, and the local GitHub serving it as an App installation (id 7)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from fakegithub import FakeGitHub
from fleetsupport import APP_ID, app_key
from gitsupport import Origin
from seedrepo import SEED


class AppRepo(NamedTuple):
    key_file: Path
    origin: Origin
    main_sha: str
    hub: FakeGitHub


def app_repo(tmp_path: Path) -> AppRepo:
    key_file, public = app_key(tmp_path)
    (tmp_path / "acme").mkdir()
    origin = Origin(tmp_path / "acme")
    # origin.bare is acme/origin.git: the App's clone_url names it by {full_name}.
    (tmp_path / "acme" / "infra.git").symlink_to(origin.bare)
    main_sha = origin.commit(
        {"training/workload.yaml": SEED / "before" / "workload.yaml", "nodes/nodes.yaml": SEED / "nodes.yaml"}
    )
    hub = FakeGitHub(origin.bare, app_id=APP_ID, tokens=set(), app_public_key=public, installation_ids=(7,))
    return AppRepo(key_file, origin, main_sha, hub)
