"""Kustomize directories are rendered with the real kubectl; Helm charts without helm are not audited."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support import DATA

from auditor.settings.config import Settings
from auditor.sources.manifests import Tools, collect, load_inventory

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is installed by .ci/run")


def seed_as_kustomize(tmp_path: Path, zone_label: str) -> Path:
    base = tmp_path / "base"
    base.mkdir()
    for name in ("policies.yaml", "nodes.yaml"):
        (tmp_path / name).write_text((DATA / "seed-lab" / name).read_text())
    (base / "workload.yaml").write_text((DATA / "seed-lab" / "before" / "workload.yaml").read_text())
    (base / "kustomization.yaml").write_text("resources: [workload.yaml]\n")
    overlay = tmp_path / "overlays" / "prod"
    overlay.mkdir(parents=True)
    (overlay / "kustomization.yaml").write_text(f"""\
resources: [../../base]
patches:
- target: {{kind: Deployment, name: trainer-coordinator}}
  patch: |
    - op: replace
      path: /spec/template/metadata/labels/zone
      value: {zone_label}
""")
    return tmp_path


def test_overlay_is_rendered_once_and_its_patch_counts(tmp_path: Path) -> None:
    root = seed_as_kustomize(tmp_path, "zone-b")
    inv = load_inventory([root], Settings())
    assert inv.errors == []
    names = sorted(w.ref.name for w in inv.workloads)
    assert names == ["trainer-coordinator", "trainer-workers"]  # base not audited a second time
    coord = next(w for w in inv.workloads if w.ref.name == "trainer-coordinator")
    assert coord.roles[0].template.label_map["zone"] == "zone-b"
    assert coord.ref.source.file.endswith("base/workload.yaml") and coord.ref.source.line > 0


def test_broken_overlay_is_an_error_on_its_kustomization(tmp_path: Path) -> None:
    root = seed_as_kustomize(tmp_path, "zone-b")
    # A missing patch file: kubectl itself fails (a missing *resource* is refused before it runs,
    # since kustomize would try it as a remote: tests/sources/test_hostile_trees.py).
    (root / "overlays" / "prod" / "kustomization.yaml").write_text(
        "resources: [../../base]\npatches:\n- path: missing-patch.yaml\n"
    )
    inv = load_inventory([root], Settings())
    (err,) = [e for e in inv.errors if "Kustomize build failed" in e.message]
    assert err.file.endswith("overlays/prod/kustomization.yaml") and err.line == 1
    assert [n.path for n in inv.not_audited] == [err.file]  # the audit is partial
    assert len(inv.policies) == 3 and len(inv.nodes) == 5  # everything else still loads


def test_chart_without_helm_is_skipped_with_the_reason(tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: c\nversion: 0.1.0\n")
    (chart / "templates" / "job.yaml").write_text("replicas: {{ .Values.n }}\n")
    out = collect([tmp_path], Tools(kubectl=shutil.which("kubectl"), helm=None))
    assert out.documents == []
    reason = "Helm chart skipped: helm is not installed"
    assert [(e.file, e.message) for e in out.errors] == [(f"{tmp_path}/chart/Chart.yaml", reason)]
    assert [(n.path, n.reason) for n in out.not_audited] == [(f"{tmp_path}/chart/Chart.yaml", reason)]


def test_without_kubectl_kustomize_dirs_are_skipped(tmp_path: Path) -> None:
    root = seed_as_kustomize(tmp_path, "zone-b")
    out = collect([root], Tools(kubectl=None, helm=None))
    assert [n.reason for n in out.not_audited] == ["Kustomize directory skipped: kubectl is not installed"]
    assert out.not_audited[0].path.endswith("overlays/prod/kustomization.yaml")
    assert not any(d.source.file.endswith("workload.yaml") for d in out.documents)
