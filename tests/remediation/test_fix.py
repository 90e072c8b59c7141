"""`auditor fix`: verified, minimal fixes; the seed scenario, the corpus, and hostile files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from support import DATA

from auditor import cli

LAB = DATA / "seed-lab"


def _lab(tmp_path: Path, workload: str | None = None) -> Path:
    root = tmp_path / "lab"
    shutil.copytree(LAB, root)
    if workload is not None:
        (root / "before" / "workload.yaml").write_text(workload, newline="")
    return root


def _docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def _template(docs: list[dict], kind: str) -> dict:
    return next(d for d in docs if d["kind"] == kind)["spec"]["template"]


def _norm_tolerations(spec: dict) -> list[dict]:
    return sorted(({"operator": "Equal", **t} for t in spec.get("tolerations", [])), key=str)


def test_seed_fix_is_the_after_state_and_re_audits_clean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _lab(tmp_path)
    before = (root / "before" / "workload.yaml").read_text()
    assert cli.main(["fix", str(root / "before"), str(root / "policies.yaml"), str(root / "nodes.yaml")]) == 0
    out, err = capsys.readouterr()
    assert "re-audit: the finding is gone, no new finding" in err
    changed = [line for line in out.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert changed[0] == "-      labels: {app: trainer, role: coordinator, zone: zone-b}"
    assert len([c for c in changed if c.startswith("-")]) == 1  # only the label line is rewritten
    assert (root / "before" / "workload.yaml").read_text() == before  # a dry run writes nothing
    assert (
        cli.main(
            ["fix", "--write", str(root / "before"), str(root / "policies.yaml"), str(root / "nodes.yaml")]
        )
        == 0
    )
    fixed = _template(_docs((root / "before" / "workload.yaml").read_text()), "Deployment")
    after = _template(_docs((LAB / "after" / "workload.yaml").read_text()), "Deployment")
    assert fixed["metadata"] == after["metadata"]
    assert fixed["spec"]["affinity"] == after["spec"]["affinity"]
    assert _norm_tolerations(fixed["spec"]) == _norm_tolerations(after["spec"])
    assert {k: v for k, v in fixed["spec"].items() if k not in ("affinity", "tolerations")} == {
        k: v for k, v in after["spec"].items() if k not in ("affinity", "tolerations")
    }
    assert (
        before.splitlines()[:3] == (root / "before" / "workload.yaml").read_text().splitlines()[:3]
    )  # comments kept
    capsys.readouterr()
    assert (
        cli.main(
            [
                "scan",
                str(root / "before"),
                str(root / "policies.yaml"),
                str(root / "nodes.yaml"),
                "--format",
                "json",
            ]
        )
        == 0
    )


def test_follow_coordinator_variant_from_the_policy_pack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _lab(tmp_path)
    pack = tmp_path / "pack.yaml"
    pack.write_text(
        "apiVersion: placement-auditor.io/v1\nkind: PolicyPack\nmetadata: {name: team}\n"
        "spec:\n  rules:\n    cross-zone-blocked:\n      options: {fix: follow-coordinator}\n"
    )
    args = [
        str(root / "before"),
        str(root / "policies.yaml"),
        str(root / "nodes.yaml"),
        "--policy",
        str(pack),
    ]
    assert cli.main(["fix", "--write", *args]) == 0
    docs = _docs((root / "before" / "workload.yaml").read_text())
    workers = _template(docs, "Job")["spec"]
    [term] = workers["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term == {
        "labelSelector": {"matchLabels": {"app": "trainer", "role": "coordinator"}},
        "topologyKey": "topology.kubernetes.io/zone",
    }
    coordinator = _template(docs, "Deployment")
    assert coordinator["metadata"]["labels"]["zone"] == "zone-a"
    capsys.readouterr()
    assert cli.main(["scan", *args, "--format", "json"]) == 0


def test_every_corpus_split_gets_a_fix_or_a_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_scan import NODES_2Z

    corpus = tmp_path / "corpus"
    shutil.copytree(DATA / "workloads", corpus)
    (tmp_path / "nodes.yaml").write_text(NODES_2Z)
    cli.main(["fix", "--write", str(corpus), "--nodes", str(tmp_path / "nodes.yaml")])
    _, err = capsys.readouterr()
    fixed = [line for line in err.splitlines() if line.startswith("fix: cross-zone")]
    refused = [line for line in err.splitlines() if line.startswith("no fix: cross-zone")]
    assert len(fixed) == 12
    assert refused == [
        line for line in refused if "TrainJob" in line and "pod template is not in the manifest" in line
    ]
    assert (
        cli.main(
            [
                "scan",
                str(corpus),
                "--nodes",
                str(tmp_path / "nodes.yaml"),
                "--format",
                "json",
                "--fail-on",
                "none",
            ]
        )
        == 0
    )
    import json

    left = json.loads(capsys.readouterr().out)["findings"]
    assert [f["workload"]["name"] for f in left if f["rule"].startswith("cross-zone")] == [
        "multi-node-example"
    ]


BEFORE = (LAB / "before" / "workload.yaml").read_text()


def _fix_text(tmp_path: Path, workload: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str, str]:
    root = _lab(tmp_path, workload)
    code = cli.main(
        ["fix", "--write", str(root / "before"), str(root / "policies.yaml"), str(root / "nodes.yaml")]
    )
    out, err = capsys.readouterr()
    with (root / "before" / "workload.yaml").open(newline="") as handle:
        return code, handle.read(), out, err


def test_crlf_files_stay_crlf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, text, _, _ = _fix_text(tmp_path, BEFORE.replace("\n", "\r\n"), capsys)
    assert code == 0
    assert "\n" not in text.replace("\r\n", "")  # every line still ends in CRLF
    assert "zone: zone-a" in text and "nodeAffinity:" in text


def test_multi_document_files_and_tabs_elsewhere_are_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = '# a\ttabbed comment\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: ml-demo}\ndata: {k: "a\\tb"}\n---\n'
    code, text, _, _ = _fix_text(tmp_path, extra + BEFORE, capsys)
    assert code == 0 and text.startswith(extra)
    assert text.count("\n") == (extra + BEFORE).count("\n") + 10  # inserted lines only (and none removed)


def test_flow_style_pod_spec_is_refused_with_a_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flow = BEFORE.replace(
        """    spec:
      containers:
      - name: coordinator
        image: busybox:1.36
        command: ["sh", "-c", "while true; do nc -l -p 9999; done"]
        ports:
        - {name: rendezvous, containerPort: 9999}
        resources:
          requests: {cpu: 100m, memory: 64Mi}""",
        """    spec: {containers: [{name: coordinator, image: "busybox:1.36", ports: [{name: rendezvous, containerPort: 9999}], resources: {requests: {cpu: 100m, memory: 64Mi}}}]}""",
    )
    assert flow != BEFORE
    code, text, _, err = _fix_text(tmp_path, flow, capsys)
    assert code == 1 and text == flow  # nothing written
    assert "no fix: cross-zone-blocked" in err and "flow style" in err


def test_anchored_templates_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    anchored = BEFORE.replace(
        "  template:\n    metadata:\n      labels: {app: trainer, role: coordinator",
        "  template: &tmpl\n    metadata:\n      labels: {app: trainer, role: coordinator",
        1,
    )
    assert anchored != BEFORE
    code, text, _, err = _fix_text(tmp_path, anchored, capsys)
    assert code == 1 and text == anchored
    assert "anchor" in err


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is installed by .ci/run")
def test_kustomize_overlay_gets_a_patch_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sources.test_manifests import seed_as_kustomize

    root = seed_as_kustomize(tmp_path, "zone-b")
    base_before = (root / "base" / "workload.yaml").read_text()
    assert cli.main(["fix", "--write", str(root)]) == 0
    _, err = capsys.readouterr()
    assert "re-audit: the finding is gone" in err
    overlay = root / "overlays" / "prod"
    [patch] = overlay.glob("placement-auditor-*.yaml")
    data = yaml.safe_load(patch.read_text())
    assert data["kind"] == "Deployment" and data["metadata"]["name"] == "trainer-coordinator"
    assert data["spec"]["template"]["metadata"]["labels"] == {"zone": "zone-a"}
    kustomization = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    assert kustomization["patches"][-1] == {"path": patch.name}
    assert (root / "base" / "workload.yaml").read_text() == base_before  # the base is not touched
    assert cli.main(["scan", str(root), "--format", "json"]) == 0


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is installed by .ci/run")
def test_kustomize_overlay_of_a_jobset_gets_json_patch_operations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A JobSet's pod template sits in the replicatedJobs list: a merge patch would replace the whole
    list, so the fix is JSON patch operations on the replicated job's index, with a target."""
    import json
    import subprocess

    from test_scan import NODES_2Z

    root = tmp_path / "repo"
    base, overlay = root / "base", root / "overlays" / "prod"
    base.mkdir(parents=True)
    overlay.mkdir(parents=True)
    jobset = (DATA / "workloads" / "14-jobset-pytorch.yaml").read_text()
    (base / "jobset.yaml").write_text(jobset)
    (base / "kustomization.yaml").write_text("resources: [jobset.yaml]\n")
    (overlay / "kustomization.yaml").write_text("resources: [../../base]\nnamespace: ml\n")
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(NODES_2Z)

    def cross_zone() -> list[dict]:
        cli.main(["scan", str(root), "--nodes", str(nodes), "--format", "json", "--fail-on", "none"])
        found = json.loads(capsys.readouterr().out)["findings"]
        return [f for f in found if f["rule"].startswith("cross-zone")]

    assert [f["workload"]["name"] for f in cross_zone()] == ["pytorch"]
    assert cli.main(["fix", "--write", str(root), "--nodes", str(nodes)]) == 0
    _, err = capsys.readouterr()
    assert "re-audit: the finding is gone" in err, err
    [patch] = overlay.glob("placement-auditor-*.yaml")
    ops = yaml.safe_load(patch.read_text())
    assert isinstance(ops, list) and {op["op"] for op in ops} == {"add"}
    assert all(op["path"].startswith("/spec/replicatedJobs/0/template/spec/template/") for op in ops)
    entry = yaml.safe_load((overlay / "kustomization.yaml").read_text())["patches"][-1]
    assert entry == {
        "path": patch.name,
        "target": {
            "group": "jobset.x-k8s.io",
            "version": "v1alpha2",
            "kind": "JobSet",
            "name": "pytorch",  # no namespace: the overlay sets it after its patches
        },
    }
    assert (base / "jobset.yaml").read_text() == jobset  # the base is not touched
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(overlay)], capture_output=True, text=True, check=True
    ).stdout
    pod = yaml.safe_load(rendered)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == "topology.kubernetes.io/zone"
    assert pod["spec"]["containers"][0]["name"] == "pytorch"  # the rest of the list item kept
    assert cross_zone() == []


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is installed by .ci/run")
@pytest.mark.parametrize(
    ("manifest", "json_ops"),
    [("01-pytorchjob-master-worker.yaml", False), ("22-rayjob.yaml", True)],
)
def test_every_role_of_a_workload_lands_in_its_one_kustomize_patch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], manifest: str, json_ops: bool
) -> None:
    """A PyTorchJob's Master and Worker (one merge patch with both templates); a RayJob's head and
    worker group (a list item, so JSON patch operations for both)."""
    import json

    from test_scan import NODES_2Z

    root = tmp_path / "repo"
    base, overlay = root / "base", root / "overlays" / "prod"
    base.mkdir(parents=True)
    overlay.mkdir(parents=True)
    (base / "job.yaml").write_text((DATA / "workloads" / manifest).read_text())
    (base / "kustomization.yaml").write_text("resources: [job.yaml]\n")
    (overlay / "kustomization.yaml").write_text("resources: [../../base]\n")
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(NODES_2Z)
    assert cli.main(["fix", "--write", str(root), "--nodes", str(nodes)]) == 0
    _, err = capsys.readouterr()
    assert "re-audit: the finding is gone" in err, err
    [patch] = overlay.glob("placement-auditor-*.yaml")
    data = yaml.safe_load(patch.read_text())
    if json_ops:
        assert isinstance(data, list) and len({op["path"].split("/template/")[0] for op in data}) == 2
    else:
        assert set(data["spec"]["pytorchReplicaSpecs"]) == {"Master", "Worker"}
    cli.main(["scan", str(root), "--nodes", str(nodes), "--format", "json", "--fail-on", "none"])
    left = json.loads(capsys.readouterr().out)["findings"]
    assert [f for f in left if f["rule"].startswith("cross-zone")] == []


def test_only_remediation_keeps_the_workloads_manifests() -> None:
    """An audit lets the manifests go once its inventory is built (they were half of a large
    scan's memory); `auditor fix` asks for them and patches from them."""
    from auditor.settings.config import Settings
    from auditor.sources.manifests import load_inventory

    paths = [LAB / "before", LAB / "nodes.yaml", LAB / "policies.yaml"]
    audited = load_inventory(paths, Settings())
    kept = load_inventory(paths, Settings(), manifests=True)
    assert audited.workloads and audited.manifests == {}
    assert set(kept.manifests) == {w.ref for w in kept.workloads}
    assert all(kept.manifests[w.ref]["kind"] == w.ref.kind for w in kept.workloads)
