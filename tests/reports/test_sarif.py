"""SARIF that code scanning accepts: every SARIF the tool writes (scan, scan of stdin, a partial
scan, a cluster audit, a stored report) validates against the official SARIF 2.1.0 schema
(tests/data/sarif/) and passes the validator rules checkable offline (tests/schemas.py names them:
SARIF1001, 1002, 1004, 1005, 1007, 1009, 1010, 1011, 2001, 2005, 2012, plus GitHub's needs)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from gitrepos import make_repo
from schemas import sarif_problems
from seedrepo import SEED, seed_files

from auditor import cli
from auditor.reports import sarif

ROOT = Path(__file__).resolve().parents[2]
CUSTOM_PACK = """\
apiVersion: placement-auditor.io/v1
kind: PolicyPack
metadata: {name: team-ml}
spec:
  customRules:
  - id: every-role-is-seen
    title: Every role is seen
    severity: low
    symptoms: [cost]
    message: the role exists
    condition: role.replicas >= 1
  rules:
    cross-zone-blocked: {severity: medium}
    every-role-is-seen: {severity: high}
"""


def _sarif(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = cli.main(["scan", *args, "--format", "sarif"])
    return code, json.loads(capsys.readouterr().out)


def _uris(run: dict) -> list[dict]:
    return [loc["physicalLocation"]["artifactLocation"] for r in run["results"] for loc in r["locations"]]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", seed_files("before"))


def test_repository_relative_uris_under_srcroot(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(repo / "training")  # a relative path from a subdirectory of the repository
    code, doc = _sarif(capsys, ".", "../policies", "--nodes", "../nodes/nodes.yaml")
    assert code == 1
    assert sarif_problems(doc) == []
    (run,) = doc["runs"]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == repo.resolve().as_uri() + "/"
    assert _uris(run) == [{"uri": "training/workload.yaml", "uriBaseId": "%SRCROOT%"}]
    related = run["results"][0]["relatedLocations"]
    assert {r["physicalLocation"]["artifactLocation"]["uri"] for r in related} == {"policies/cilium.yaml"}
    assert run["invocations"][0]["executionSuccessful"] is True


def test_every_rule_has_help_and_a_help_uri_into_the_docs(capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = _sarif(capsys, "--example", "seed-lab/before")
    assert code == 1 and sarif_problems(doc) == []
    rules = doc["runs"][0]["tool"]["driver"]["rules"]
    headings = {
        sarif.github_anchor(line.lstrip("#"))
        for line in (ROOT / "docs/rules.md").read_text().splitlines()
        if line.startswith("## ")
    }
    for rule in rules:
        page, _, anchor = rule["helpUri"].removeprefix(sarif.DOCS_URL).partition("#")
        assert page == "docs/rules.md" and anchor in headings, rule["id"]
        assert rule["help"]["markdown"] and rule["shortDescription"]["text"].endswith(".")


def test_custom_cel_rule_and_severity_override(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A custom CEL rule that fires used to crash SARIF (KeyError); a pack's severity override
    changes security-severity and the default level, not only the result's level."""
    (repo / "pack.yaml").write_text(CUSTOM_PACK)
    code, doc = _sarif(
        capsys,
        str(repo / "training"),
        str(repo / "policies"),
        "--nodes",
        str(repo / "nodes"),
        "--policy",
        str(repo / "pack.yaml"),
    )
    assert code == 1 and sarif_problems(doc) == []
    (run,) = doc["runs"]
    rules = {r["id"]: r for r in run["tool"]["driver"]["rules"]}
    custom = rules["every-role-is-seen"]
    assert custom["properties"]["security-severity"] == sarif.SECURITY_SEVERITY["high"]
    assert custom["defaultConfiguration"]["level"] == "error"
    assert "role.replicas >= 1" in custom["help"]["markdown"] and custom["helpUri"].endswith(
        "policies/README.md#a-pack"
    )
    blocked = rules["cross-zone-blocked"]
    assert blocked["properties"]["security-severity"] == sarif.SECURITY_SEVERITY["medium"] == "5.5"
    assert blocked["defaultConfiguration"]["level"] == "warning"
    by_rule = {r["ruleId"]: r for r in run["results"]}
    assert by_rule["cross-zone-blocked"]["level"] == "warning"
    assert (
        run["tool"]["driver"]["rules"][by_rule["every-role-is-seen"]["ruleIndex"]]["id"]
        == "every-role-is-seen"
    )
    # Policy-pack headings are real anchors.
    assert "## A pack" in (ROOT / "policies/README.md").read_text()


def test_a_partial_audit_is_not_a_successful_execution(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (repo / "training" / "broken.yaml").write_text("kind: [unclosed\n")
    code, doc = _sarif(capsys, str(repo))
    assert code == 3 and sarif_problems(doc) == []
    invocation = doc["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    (note,) = [n for n in invocation["toolExecutionNotifications"] if "broken.yaml" in json.dumps(n)]
    assert note["level"] == "error"
    assert note["locations"][0]["physicalLocation"]["artifactLocation"] == {
        "uri": "training/broken.yaml",
        "uriBaseId": "%SRCROOT%",
    }


def test_stdin_objects_have_logical_locations(tmp_path: Path) -> None:
    stream = "\n---\n".join(p.read_text() for p in (SEED / "before/workload.yaml", SEED / "policies.yaml"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "auditor",
            "scan",
            "-",
            "--nodes",
            str(SEED / "nodes.yaml"),
            "--format",
            "sarif",
        ],
        input=stream,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "AUDITOR_CONFIG": ""},
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert sarif_problems(doc) == []
    (result,) = doc["runs"][0]["results"]
    assert result["locations"] == [
        {
            "logicalLocations": [
                {
                    "fullyQualifiedName": "ml-demo/Job/trainer-workers",
                    "name": "trainer-workers",
                    "kind": "object",
                }
            ]
        }
    ]


def test_uris_are_percent_encoded_and_files_outside_the_root_are_absolute(tmp_path: Path) -> None:
    root = sarif.SourceRoot(tmp_path / "repo", tmp_path / "repo" / "sub")
    assert root.uri("a dir/x#1.yaml") == ("sub/a%20dir/x%231.yaml", "%SRCROOT%")
    assert root.uri("../top.yaml") == ("top.yaml", "%SRCROOT%")
    outside = root.uri(str(tmp_path / "elsewhere.yaml"))
    assert outside == ((tmp_path / "elsewhere.yaml").as_uri(), None)
    assert root.uri("<stdin>") is None and root.uri("cluster:lab/Job/ns/x") is None
    assert re.fullmatch(r"file:///.*/", root.base_ids()["%SRCROOT%"]["uri"])
    stored = sarif.SourceRoot()  # stored findings: names are relative to the checkout already
    assert stored.uri("training/workload.yaml") == ("training/workload.yaml", "%SRCROOT%")
    assert "uri" not in stored.base_ids()["%SRCROOT%"]


def test_the_offline_checks_catch_what_the_validator_rejects(capsys: pytest.CaptureFixture[str]) -> None:
    """The checker is not a rubber stamp: each broken variant of a good document is caught."""
    _, good = _sarif(capsys, "--example", "seed-lab/before")
    assert sarif_problems(good) == []

    def broken(change: object) -> list[str]:
        doc = json.loads(json.dumps(good))
        change(doc)  # type: ignore[operator]
        return sarif_problems(doc)

    run = "runs"
    loc = lambda d: d[run][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]  # noqa: E731
    assert any(p.startswith("GitHub/SARIF1004") for p in broken(lambda d: loc(d).pop("uriBaseId")))
    assert any(p.startswith("SARIF1004") for p in broken(lambda d: loc(d).update(uri="/abs/x.yaml")))
    assert any(
        p.startswith("SARIF1004")
        for p in broken(lambda d: d[run][0]["originalUriBaseIds"]["%SRCROOT%"].update(uri="file:///repo"))
    )
    assert any(
        p.startswith("SARIF1011")
        for p in broken(lambda d: d.update({"$schema": "https://json.schemastore.org/sarif-2.1.0.json"}))
    )
    assert any(
        p.startswith("SARIF2001")
        for p in broken(lambda d: d[run][0]["results"][0]["message"].update(text="no stop"))
    )
    assert any(
        p.startswith("SARIF1009") for p in broken(lambda d: d[run][0]["results"][0].update(ruleIndex=1))
    )
    assert any(p.startswith("SARIF1002") for p in broken(lambda d: loc(d).update(uri="a b.yaml")))
    assert any(
        p.startswith("schema:") for p in broken(lambda d: d[run][0]["results"][0].update(level="fatal"))
    )
    assert any(
        p.startswith("SARIF1005")
        for p in broken(lambda d: d[run][0]["tool"]["driver"]["rules"][0].update(helpUri="docs/rules.md"))
    )


def test_a_cluster_audit_has_logical_locations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "cluster"))
    from fakeapi import FakeCluster, kubeconfig, serve
    from seedcluster import objects

    with serve(FakeCluster(objects("before"), {"/apis/cilium.io/v2/ciliumnetworkpolicies"})) as url:
        code = cli.main(
            ["cluster", "--kubeconfig", str(kubeconfig(tmp_path / "k", url)), "--format", "sarif"]
        )
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and sarif_problems(doc) == []
    (result,) = doc["runs"][0]["results"]
    assert (
        result["locations"][0]["logicalLocations"][0]["fullyQualifiedName"] == "ml-demo/Job/trainer-workers"
    )


def test_stored_findings_are_relative_to_the_targets_checkout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, a stored finding's file was the checkout's absolute path (the service's git
    cache): a URI code scanning cannot place and the validator rejects."""
    monkeypatch.delenv("AUDITOR_DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "auditor.yaml"
    config.write_text(
        f"database: {{url: 'sqlite:///{tmp_path / 'store.db'}'}}\n"
        f"targets:\n  - name: lab\n    directory: '{SEED}'\n    paths: [before, policies.yaml]\n    nodes: [nodes.yaml]\n"
    )
    assert cli.main(["db", "upgrade", "--config", str(config)]) == 0
    assert cli.main(["run", "--target", "lab", "--config", str(config)]) == 1
    capsys.readouterr()
    assert cli.main(["report", "--config", str(config), "--target", "lab", "--format", "sarif"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sarif_problems(doc) == []
    (run,) = doc["runs"]
    assert _uris(run) == [{"uri": "before/workload.yaml", "uriBaseId": "%SRCROOT%"}]
    related = run["results"][0]["relatedLocations"]
    assert {r["physicalLocation"]["artifactLocation"]["uri"] for r in related} == {"policies.yaml"}


def test_a_partial_cluster_read_is_not_a_successful_execution(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "cluster"))
    from fakeapi import FakeCluster, kubeconfig, serve
    from seedcluster import objects

    cluster = FakeCluster(objects("before"), {"/apis/cilium.io/v2/ciliumnetworkpolicies"})
    cluster.faults.forbidden.add("/api/v1/services")
    with serve(cluster) as url:
        code = cli.main(
            ["cluster", "--kubeconfig", str(kubeconfig(tmp_path / "k", url)), "--format", "sarif"]
        )
    doc = json.loads(capsys.readouterr().out)
    assert code == 3 and sarif_problems(doc) == []
    assert doc["runs"][0]["invocations"][0]["executionSuccessful"] is False


def test_help_uris_point_where_the_package_says_it_lives() -> None:
    import tomllib

    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert urls["Homepage"] == sarif.PROJECT_URL and urls["Documentation"].startswith(sarif.DOCS_URL)


def test_junit_names_files_as_sarif_does(
    repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from xml.etree import ElementTree as ET

    monkeypatch.chdir(repo / "training")
    assert cli.main(["scan", ".", "../policies", "--nodes", "../nodes/nodes.yaml", "--format", "junit"]) == 1
    root = ET.fromstring(capsys.readouterr().out.split("?>", 1)[1])
    (case,) = [c for c in root.iter("testcase") if c.find("failure") is not None]
    assert case.get("file") == "training/workload.yaml"
