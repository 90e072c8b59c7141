"""`auditor db upgrade`, `auditor run` and `auditor findings` on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dbsupport import pg_schema, pg_url
from seedrepo import seed_files

from auditor import cli


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_db_upgrade_run_and_findings(
    tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "repo"
    for name, src in seed_files().items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(Path(src).read_bytes())
    config = tmp_path / "auditor.yaml"
    config.write_text(f"targets:\n  - name: lab\n    directory: '{repo}'\n")
    with pg_schema() as schema:
        url = f"sqlite:///{tmp_path / 'x.db'}" if backend == "sqlite" else pg_url(schema)
        monkeypatch.setenv("AUDITOR_DATABASE_URL", url)
        assert cli.main(["db", "upgrade"]) == 0
        assert "is at revision 0012" in capsys.readouterr().out  # the head
        assert cli.main(["run", "--target", "lab", "--config", str(config)]) == 1  # a critical finding
        out = capsys.readouterr().out
        assert "succeeded: 1 finding(s) (1 new" in out
        assert cli.main(["run", "--target", "lab", "--config", str(config), "--fail-on", "none"]) == 0
        assert cli.main(["run", "--target", "lab", "--config", str(config), "--fail-on", "critical"]) == 1
        capsys.readouterr()
        assert cli.main(["findings", "--config", str(config), "--format", "json", "--status", "open"]) == 0
        page = json.loads(capsys.readouterr().out)
        assert [f["rule"] for f in page["items"]] == ["cross-zone-blocked"]
        assert cli.main(["findings", "--config", str(config), "--severity", "low"]) == 0
        assert "no findings match" in capsys.readouterr().out
        assert cli.main(["findings", "--config", str(config), "--cursor", "garbage"]) == 2
        assert cli.main(["findings", "--config", str(config), "--since", "last week"]) == 2
        assert cli.main(["run", "--target", "nope", "--config", str(config)]) == 2
        assert "no target named 'nope'" in capsys.readouterr().err


def test_password_never_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AUDITOR_DATABASE_URL", "postgresql://auditor:hunter2@127.0.0.1:1/none")
    assert cli.main(["db", "upgrade"]) == 3
    err = capsys.readouterr().err
    assert "hunter2" not in err and "***" in err


@pytest.mark.parametrize("command", [["findings"], ["db", "upgrade"], ["run", "--target", "lab"]])
def test_an_unsupported_database_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    # Issue 36: `mysql://` exited 3 (a partial audit) with an internal error; it is a setting.
    config = tmp_path / "auditor.yaml"
    config.write_text(f"targets:\n  - name: lab\n    directory: '{tmp_path}'\n")
    monkeypatch.setenv("AUDITOR_DATABASE_URL", "mysql://auditor:hunter2@db/findings")
    assert cli.main([*command, "--config", str(config)]) == 2
    err = capsys.readouterr().err
    (line,) = err.strip().splitlines()
    assert "AUDITOR_DATABASE_URL" in line and "'mysql'" in line
    assert "sqlite:///" in line and "postgresql://" in line and "hunter2" not in line


def test_cli_writes_are_in_the_audit_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "repo"
    for name, src in seed_files().items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(Path(src).read_bytes())
    config = tmp_path / "auditor.yaml"
    config.write_text(f"targets:\n  - name: lab\n    directory: '{repo}'\n")
    monkeypatch.setenv("AUDITOR_DATABASE_URL", f"sqlite:///{tmp_path / 'x.db'}")
    assert cli.main(["db", "upgrade"]) == 0
    assert cli.main(["audit-log", "--config", str(config)]) == 0
    assert "no audit log entries match" in capsys.readouterr().out
    assert cli.main(["run", "--target", "lab", "--config", str(config)]) == 1
    capsys.readouterr()
    assert cli.main(["audit-log", "--config", str(config), "--format", "json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["items"]
    assert entry["action"] == "run.start" and entry["subject"] == "lab" and entry["outcome"] == "done"
    assert entry["actor"] == cli.cli_actor() and entry["detail"].startswith("run ")
    assert cli.main(["audit-log", "--config", str(config), "--actor", "nobody"]) == 0
    assert "no audit log entries match" in capsys.readouterr().out
    assert cli.main(["audit-log", "--config", str(config)]) == 0
    line = capsys.readouterr().out.strip()
    assert "run.start" in line and f"lab by {cli.cli_actor()}" in line
    assert cli.main(["audit-log", "--config", str(config), "--since", "yesterday-ish"]) == 2
