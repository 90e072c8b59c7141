"""A stored audit that could not see everything is `partial` and resolves nothing: a Kustomize
directory skipped (no kubectl) or refused (a remote component), on real directories and real git
repositories, on SQLite and PostgreSQL."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from dbsupport import Clock
from gitsupport import Origin
from seedrepo import SEED, seed_files
from sqlalchemy import Engine

from auditor.service.runner import AuditRunner
from auditor.settings.config import Settings, load_settings
from auditor.sources.manifests import Tools
from auditor.store.repository import FindingFilter, Store, TargetSpec

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is installed by .ci/run")


def _settings(tmp_path: Path, targets_yaml: str) -> Settings:
    config = tmp_path / "auditor.yaml"
    config.write_text(f"service:\n  git_cache_dir: cache\n  heartbeat_seconds: 1\ntargets:\n{targets_yaml}")
    return load_settings(config)


def _store(settings: Settings, engine: Engine, clock: Clock) -> Store:
    store = Store(engine, clock)
    store.sync_targets(
        TargetSpec(t.name, t.kind, t.location, None, t.paths, t.nodes, t.schedule) for t in settings.targets
    )
    return store


def _findings(store: Store, target: str) -> list[tuple[str, str]]:
    return sorted((f.rule, f.status) for f in store.findings(FindingFilter(target=target), 100).items)


def _kustomized(repo: Path) -> None:
    """The seed workload behind a kustomization, policies and nodes as raw files."""
    for name, src in seed_files("before").items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(Path(src).read_bytes())
    (repo / "training" / "kustomization.yaml").write_text("resources: [workload.yaml]\n")


def test_a_kustomization_skipped_for_want_of_kubectl_makes_the_run_partial(
    tmp_path: Path, engine: Engine, clock: Clock
) -> None:
    repo = tmp_path / "repo"
    _kustomized(repo)
    settings = _settings(tmp_path, f"  - name: dir\n    directory: '{repo}'\n")
    store = _store(settings, engine, clock)
    first = AuditRunner(settings, store, Tools(KUBECTL, None), owner="test:1").run("dir")
    assert first is not None and first.status == "succeeded", first
    assert _findings(store, "dir") == [("cross-zone-blocked", "new")]
    clock.advance(days=1)
    # The same tree on a host without kubectl: the workload is not seen, and is not fixed either.
    second = AuditRunner(settings, store, Tools(None, None), owner="test:1").run("dir")
    assert second is not None and second.status == "partial", second
    assert second.summary is not None and second.summary.resolved == 0
    assert _findings(store, "dir") == [("cross-zone-blocked", "new")]
    run = store.run(second.run_id)
    assert run is not None and "nothing was resolved" in run.error
    (gap,) = [e for e in run.load_errors if "kubectl is not installed" in e["message"]]
    assert gap["file"].endswith("training/kustomization.yaml")


def test_a_git_target_whose_kustomization_turns_remote_is_partial_and_resolves_nothing(
    tmp_path: Path, engine: Engine, clock: Clock
) -> None:
    origin = Origin(tmp_path)
    origin.commit(seed_files("before"), "training group")
    settings = _settings(
        tmp_path,
        f"  - name: lab\n    git: {{url: '{origin.bare}', branch: main}}\n"
        "    paths: [training, policies]\n    nodes: [nodes/nodes.yaml]\n",
    )
    store = _store(settings, engine, clock)
    runner = AuditRunner(settings, store, Tools(KUBECTL, None), owner="test:1")
    assert runner.run("lab").status == "succeeded"  # type: ignore[union-attr]
    # The workload moves to a base outside the audited paths but inside the repository: allowed.
    origin.commit(
        {
            "bases/job/workload.yaml": SEED / "before" / "workload.yaml",
            "bases/job/kustomization.yaml": "resources: [workload.yaml]\n",
            "training/kustomization.yaml": "resources: [../bases/job]\n",
        },
        "kustomize the training group",
        remove=("training/workload.yaml",),
    )
    clock.advance(days=1)
    second = runner.run("lab")
    assert second is not None and second.status == "succeeded", store.run(second.run_id)  # type: ignore[union-attr]
    assert _findings(store, "lab") == [("cross-zone-blocked", "open")]
    # Now it also pulls a remote component: refused, never fetched; the run cannot say it is fixed.
    origin.commit(
        {
            "training/kustomization.yaml": (
                "resources: [../bases/job]\ncomponents: [github.com/org/repo//components/zone?ref=v1]\n"
            )
        },
        "a remote component",
    )
    clock.advance(days=1)
    third = runner.run("lab")
    assert third is not None and third.status == "partial", third
    assert third.summary is not None and third.summary.resolved == 0
    assert _findings(store, "lab") == [("cross-zone-blocked", "open")]
    run = store.run(third.run_id)
    assert run is not None
    (refusal,) = [e for e in run.load_errors if "remote reference" in e["message"]]
    assert refusal["file"].endswith("training/kustomization.yaml") and refusal["line"] == 2
