"""The web pages' OIDC sign-in (issue 36): the authorization code flow with PKCE against a local
identity provider that speaks the protocol over real HTTP — its token endpoint checks the code,
the client and the PKCE verifier against the S256 challenge, and answers with an ID token signed
by a key of its JWKS — then the session cookie, through the service served by uvicorn."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from dbsupport import Clock
from httpsupport import serving
from sqlalchemy import Engine
from test_access import ADMIN, ISSUER, JWKS, RSA_KEY, config

from auditor.service.access import Authenticator
from auditor.service.api import create_app
from auditor.service.runner import AuditRunner
from auditor.service.scheduler import Scheduler
from auditor.service.signin import SignIn, safe_next
from auditor.settings.config import load_settings
from auditor.sources.manifests import Tools
from auditor.store.repository import Store, TargetSpec

CLIENT = "placement-auditor-web"


class TokenEndpoint:
    """The issuer's token endpoint: codes it issued (with the PKCE challenge and the nonce of
    their sign-in), and whom each signs in."""

    def __init__(self, clock: Clock) -> None:
        self.codes: dict[str, dict[str, Any]] = {}
        self.seen: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                outer.seen.append(form)
                status, body = outer.answer(form, clock)
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, form: dict[str, str], clock: Clock) -> tuple[int, dict[str, Any]]:
        issued = self.codes.pop(form.get("code", ""), None)  # a code is good once
        if (
            issued is None
            or form.get("client_id") != CLIENT
            or form.get("grant_type") != "authorization_code"
        ):
            return 400, {"error": "invalid_grant"}
        verifier = form.get("code_verifier", "")
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
        if challenge != issued["challenge"]:
            return 400, {"error": "invalid_grant", "error_description": "PKCE verification failed"}
        now = int(clock().timestamp())
        claims = {"iss": ISSUER, "aud": CLIENT, "sub": issued["sub"], "exp": now + 300, "iat": now}
        claims |= {"nonce": issued["nonce"], "groups": issued["groups"]}
        return 200, {"id_token": jwt.encode(claims, RSA_KEY, algorithm="RS256", headers={"kid": "k1"})}


class Browser:
    """Requests with a cookie jar, redirects not followed (the test reads each)."""

    def __init__(self, base: str) -> None:
        parts = urllib.parse.urlsplit(base)
        self.host, self.port = parts.hostname or "", parts.port or 80
        self.cookies: dict[str, str] = {}
        self.set_cookie: list[str] = []

    def get(self, path: str) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        headers = {"Host": "localhost"}
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        body = response.read()
        self.set_cookie = response.headers.get_all("set-cookie") or []
        for line in self.set_cookie:
            name, _, rest = line.partition("=")
            value = rest.split(";", 1)[0].strip('"')
            if "max-age=0" in line.lower() or "expires=thu, 01 jan 1970" in line.lower() or not value:
                self.cookies.pop(name, None)
            else:
                self.cookies[name] = value
        conn.close()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, body


@pytest.fixture
def site(tmp_path: Path, engine: Engine, clock: Clock) -> Iterator[tuple[str, TokenEndpoint]]:
    idp = JWKS()
    idp.add("k1", RSA_KEY, "RS256")
    tokens = TokenEndpoint(clock)
    path = config(tmp_path, idp.url)
    text = path.read_text().replace(
        "    teams:\n",
        f"    client_id: {CLIENT}\n    authorization_endpoint: https://idp.example.test/authorize\n"
        f"    token_endpoint: {tokens.url}\n    redirect_url: http://localhost/auth/callback\n"
        "    scopes: [profile, groups]\n    teams:\n",
        1,
    )
    path.write_text(text)
    settings = load_settings(path)
    store = Store(engine, clock)
    store.sync_targets(TargetSpec(t.name, t.kind, t.location) for t in settings.targets)
    runner = AuditRunner(settings, store, Tools(None, None), owner="test:1")
    scheduler = Scheduler(settings, runner, clock)
    scheduler.start()
    auth = Authenticator(settings.service.auth, ADMIN, clock)
    signin = SignIn(auth, b"k" * 32, "", clock)
    try:
        with serving(create_app(store, runner, scheduler, ADMIN, authenticator=auth, signin=signin)) as base:
            yield base, tokens
    finally:
        scheduler.shutdown()
        idp.server.shutdown()
        tokens.server.shutdown()


def sign_in(browser: Browser, tokens: TokenEndpoint, groups: list[str], start: str = "/findings") -> str:
    """The whole flow as a browser and the issuer run it; the path the service sends back to."""
    status, headers, _ = browser.get(start)
    assert status == 302 and headers["location"].startswith("/auth/login?next=")
    status, headers, _ = browser.get(headers["location"])
    assert status == 302
    authorize = urllib.parse.urlsplit(headers["location"])
    assert authorize.netloc == "idp.example.test" and authorize.path == "/authorize"
    query = dict(urllib.parse.parse_qsl(authorize.query))
    assert query["response_type"] == "code" and query["client_id"] == CLIENT
    assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) == 43
    assert (
        query["redirect_uri"] == "http://localhost/auth/callback"
        and query["scope"] == "openid profile groups"
    )
    login_cookie = next(c for c in browser.set_cookie if c.startswith("pa_login="))
    assert "httponly" in login_cookie.lower() and "samesite=lax" in login_cookie.lower()
    assert "Path=/auth/" in login_cookie
    code = f"code-{len(tokens.codes)}-{query['state'][:6]}"
    tokens.codes[code] = {
        "challenge": query["code_challenge"],
        "nonce": query["nonce"],
        "sub": "ana",
        "groups": groups,
    }
    status, headers, body = browser.get(f"/auth/callback?code={code}&state={query['state']}")
    assert status == 302, body
    session = next(c for c in browser.set_cookie if c.startswith("pa_session="))
    assert "httponly" in session.lower() and "samesite=lax" in session.lower()
    assert "secure" not in session.lower()  # an http:// redirect URL (a lab): no Secure flag
    return headers["location"]


def test_sign_in_with_pkce_then_the_pages_by_session(site: tuple[str, TokenEndpoint], clock: Clock) -> None:
    base, tokens = site
    browser = Browser(base)
    assert sign_in(browser, tokens, ["security"]) == "/findings"
    (exchange,) = tokens.seen
    assert exchange["code_verifier"] and "client_secret" not in exchange  # a public client: PKCE only
    status, _, body = browser.get("/findings")
    assert status == 200 and b"<html" in body.lower()
    # The API does not take the cookie: bearer tokens only.
    assert browser.get("/api/v1/findings")[0] == 401
    # A session ends with its time, by the service's clock.
    clock.advance(hours=9)
    status, headers, _ = browser.get("/findings")
    assert status == 302 and headers["location"].startswith("/auth/login")
    clock.advance(hours=-9)
    assert browser.get("/findings")[0] == 200
    status, headers, _ = browser.get("/auth/logout")
    assert status == 302 and "pa_session" not in browser.cookies
    assert browser.get("/findings")[0] == 302


def test_a_team_member_signs_in_and_sees_its_teams_pages(site: tuple[str, TokenEndpoint]) -> None:
    base, tokens = site
    browser = Browser(base)
    sign_in(browser, tokens, ["ml-platform"])
    status, _, body = browser.get("/")
    assert status == 200 and b"/targets/lab" in body and b"/targets/other" not in body
    assert browser.get("/targets/other")[0] == 404
    assert browser.get("/targets/lab")[0] == 200


def test_a_forged_or_replayed_sign_in_is_refused(site: tuple[str, TokenEndpoint]) -> None:
    base, tokens = site
    browser = Browser(base)
    status, headers, _ = browser.get("/auth/login?next=/")
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(headers["location"]).query))
    tokens.codes["good"] = {
        "challenge": query["code_challenge"],
        "nonce": query["nonce"],
        "sub": "x",
        "groups": [],
    }
    # Another state than this browser's (a login CSRF): refused before any exchange.
    assert browser.get("/auth/callback?code=good&state=forged")[0] == 400
    assert tokens.seen == []
    # Without the browser's sign-in cookie: refused.
    assert Browser(base).get(f"/auth/callback?code=good&state={query['state']}")[0] == 400
    # An ID token whose nonce is not the sign-in's (a replayed token): refused.
    tokens.codes["good"]["nonce"] = "another"
    status, _, body = browser.get(f"/auth/callback?code=good&state={query['state']}")
    assert status == 401 and b"nonce" in body
    # A code the issuer does not know (or a verifier that does not match): refused.
    status, headers, _ = browser.get("/auth/login?next=/")
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(headers["location"]).query))
    tokens.codes["pkce"] = {
        "challenge": "not-the-challenge",
        "nonce": query["nonce"],
        "sub": "x",
        "groups": [],
    }
    status, _, body = browser.get(f"/auth/callback?code=pkce&state={query['state']}")
    assert status == 401 and b"400" in body
    assert "pa_session" not in browser.cookies
    # A session cookie not signed by this service is nobody's.
    browser.cookies["pa_session"] = "eyJzdWIiOiJldmUiLCJ0ZWFtcyI6WyJzZWMiXSwiZXhwIjo5OTk5OTk5OTk5fQ.00"
    assert browser.get("/findings")[0] == 302


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("/findings?rule=x", "/findings?rule=x"),
        ("//evil.example/x", "/"),
        ("https://evil.example/", "/"),
        ("/\\evil.example", "/"),
        ("", "/"),
        (None, "/"),
        ("findings", "/"),
    ],
)
def test_after_sign_in_only_this_sites_paths(given: str | None, kept: str) -> None:
    assert safe_next(given) == kept


def test_a_scope_that_is_no_oauth_scope_token_is_a_config_error(tmp_path: Path) -> None:
    from auditor.errors import ConfigError

    path = tmp_path / "c.yaml"
    path.write_text(
        "service:\n  auth:\n    client_id: pa\n    scopes: [openid, 'groups email']\n"
        "    teams: [{name: ml, groups: [ml]}]\n"
    )
    with pytest.raises(ConfigError, match=r"scopes.*not an OAuth scope token"):
        load_settings(path)
