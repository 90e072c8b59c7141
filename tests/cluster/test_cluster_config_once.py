"""`auditor cluster` and `auditor snapshot` read their config once, and the cluster read uses the
settings the audit uses (the read used to load the config a second time on its own)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakeapi import FakeCluster, kubeconfig, serve
from seedcluster import objects

from auditor import cli
from auditor.settings.config import CONFIG_FILE_NAME, Settings

CRDS = {"/apis/cilium.io/v2/ciliumnetworkpolicies"}


@pytest.mark.parametrize("command", ["cluster", "snapshot"])
def test_a_discovered_config_is_read_once(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / CONFIG_FILE_NAME).write_text("cluster: {read_deadline_seconds: 60}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AUDITOR_CONFIG", raising=False)
    loaded: list[Settings] = []
    real = cli.load_settings

    def counting(path: Path) -> Settings:
        loaded.append(real(path))
        return loaded[-1]

    monkeypatch.setattr(cli, "load_settings", counting)
    with serve(FakeCluster(objects("before"), CRDS)) as url:
        kc = kubeconfig(tmp_path / "k", url)
        extra = ["-o", str(tmp_path / "snap.yaml")] if command == "snapshot" else ["--format", "json"]
        code = cli.main([command, "--kubeconfig", str(kc), *extra])
    err = capsys.readouterr().err
    assert code in (0, 1), err
    assert len(loaded) == 1 and loaded[0].cluster.read_deadline_seconds == 60
