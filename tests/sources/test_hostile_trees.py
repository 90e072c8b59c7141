"""Faults and hostile trees: an audit that could not see everything is partial (exit 3, what was
not audited is named, findings from the rest still reported), and scanning a repository never
reaches the network or reads outside the repository root. Real kubectl, a real listener."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from seedrepo import seed_files

from auditor.cli import main
from auditor.settings.config import Settings, SourcesSettings
from auditor.sources import kustomize, sandbox
from auditor.sources.manifests import Tools, collect, load_inventory

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is installed by .ci/run")

MARKER = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: outside-marker, namespace: ml}
spec:
  selector: {matchLabels: {app: m}}
  template:
    metadata: {labels: {app: m}}
    spec: {containers: [{name: c, image: busybox}]}
"""


def seed_tree(root: Path) -> Path:
    """The seed scenario as raw files (one cross-zone-blocked finding)."""
    for name, src in seed_files("before").items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(Path(src).read_bytes())
    return root


def outside(tmp_path: Path) -> Path:
    """A kustomization outside the scanned repository, holding a workload that must not be seen."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "marker.yaml").write_text(MARKER)
    (out / "kustomization.yaml").write_text("resources: [marker.yaml]\n")
    (out / "secret.env").write_text("TOKEN=TOPSECRET\n")
    return out


def scan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any], str]:
    code = main(["scan", *args, "--format", "json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


class Listener:
    """A TCP listener on 127.0.0.1 that records every connection (and what was sent on it)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    self.connections.append(conn.recv(4096))
                except OSError:
                    self.connections.append(b"")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@contextmanager
def listening() -> Iterator[Listener]:
    listener = Listener()
    try:
        yield listener
    finally:
        listener.close()


def remote_tree(tmp_path: Path, port: int) -> Path:
    tree = seed_tree(tmp_path / "repo")
    remote = tree / "deploy" / "remote"
    remote.mkdir(parents=True)
    (remote / "kustomization.yaml").write_text(
        f"resources:\n- http://127.0.0.1:{port}/job.yaml\n- https://127.0.0.1:{port}/base\n"
        "components:\n- github.com/org/repo//path?ref=v1\n"
    )
    return tree


@needs_kubectl
def test_remote_resources_are_refused_naming_the_file_and_nothing_is_fetched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with listening() as listener:
        tree = remote_tree(tmp_path, listener.port)
        code, out, err = scan(capsys, str(tree))
    assert listener.connections == []
    kfile = f"{tree}/deploy/remote/kustomization.yaml"
    refusals = [e for e in out["errors"] if e["file"] == kfile]
    assert len(refusals) == 3 and all("remote reference" in e["message"] for e in refusals), out["errors"]
    assert any("github.com/org/repo//path?ref=v1" in e["message"] for e in refusals)
    assert "sources.kustomize_remote" in refusals[0]["message"]
    assert out["summary"]["complete"] is False
    assert [n["path"] for n in out["summary"]["not_audited"]] == [kfile]
    assert code == 3 and f"not audited: {kfile}" in err
    assert [f["rule"] for f in out["findings"]] == ["cross-zone-blocked"]  # the rest is still audited


@needs_kubectl
def test_the_remote_opt_in_lets_kustomize_fetch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "auditor.yaml"
    config.write_text("sources:\n  kustomize_remote: true\n  render_timeout_seconds: 20\n")
    with listening() as listener:
        tree = remote_tree(tmp_path, listener.port)
        (tree / "deploy/remote/kustomization.yaml").write_text(
            f"resources:\n- http://127.0.0.1:{listener.port}/job.yaml\n"
        )
        code, out, _ = scan(capsys, str(tree), "--config", str(config))
    assert listener.connections and listener.connections[0].startswith(b"GET /job.yaml ")
    # The listener answers nothing, so the build fails: still partial.
    assert code == 3 and "Kustomize build failed" in out["summary"]["not_audited"][0]["reason"]


@needs_kubectl
def test_a_base_escaping_the_root_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outside(tmp_path)
    tree = seed_tree(tmp_path / "repo")
    overlay = tree / "overlays" / "prod"
    overlay.mkdir(parents=True)
    (overlay / "kustomization.yaml").write_text("resources:\n- ../../../outside\n")
    code, out, _ = scan(capsys, str(tree))
    (refusal,) = [e for e in out["errors"] if e["file"].endswith("overlays/prod/kustomization.yaml")]
    assert "leads outside the repository root" in refusal["message"] and refusal["line"] == 1
    assert code == 3 and "outside-marker" not in json.dumps(out)
    inv = load_inventory([tree], Settings(), Tools(KUBECTL, None))
    assert "outside-marker" not in {w.ref.name for w in inv.workloads}


@needs_kubectl
def test_a_symlinked_directory_outside_the_root_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside(tmp_path)
    tree = seed_tree(tmp_path / "repo")
    overlay = tree / "overlays" / "prod"
    overlay.mkdir(parents=True)
    (overlay / "base").symlink_to(tmp_path / "outside", target_is_directory=True)
    (overlay / "kustomization.yaml").write_text("resources: [base]\n")
    code, out, _ = scan(capsys, str(tree))
    messages = [e["message"] for e in out["errors"] if e["file"].endswith("overlays/prod/kustomization.yaml")]
    assert any("'base' leads outside the repository root" in m for m in messages), out["errors"]
    assert code == 3 and "outside-marker" not in json.dumps(out)


@needs_kubectl
@pytest.mark.parametrize("how", ["dotdot", "symlink"])
def test_a_generator_file_outside_the_root_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    outside(tmp_path)
    tree = seed_tree(tmp_path / "repo")
    gen = tree / "config"
    gen.mkdir()
    if how == "symlink":
        (gen / "token.env").symlink_to(tmp_path / "outside" / "secret.env")
        source = "token.env"
    else:
        source = "../../outside/secret.env"
    (gen / "kustomization.yaml").write_text(
        f"configMapGenerator:\n- name: settings\n  files:\n  - token={source}\n"
    )
    code, out, _ = scan(capsys, str(tree))
    (refusal,) = [e for e in out["errors"] if e["file"].endswith("config/kustomization.yaml")]
    assert "configMapGenerator.files" in refusal["message"] and "leads outside" in refusal["message"]
    assert code == 3 and "TOPSECRET" not in json.dumps(out)


def test_without_kubectl_on_path_the_scan_is_partial_and_names_the_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = seed_tree(tmp_path / "repo")
    app = tree / "apps" / "serving"
    app.mkdir(parents=True)
    (app / "kustomization.yaml").write_text("resources: [deploy.yaml]\n")
    (app / "deploy.yaml").write_text(MARKER)
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    code, out, err = scan(capsys, str(tree))
    kfile = f"{tree}/apps/serving/kustomization.yaml"
    assert out["summary"]["not_audited"] == [
        {"path": kfile, "reason": "Kustomize directory skipped: kubectl is not installed"}
    ]
    assert code == 3 and kfile in err and "partial" in err
    assert [f["rule"] for f in out["findings"]] == ["cross-zone-blocked"]


@needs_kubectl
def test_a_failed_kustomize_build_makes_the_scan_partial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = seed_tree(tmp_path / "repo")
    app = tree / "apps" / "serving"
    app.mkdir(parents=True)
    (app / "kustomization.yaml").write_text("resources: [deploy.yaml]\npatches:\n- path: gone.yaml\n")
    (app / "deploy.yaml").write_text(MARKER)
    code, out, _ = scan(capsys, str(tree))
    (gap,) = out["summary"]["not_audited"]
    assert gap["path"].endswith("apps/serving/kustomization.yaml") and "build failed" in gap["reason"]
    assert code == 3 and [f["rule"] for f in out["findings"]] == ["cross-zone-blocked"]


def test_a_tree_holding_only_a_chart_without_helm_is_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    chart = tmp_path / "repo" / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: trainer\nversion: 0.1.0\n")
    (chart / "templates" / "job.yaml").write_text("replicas: {{ .Values.n }}\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    code, out, err = scan(capsys, str(tmp_path / "repo"))
    assert code == 3 and out["summary"]["complete"] is False
    assert out["summary"]["not_audited"][0]["reason"] == "Helm chart skipped: helm is not installed"
    assert "chart/Chart.yaml" in err


def test_a_chart_with_a_symlink_outside_the_root_is_refused(tmp_path: Path) -> None:
    outside(tmp_path)
    chart = tmp_path / "repo" / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: trainer\nversion: 0.1.0\n")
    (chart / "values.yaml").symlink_to(tmp_path / "outside" / "secret.env")
    helm = tmp_path / "helm"  # never run: the chart is refused first
    helm.write_text("#!/bin/sh\nexit 99\n")
    helm.chmod(0o755)
    out = collect([tmp_path / "repo"], Tools(None, str(helm)))
    (gap,) = [n for n in out.not_audited if n.path.endswith("chart/Chart.yaml")]
    assert "values.yaml leads outside" in gap.reason, out.not_audited


@pytest.mark.parametrize("kind", ["dangling-symlink", "fifo", "directory-link-loop"])
def test_an_unreadable_file_makes_the_scan_partial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    tree = seed_tree(tmp_path / "repo")
    bad = tree / "training" / "extra.yaml"
    if kind == "dangling-symlink":
        bad.symlink_to(tree / "training" / "gone.yaml")
    elif kind == "fifo":
        os.mkfifo(bad)
        assert stat.S_ISFIFO(bad.lstat().st_mode)
    else:
        bad.symlink_to(bad)  # a link to itself cannot be resolved
    code, out, _ = scan(capsys, str(tree))
    (gap,) = out["summary"]["not_audited"]
    assert gap["path"] == f"{tree}/training/extra.yaml" and gap["reason"]
    assert code == 3 and [f["rule"] for f in out["findings"]] == ["cross-zone-blocked"]


def test_a_complete_scan_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = scan(capsys, str(seed_tree(tmp_path / "repo")))
    assert code == 1 and out["summary"]["complete"] is True and out["summary"]["not_audited"] == []


# -- the renderers' sandbox -------------------------------------------------------------------


def fake_tool(tmp_path: Path, body: str) -> str:
    tool = tmp_path / "tool"
    tool.write_text(f"#!/bin/sh\n{body}\n")
    tool.chmod(0o755)
    return str(tool)


def test_renderers_get_no_home_credentials_proxies_or_git_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "service-home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text("TOPSECRET kubeconfig\n")
    for name, value in {
        "HOME": str(home),
        "KUBECONFIG": str(home / ".kube" / "config"),
        "AWS_SECRET_ACCESS_KEY": "TOPSECRET",
        "GOOGLE_APPLICATION_CREDENTIALS": "/TOPSECRET.json",
        "GITHUB_TOKEN": "TOPSECRET",
        "GIT_SSH_COMMAND": "ssh -i /TOPSECRET",
        "HTTPS_PROXY": "http://proxy.invalid:3128",
        "http_proxy": "http://proxy.invalid:3128",
        "SSH_AUTH_SOCK": "/tmp/TOPSECRET.sock",
    }.items():
        monkeypatch.setenv(name, value)
    dump = tmp_path / "env.txt"
    tool = fake_tool(
        tmp_path, f'env > {dump}; ls -A "$HOME" >> {dump}; cat "$KUBECONFIG" >> {dump} 2>&1; true'
    )
    ran = sandbox.run([tool], tmp_path, 10, 1 << 20)
    assert ran.code == 0, ran
    seen = dump.read_text()
    assert "TOPSECRET" not in seen and "proxy.invalid" not in seen
    env = dict(line.split("=", 1) for line in seen.splitlines() if "=" in line)
    assert env["HOME"] != str(home) and not Path(env["HOME"]).exists()  # a temporary, removed after
    assert not any(k.startswith(("AWS_", "GOOGLE_", "GITHUB_", "SSH_")) for k in env)
    assert not any(k.startswith("GIT_") and k not in sandbox.environment(tmp_path, {}, False) for k in env)


def test_a_renderer_that_runs_too_long_or_prints_too_much_is_stopped(tmp_path: Path) -> None:
    slow = fake_tool(tmp_path, "sleep 30")
    ran = sandbox.run([slow], tmp_path, 0.5, 1 << 20)
    assert ran.code == 124 and "timed out" in ran.stderr
    loud = fake_tool(tmp_path, "yes apiVersion: v1")
    ran = sandbox.run([loud], tmp_path, 10, 100_000)
    assert ran.code == 125 and "sources.max_render_bytes" in ran.stderr and ran.stdout == ""


def test_a_renderer_over_the_limits_leaves_its_directory_not_audited(tmp_path: Path) -> None:
    tree = tmp_path / "repo"
    app = tree / "app"
    app.mkdir(parents=True)
    (app / "kustomization.yaml").write_text("resources: []\n")
    loud = fake_tool(tmp_path, "yes 'a: b'")
    out = collect([tree], Tools(loud, None), sources=SourcesSettings(max_render_bytes=10_000))
    (gap,) = out.not_audited
    assert gap.path.endswith("app/kustomization.yaml") and "max_render_bytes" in gap.reason


@pytest.mark.parametrize(
    ("entry", "remote"),
    [
        ("https://example.com/x.yaml", True),
        ("git@github.com:org/repo.git//base", True),
        ("ssh://git@example.com/org/repo", True),
        ("github.com/org/repo//path?ref=v1", True),
        ("gitlab.example.com:8443/org/repo", True),
        ("git::https://example.com/repo", True),
        ("../../base", False),
        ("base", False),
    ],
)
def test_remote_references_are_recognised(entry: str, remote: bool) -> None:
    assert kustomize.looks_remote(entry) is remote


def test_a_local_directory_that_looks_like_a_host_is_local(tmp_path: Path) -> None:
    (tmp_path / "v1.2" / "base").mkdir(parents=True)
    (tmp_path / "v1.2" / "base" / "kustomization.yaml").write_text("resources: []\n")
    (tmp_path / "kustomization.yaml").write_text("resources: [v1.2/base/]\ncomponents: [missing]\n")
    (refusal,) = kustomize.check(tmp_path, tmp_path, allow_remote=False)
    assert "'missing' is not a file or directory in the repository" in refusal.message
    assert refusal.line == 2
    assert kustomize.check(tmp_path, tmp_path, allow_remote=True) == []
