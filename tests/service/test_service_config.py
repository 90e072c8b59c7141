"""The service's config sections: valid values read, invalid ones rejected at start with the
key's path (and the line)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from httpsupport import call

from auditor.settings.config import ConfigError, load_settings


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "auditor.yaml"
    p.write_text(text)
    return p


def test_service_sections_are_read(tmp_path: Path) -> None:
    s = load_settings(
        write(
            tmp_path,
            "database: {url: 'postgresql://auditor:pw@db:5432/auditor'}\n"
            "service: {port: 9000, timezone: Europe/Berlin, api_token: abc}\n"
            "targets:\n"
            "  - name: infra\n    schedule: '15 6 * * 1-5'\n"
            "    git: {url: 'https://github.com/acme/infra.git', branch: release/2026, token_env: TOKEN}\n"
            "    paths: [clusters/prod]\n    nodes: [nodes/prod.yaml]\n"
            "  - name: local\n    directory: manifests\n",
        )
    )
    assert s.service.port == 9000 and s.service.git_cache_dir == str(tmp_path / ".auditor-cache/git")
    infra, local = s.targets
    assert infra.kind == "git" and infra.git is not None and infra.git.branch == "release/2026"
    assert infra.paths == ("clusters/prod",) and infra.schedule == "15 6 * * 1-5"
    assert local.kind == "directory" and local.directory == str(tmp_path / "manifests")
    assert local.schedule == "0 6 * * *"
    assert "pw" not in repr(s.database) and "abc" not in repr(s.service)  # secrets never print


@pytest.mark.parametrize(
    ("text", "key", "line"),
    [
        ("service: {bogus: 1}\n", "service.bogus", 1),
        ("service:\n  port: 70000\n", "service.port", 2),
        ("service: {timezone: Mars/Olympus}\n", "service.timezone", 1),
        ("database: {url: 'mysql://x/y'}\n", "database.url", 1),
        ("database: {url: 'not a url'}\n", "database.url", 1),
        ("targets:\n  - name: a\n    directory: x\n    schedule: '61 * * * *'\n", "targets[0].schedule", 4),
        ("targets:\n  - name: a\n    directory: x\n    schedule: 'daily'\n", "targets[0].schedule", 4),
        (
            "targets:\n  - name: a\n    directory: x\n  - name: b\n    directory: y\n    colour: red\n",
            "targets[1].colour",
            6,
        ),
        ("targets:\n  - name: a\n    git: {url: 'ext::sh -c id'}\n", "targets[0].git.url", 3),
        (
            "targets:\n  - name: a\n    git: {url: 'https://u:secret@example.com/r.git'}\n",
            "targets[0].git.url",
            3,
        ),
        (
            "targets:\n  - name: a\n    git: {url: 'https://example.com/r.git', branch: '--upload-pack=x'}\n",
            "targets[0].git.branch",
            3,
        ),
        (
            "targets:\n  - name: a\n    directory: x\n    git: {url: 'https://example.com/r.git'}\n",
            "targets[0]",
            2,
        ),
        ("targets:\n  - name: a\n    directory: x\n  - name: a\n    directory: y\n", "targets[1].name", 4),
        ("targets:\n  - name: 'a b'\n    directory: x\n", "targets[0].name", 2),
        ("targets:\n  - name: a\n    directory: x\n    paths: ['../../etc']\n", "targets[0].paths", 4),
        ("targets: {a: 1}\n", "targets", 1),
        ("targets:\n  - name: a\n    cluster: {in_cluster: true, context: x}\n", "targets[0].cluster", 2),
        ("targets:\n  - name: a\n    cluster: {namespace: x}\n", "targets[0].cluster.namespace", 3),
        ("targets:\n  - name: a\n    cluster: {context: x}\n    directory: y\n", "targets[0]", 2),
    ],
)
def test_invalid_service_config_names_the_key(tmp_path: Path, text: str, key: str, line: int) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(write(tmp_path, text))
    assert err.value.key == key, err.value
    assert err.value.line == line, err.value
    assert "secret" not in str(err.value)


def test_serve_rejects_a_bad_config_at_start(tmp_path: Path) -> None:
    config = write(tmp_path, "targets:\n  - name: a\n    directory: x\n    schedule: '99 * * * *'\n")
    done = subprocess.run(
        [sys.executable, "-m", "auditor", "serve", "--config", str(config)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "targets[0].schedule" in done.stderr and "auditor.yaml:4" in done.stderr


def test_serve_works_out_of_the_box_on_the_bundled_example(tmp_path: Path) -> None:
    """`auditor serve` with no config: the bundled seed-lab target, SQLite in the working directory,
    audited once at start (no token, no trigger, whatever the hour), so the first page has findings."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "AUDITOR_DATABASE_URL"}
    env["AUDITOR_API_TOKEN"] = "tok"
    proc = subprocess.Popen(
        [sys.executable, "-m", "auditor", "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if call(f"{base}/readyz")[0] == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "serve did not become ready"
            time.sleep(0.1)
        while True:  # the start-up run, claimed before the API answered
            runs = call(f"{base}/api/v1/runs?target=seed-lab")[1]["items"]
            assert [r["trigger"] for r in runs] == ["startup"]
            if runs[0]["status"] != "running":
                break
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert runs[0]["status"] == "succeeded"
        status, page, _ = call(f"{base}/api/v1/findings?target=seed-lab")
        assert [(f["rule"], f["certainty"]) for f in page["items"]] == [("cross-zone-blocked", "always")]
        # A manual run afterwards still works.
        status, body, _ = call(f"{base}/api/v1/targets/seed-lab/runs", "POST", token="tok")
        assert status == 202
        while call(f"{base}/api/v1/runs/{body['run_id']}")[1]["status"] == "running":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert call(f"{base}/api/v1/runs/{body['run_id']}")[1]["status"] == "succeeded"
        assert (tmp_path / "auditor.db").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
