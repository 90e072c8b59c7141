"""Per-team access (issue 36): bearer JWTs validated against a real JWKS served over HTTP (PyJWT's
PyJWKClient fetches it), machine tokens stored hashed, teams from the group claim, reads scoped to
the caller's teams, writes by role; on SQLite and PostgreSQL, through real HTTP (uvicorn).

The identity provider is a local HTTP server serving a JWKS document (RFC 7517) of keys the tests
make with `cryptography`; tokens are signed with PyJWT, as an issuer's would be.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from dbsupport import Clock
from httpsupport import call, serving
from idpsupport import EC_KEY, ISSUER, JWKS, RSA_KEY, token
from seedrepo import seed_files
from sqlalchemy import Engine

from auditor.service.access import Authenticator, Unauthorized
from auditor.service.api import create_app
from auditor.service.runner import AuditRunner
from auditor.service.scheduler import Scheduler
from auditor.settings.config import load_settings
from auditor.sources.manifests import Tools
from auditor.store.repository import Store, TargetSpec

ADMIN = "local-admin-token"
CI_TOKEN = "ci-machine-token-0123456789"
READER_TOKEN = "reader-machine-token-abcdef"


def config(tmp_path: Path, jwks_url: str, cooldown: float = 0) -> Path:
    repo = tmp_path / "repo"
    for name, src in seed_files("before").items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(Path(src).read_bytes())
    path = tmp_path / "auditor.yaml"
    sha = hashlib.sha256
    path.write_text(
        f"""
service:
  catch_up: false
  auth:
    issuer: {ISSUER}
    jwks_url: {jwks_url}
    jwks_refresh_cooldown_seconds: {cooldown}
    teams:
      - {{name: ml-platform, groups: [ml-platform], targets: [lab], role: write}}
      - {{name: data, groups: [data-eng], namespaces: ["data-*"], role: read}}
      - {{name: sec, groups: [security], role: admin}}
    tokens:
      - {{name: ci, sha256: '{sha(CI_TOKEN.encode()).hexdigest()}', scopes: [read, write], teams: [ml-platform], expires: "2026-12-31"}}
      - {{name: dash, sha256: '{sha(READER_TOKEN.encode()).hexdigest()}', teams: [ml-platform], expires: "2026-12-31"}}
targets:
  - name: lab
    directory: '{repo}'
  - name: other
    directory: '{repo}'
"""
    )
    return path


@pytest.fixture
def api(tmp_path: Path, engine: Engine, clock: Clock, idp: JWKS) -> Iterator[tuple[str, AuditRunner, JWKS]]:
    idp.add("k1", RSA_KEY, "RS256")
    settings = load_settings(config(tmp_path, idp.url))
    store = Store(engine, clock)
    store.sync_targets(TargetSpec(t.name, t.kind, t.location) for t in settings.targets)
    runner = AuditRunner(settings, store, Tools(None, None), owner="test:1")
    scheduler = Scheduler(settings, runner, clock)
    scheduler.start()
    auth = Authenticator(settings.service.auth, ADMIN, clock)
    try:
        with serving(create_app(store, runner, scheduler, ADMIN, authenticator=auth)) as base:
            runner.run("lab")
            runner.run("other")
            yield base, runner, idp
    finally:
        scheduler.shutdown()


def targets_seen(base: str, bearer: str | None) -> list[str]:
    status, page, _ = call(f"{base}/api/v1/findings", token=bearer)
    assert status == 200, page
    return sorted({f["target"] for f in page["items"]})


def test_reads_are_authenticated_and_scoped_to_the_callers_teams(
    api: tuple[str, AuditRunner, JWKS], clock: Clock
) -> None:
    base, _, _ = api
    assert call(f"{base}/api/v1/findings")[0] == 401  # identities configured: no anonymous reads
    assert targets_seen(base, ADMIN) == ["lab", "other"]
    assert targets_seen(base, token(clock, groups=["ml-platform"])) == ["lab"]
    # The seed lab's finding is in ml-demo: the data team (data-*) sees neither target's.
    assert targets_seen(base, token(clock, groups=["data-eng"])) == []
    assert targets_seen(base, token(clock, groups=["security"])) == ["lab", "other"]
    assert targets_seen(base, token(clock, groups=["nobody"])) == []  # signed in, in no team
    assert targets_seen(base, CI_TOKEN) == ["lab"]
    # One finding of another team's target is not found (404, as if it did not exist).
    other = next(f["id"] for f in call(f"{base}/api/v1/findings?target=other", token=ADMIN)[1]["items"])
    assert call(f"{base}/api/v1/findings/{other}", token=token(clock, groups=["ml-platform"]))[0] == 404
    assert call(f"{base}/api/v1/findings/{other}", token=ADMIN)[0] == 200
    body = call(f"{base}/api/v1/targets", token=token(clock, groups=["ml-platform"]))[1]
    assert [t["name"] for t in body["items"]] == ["lab"]
    runs = call(f"{base}/api/v1/runs", token=token(clock, groups=["ml-platform"]))[1]["items"]
    assert {r["target"] for r in runs} == {"lab"}
    # The pages are scoped alike: the team's target only, another's finding not found.
    status, page, _ = call(f"{base}/findings", token=ADMIN)
    assert status == 200 and "/targets/other" in page and "/targets/lab" in page
    status, page, _ = call(f"{base}/findings", token=token(clock, groups=["ml-platform"]))
    assert status == 200 and "/targets/lab" in page and "/targets/other" not in page
    assert call(f"{base}/findings/{other}", token=token(clock, groups=["ml-platform"]))[0] == 404
    assert call(f"{base}/targets/other", token=token(clock, groups=["ml-platform"]))[0] == 404
    assert call(f"{base}/targets/lab", token=token(clock, groups=["ml-platform"]))[0] == 200
    status, page, _ = call(f"{base}/", token=token(clock, groups=["data-eng"]))
    assert status == 200 and "/targets/lab" not in page
    assert call(f"{base}/findings")[0] == 401
    # Probes and the metrics scrape stay open.
    assert call(f"{base}/healthz")[0] == 200 and call(f"{base}/metrics")[0] == 200


def test_writes_need_a_role_over_the_target(api: tuple[str, AuditRunner, JWKS], clock: Clock) -> None:
    base, runner, _ = api
    writer = token(clock, groups=["ml-platform"])
    assert call(f"{base}/api/v1/targets/lab/runs", "POST", token=writer)[0] == 202
    _wait(base, runner)
    assert call(f"{base}/api/v1/targets/other/runs", "POST", token=writer)[0] == 403  # not its target
    assert call(f"{base}/api/v1/targets/lab/runs", "POST", token=token(clock, groups=["data-eng"]))[0] == 403
    assert call(f"{base}/api/v1/targets/lab/runs", "POST", token=READER_TOKEN)[0] == 403  # read scope only
    assert call(f"{base}/api/v1/targets/lab/runs", "POST", token=CI_TOKEN)[0] == 202
    _wait(base, runner)
    log = runner.store.audit_log().items
    assert [(e.actor, e.outcome) for e in log[:5]] == [
        ("machine:ci", "done"),
        ("machine:dash", "refused"),
        ("oidc:ana", "refused"),
        ("oidc:ana", "refused"),
        ("oidc:ana", "done"),
    ]
    # Only an admin reads the audit log.
    assert call(f"{base}/api/v1/audit-log", token=writer)[0] == 403
    assert call(f"{base}/api/v1/audit-log", token=token(clock, groups=["security"]))[0] == 200
    assert call(f"{base}/api/v1/audit-log", token=ADMIN)[0] == 200


def _wait(base: str, runner: AuditRunner) -> None:
    import time

    deadline = time.monotonic() + 30
    while any(r.status == "running" for r in runner.store.runs().items) and time.monotonic() < deadline:
        time.sleep(0.05)


def _hs256_with_public_key(clock: Clock) -> str:
    """The classic confusion attack: an HMAC token whose secret is the issuer's public key."""
    pem = RSA_KEY.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    now = int(clock().timestamp())
    body = {
        "iss": ISSUER,
        "aud": "placement-auditor",
        "sub": "mallory",
        "exp": now + 300,
        "groups": ["security"],
    }
    import hmac as hmac_

    header = jwt.utils.base64url_encode(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode())
    payload = jwt.utils.base64url_encode(json.dumps(body).encode())
    signing = header + b"." + payload
    signature = jwt.utils.base64url_encode(hmac_.new(pem, signing, hashlib.sha256).digest())
    return (signing + b"." + signature).decode()


@pytest.mark.parametrize(
    ("why", "make"),
    [
        ("expired", lambda c: token(c, groups=["ml-platform"], exp=int(c().timestamp()) - 60)),
        ("not yet valid", lambda c: token(c, groups=["ml-platform"], nbf=int(c().timestamp()) + 600)),
        ("wrong audience", lambda c: token(c, groups=["ml-platform"], aud="someone-else")),
        ("wrong issuer", lambda c: token(c, groups=["ml-platform"], iss="https://evil.test")),
        ("no exp", lambda c: token(c, groups=["ml-platform"], exp=None)),
        (
            "unknown key",
            lambda c: token(c, key=rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        ),
        (
            "alg none",
            lambda c: jwt.encode(
                {"iss": ISSUER, "aud": "placement-auditor", "sub": "x", "exp": 2**40},
                None,
                algorithm="none",
                headers={"kid": "k1"},
            ),
        ),
        ("HS256 keyed with the public key", _hs256_with_public_key),
        (
            "ES256 claimed for an RS256 key",
            lambda c: token(c, key=EC_KEY, alg="ES256", groups=["ml-platform"]),
        ),
        ("garbage", lambda c: "a.b.c"),
    ],
)
def test_tokens_that_must_be_refused(
    api: tuple[str, AuditRunner, JWKS], clock: Clock, why: str, make: Any
) -> None:
    base, _, _ = api
    status, body, headers = call(f"{base}/api/v1/findings", token=make(clock))
    assert status == 401, (why, body)
    assert headers.get("www-authenticate", headers.get("WWW-Authenticate", "")).startswith("Bearer")


def test_a_rotated_key_is_fetched_without_a_restart(api: tuple[str, AuditRunner, JWKS], clock: Clock) -> None:
    base, _, idp = api
    assert targets_seen(base, token(clock, groups=["ml-platform"])) == ["lab"]
    fetched = idp.fetches
    new = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    idp.keys = []
    idp.add("k2", new, "RS256")
    assert targets_seen(base, token(clock, key=new, kid="k2", groups=["ml-platform"])) == ["lab"]
    assert idp.fetches == fetched + 1  # the unknown kid made it fetch the JWKS again, once
    assert targets_seen(base, token(clock, key=new, kid="k2", groups=["ml-platform"])) == ["lab"]
    assert idp.fetches == fetched + 1  # and then it is cached


def test_unknown_key_ids_do_not_make_it_refetch_within_the_cooldown(
    tmp_path: Path, engine: Engine, clock: Clock, idp: JWKS
) -> None:
    idp.add("k1", RSA_KEY, "RS256")
    settings = load_settings(config(tmp_path, idp.url, cooldown=3600))
    auth = Authenticator(settings.service.auth, ADMIN, clock)
    assert auth.authenticate("Bearer " + token(clock, groups=["ml-platform"])).teams == ("ml-platform",)
    fetched = idp.fetches
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    for i in range(20):
        with pytest.raises(Unauthorized, match="no key of the issuer"):
            auth.authenticate("Bearer " + token(clock, key=stranger, kid=f"made-up-{i}"))
    assert idp.fetches <= fetched + 1  # one refresh at most, not one per made-up key id


def test_a_machine_token_expires_by_the_injected_clock(
    api: tuple[str, AuditRunner, JWKS], clock: Clock
) -> None:
    base, _, _ = api
    assert call(f"{base}/api/v1/findings", token=CI_TOKEN)[0] == 200
    clock.now = clock.now.replace(year=2027, month=1, day=1)
    status, body, _ = call(f"{base}/api/v1/findings", token=CI_TOKEN)
    assert status == 401 and "expired on 2026-12-31" in body["error"]


def test_the_authenticator_never_echoes_a_token(clock: Clock) -> None:
    settings = load_settings(None)
    auth = Authenticator(settings.service.auth, ADMIN, clock)
    with pytest.raises(Unauthorized) as caught:
        auth.authenticate("Bearer secret-value-123")
    assert "secret-value-123" not in str(caught.value)
    assert auth.authenticate(f"Bearer {ADMIN}").admin


def test_settings_refuse_symmetric_algorithms_and_unknown_teams(tmp_path: Path) -> None:
    from auditor.errors import ConfigError

    path = tmp_path / "c.yaml"
    path.write_text(
        f"service:\n  auth:\n    issuer: {ISSUER}\n    jwks_url: http://x/certs\n    algorithms: [HS256]\n"
    )
    with pytest.raises(ConfigError, match="HS"):
        load_settings(path)
    path.write_text(
        "service:\n  auth:\n    tokens:\n      - {name: ci, sha256: '"
        + "0" * 64
        + "', teams: [ghost], expires: '2027-01-01'}\n"
    )
    with pytest.raises(ConfigError, match="ghost"):
        load_settings(path)
    path.write_text(f"service:\n  auth:\n    issuer: {ISSUER}\n")
    with pytest.raises(ConfigError, match="jwks_url"):
        load_settings(path)


def test_serve_says_its_access_mode_on_its_first_line(tmp_path: Path, idp: JWKS) -> None:
    from auditor.bootstrap import access_mode

    single = load_settings(None)
    assert access_mode(single, {}).startswith(
        "access: single-user mode, no identity provider and no API token"
    )
    assert "one local admin" in access_mode(single, {"AUDITOR_API_TOKEN": "x"})
    teams = load_settings(config(tmp_path, idp.url))
    line = access_mode(teams, {})
    assert line.startswith(f"access: per team (JWTs of {ISSUER}, 3 team(s), 2 machine token(s))")


def test_each_teams_digest_holds_its_own_findings_only(tmp_path: Path) -> None:
    from auditor.errors import ConfigError

    base = (
        "service:\n  auth:\n    teams:\n"
        "      - {name: ml-platform, groups: [ml], targets: [lab], role: write}\n"
        "      - {name: data, groups: [data], namespaces: ['data-*']}\n"
        "      - {name: sec, groups: [security], role: admin}\n"
        "digest:\n  smtp: {host: 127.0.0.1}\n  teams:\n"
    )
    path = tmp_path / "c.yaml"
    path.write_text(
        base
        + "    - {name: ml-platform, to: [ml@example.com]}\n"
        + "    - {name: data, to: [data@example.com]}\n"
        + "    - {name: sec, to: [sec@example.com]}\n"
        + "    - {name: oncall, to: [oncall@example.com], targets: [lab]}\n"
    )
    digest = load_settings(path).digest
    assert digest is not None
    teams = {t.name: t for t in digest.teams}
    assert teams["ml-platform"].targets == ("lab",) and teams["ml-platform"].namespaces == ()
    assert teams["data"].namespaces == ("data-*",) and teams["data"].targets == ()
    assert teams["sec"].targets == () and teams["sec"].namespaces == ()  # an admin team: everything
    assert teams["oncall"].targets == ("lab",)
    # A digest team that is no access team and says nothing of what it covers would mail everything.
    path.write_text(base + "    - {name: everyone, to: [all@example.com]}\n")
    with pytest.raises(ConfigError, match="every team's findings"):
        load_settings(path)
