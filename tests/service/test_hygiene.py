"""Web and API hygiene through real HTTP (uvicorn): security headers on every response, the Host
check on a loopback-bound server (DNS rebinding), reads behind the token when configured, and the
warnings for secrets sent unencrypted."""

from __future__ import annotations

import base64
import http.client
import logging
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from httpsupport import serving
from seedrepo import seed_files

from auditor import bootstrap, cli
from auditor.gitops import git
from auditor.settings.config import load_settings

TOKEN = "read-t0ken"


def get(base: str, path: str, host: str | None = None, auth: str | None = None) -> tuple[int, dict[str, str]]:
    """One GET with exactly these Host and Authorization headers."""
    where = urllib.parse.urlsplit(base)
    connection = http.client.HTTPConnection(where.hostname or "", where.port, timeout=30)
    try:
        connection.putrequest("GET", path, skip_host=host is not None)
        if host is not None:
            connection.putheader("Host", host)
        if auth is not None:
            connection.putheader("Authorization", auth)
        connection.endheaders()
        response = connection.getresponse()
        response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}
    finally:
        connection.close()


def _config(tmp: Path, service: str) -> Path:
    repo = tmp / "repo"
    for name, src in seed_files("before").items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(Path(src).read_bytes())
    config = tmp / "auditor.yaml"
    config.write_text(
        f"database: {{url: 'sqlite:///{tmp}/a.db'}}\n"
        f"service: {{catch_up: false, api_token: {TOKEN}, {service}}}\n"
        f"targets:\n  - name: lab\n    directory: '{repo}'\n",
        encoding="utf-8",
    )
    return config


@pytest.fixture
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """The service as `auditor serve` builds it (bootstrap), with request.param's service settings."""
    service = bootstrap.build_service(load_settings(_config(tmp_path, request.param)))
    try:
        with serving(service.app) as base:
            yield base
    finally:
        service.store.engine.dispose()


@pytest.mark.parametrize("served", ["host: 127.0.0.1"], indirect=True)
@pytest.mark.parametrize("path", ["/", "/targets/lab", "/api/v1/findings", "/healthz", "/metrics", "/nope"])
def test_every_response_carries_the_security_headers(served: str, path: str) -> None:
    status, headers = get(served, path)
    assert status == (404 if path == "/nope" else 200)
    csp = headers["content-security-policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert "script-src" not in csp and "unsafe-inline" not in csp
    assert headers["x-frame-options"] == "DENY"
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"


@pytest.mark.parametrize("served", ["host: 127.0.0.1"], indirect=True)
def test_a_loopback_server_answers_only_to_loopback_names(served: str) -> None:
    port = urllib.parse.urlsplit(served).port
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "localhost", "LOCALHOST:1"):
        assert get(served, "/api/v1/targets", host=host)[0] == 200, host
    for host in (
        f"attacker.example:{port}",
        f"localhost.attacker.example:{port}",
        "127.0.0.1.nip.io",
        f"localhost:{port}@evil",
        "[::1",
        "",
    ):
        status, headers = get(served, "/api/v1/targets", host=host)
        assert status == 421, host
        assert headers["x-frame-options"] == "DENY"  # refusals carry the headers too


@pytest.mark.parametrize("served", ["host: 0.0.0.0"], indirect=True)
def test_a_server_on_all_interfaces_takes_any_host(served: str) -> None:
    # Behind an ingress or a proxy the Host is the public name: no check (the NetworkPolicy and
    # the token guard this case).
    assert get(served, "/api/v1/targets", host="auditor.example.com")[0] == 200


@pytest.mark.parametrize("served", ["read_token_required: true"], indirect=True)
def test_reads_need_the_token_when_configured(served: str) -> None:
    assert get(served, "/api/v1/findings")[0] == 401
    assert get(served, "/api/v1/findings", auth="Bearer wrong")[0] == 401
    assert get(served, "/api/v1/findings", auth=f"Bearer {TOKEN}")[0] == 200
    assert get(served, "/api/v1/openapi.json")[0] == 401
    status, headers = get(served, "/")
    assert status == 401 and headers["www-authenticate"].startswith("Basic ")  # a browser asks
    basic = base64.b64encode(f"me:{TOKEN}".encode()).decode()
    assert get(served, "/", auth=f"Basic {basic}")[0] == 200
    assert get(served, "/targets/lab", auth=f"Bearer {TOKEN}")[0] == 200
    # Probes and the Prometheus scrape stay open: states and counts, no names.
    assert get(served, "/healthz")[0] == 200
    assert get(served, "/metrics")[0] == 200
    assert get(served, "/readyz")[0] in (200, 503)  # 503 only because no scheduler runs here


@pytest.mark.parametrize("served", ["read_token_required: false"], indirect=True)
def test_reads_are_open_by_default(served: str) -> None:
    assert get(served, "/api/v1/findings")[0] == 200
    assert get(served, "/")[0] == 200


def test_a_token_over_http_and_a_login_without_tls_warn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "auditor.yaml"
    config.write_text(
        "targets:\n"
        "  - name: plain\n    git: {url: 'http://git.example/infra.git', token_env: INFRA_TOKEN}\n"
        "  - name: safe\n    git: {url: 'https://git.example/infra.git', token_env: INFRA_TOKEN}\n"
        "  - name: anonymous\n    git: {url: 'http://git.example/public.git'}\n"
        "digest:\n  smtp: {host: mail.example, port: 25, security: none, username: auditor}\n"
        "  teams: [{name: ml, to: [ml@example.com]}]\n",
        encoding="utf-8",
    )
    settings = load_settings(config)
    assert len(settings.warnings) == 2
    assert "targets[0].git.url" in settings.warnings[0] and "unencrypted" in settings.warnings[0]
    assert "digest.smtp.security" in settings.warnings[1] and "auditor" in settings.warnings[1]
    cli.load_settings(config)
    err = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in err] == ["warning", "warning"]
    # …and in the service's log, each time a token goes to an http:// remote.
    with caplog.at_level(logging.WARNING, logger="auditor.gitops"), pytest.raises(git.GitError):
        git.fetch(
            "http://127.0.0.1:9/infra.git", None, tmp_path / "cache", git.Credentials(token="s3cret"), 30
        )
    assert any("unencrypted (http://)" in r.getMessage() for r in caplog.records)
    assert all("s3cret" not in r.getMessage() for r in caplog.records)
