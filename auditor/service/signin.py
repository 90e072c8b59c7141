"""The web pages' sign-in: OpenID Connect authorization code flow with PKCE (RFC 7636), and the
session cookie it leaves.

    GET /auth/login?next=/findings   → 302 to the issuer's authorization endpoint (state, nonce,
                                       code_challenge S256); the state, the verifier, the nonce
                                       and `next` in a signed, HttpOnly cookie for 10 minutes
    GET /auth/callback?code&state    → the state checked against that cookie; the code exchanged at
                                       the token endpoint with the verifier (and the client secret
                                       of a confidential client); the ID token validated (signature,
                                       issuer, audience = the client id, exp/nbf, nonce); a session
                                       cookie; 302 to `next` (a path of this site only)
    GET /auth/logout                 → the session cookie removed

The session cookie holds the caller's subject, team names and expiry, signed with HMAC-SHA256
(the key from `service.auth.session_secret_env`, else one per process); its teams' scopes are
those configured when it is read, so a team's change applies at once. Cookies are HttpOnly,
SameSite=Lax, and Secure when the redirect URL is https. Times come from the injected clock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from auditor.clock import Clock
from auditor.service.access import Authenticator, Principal, Unauthorized

log = logging.getLogger("auditor.signin")

SESSION = "pa_session"
LOGIN = "pa_login"
LOGIN_SECONDS = 600
MAX_TOKEN_RESPONSE = 1 << 20


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a path of this site, never another host (`//evil`, `\\\\`)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    parts = urllib.parse.urlsplit(target)
    if parts.scheme or parts.netloc:
        return "/"
    return target


class Sessions:
    """Signed cookie values: base64url(JSON) "." hex HMAC-SHA256."""

    def __init__(self, key: bytes, clock: Clock) -> None:
        self.key = key
        self.clock = clock

    def seal(self, payload: Mapping[str, Any], seconds: int) -> str:
        body = dict(payload, exp=int(self.clock().timestamp()) + seconds)
        raw = base64.urlsafe_b64encode(json.dumps(body, separators=(",", ":")).encode()).decode().rstrip("=")
        return f"{raw}.{hmac.new(self.key, raw.encode(), hashlib.sha256).hexdigest()}"

    def open(self, value: str | None) -> dict[str, Any] | None:
        if not value or "." not in value or len(value) > 8192:
            return None
        raw, _, mac = value.rpartition(".")
        if not hmac.compare_digest(mac, hmac.new(self.key, raw.encode(), hashlib.sha256).hexdigest()):
            return None
        try:
            body = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(body, dict) or not isinstance(body.get("exp"), int):
            return None
        return body if body["exp"] >= self.clock().timestamp() else None


class SignIn:
    def __init__(self, auth: Authenticator, key: bytes, client_secret: str, clock: Clock) -> None:
        assert auth.auth is not None and auth.auth.client_id
        self.auth = auth
        self.settings = auth.auth
        self.sessions = Sessions(key, clock)
        self.client_secret = client_secret
        self.secure = self.settings.redirect_url.lower().startswith("https://")

    def principal(self, request: Request) -> Principal | None:
        """The signed-in caller of a request (its session cookie), or None."""
        body = self.sessions.open(request.cookies.get(SESSION))
        if body is None or not isinstance(body.get("sub"), str) or not isinstance(body.get("teams"), list):
            return None
        return self.auth.of_teams(f"oidc:{body['sub'][:200]}", [str(t) for t in body["teams"]])

    def _cookie(self, response: Response, name: str, value: str, seconds: int, path: str = "/") -> None:
        response.set_cookie(
            name, value, max_age=seconds, path=path, httponly=True, secure=self.secure, samesite="lax"
        )

    def login(self, request: Request) -> Response:
        state, nonce = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        verifier = secrets.token_urlsafe(48)  # 64 characters of the unreserved set (RFC 7636 §4.1)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
        query = urllib.parse.urlencode(
            {
                "response_type": "code",
                "client_id": self.settings.client_id,
                "redirect_uri": self.settings.redirect_url,
                "scope": " ".join(dict.fromkeys(("openid", *self.settings.scopes))),
                "state": state,
                "nonce": nonce,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
            }
        )
        sep = "&" if "?" in self.settings.authorization_endpoint else "?"
        response = RedirectResponse(f"{self.settings.authorization_endpoint}{sep}{query}", status_code=302)
        sealed = self.sessions.seal(
            {
                "state": state,
                "nonce": nonce,
                "verifier": verifier,
                "next": safe_next(request.query_params.get("next")),
            },
            LOGIN_SECONDS,
        )
        self._cookie(response, LOGIN, sealed, LOGIN_SECONDS, "/auth/")
        return response

    def callback(self, request: Request) -> Response:
        started = self.sessions.open(request.cookies.get(LOGIN))
        state, code = request.query_params.get("state", ""), request.query_params.get("code", "")
        error = request.query_params.get("error")
        if error:
            return _refused(400, f"the issuer refused the sign-in: {error[:100]!r}")
        if started is None:
            return _refused(
                400, "no sign-in in progress (or it took over 10 minutes): start again at /auth/login"
            )
        if not state or not hmac.compare_digest(state, str(started.get("state", ""))):
            return _refused(400, "the state does not match this browser's sign-in")
        if not code or len(code) > 2048:
            return _refused(400, "no authorization code")
        try:
            answer = self._exchange(code, str(started["verifier"]))
            principal = self.auth.id_token(str(answer.get("id_token", "")), str(started["nonce"]))
        except Unauthorized as exc:
            log.warning("sign-in refused: %s", exc)
            return _refused(401, f"sign-in refused: {exc}")
        response = RedirectResponse(safe_next(str(started.get("next"))), status_code=302)
        sub = principal.actor.removeprefix("oidc:")
        self._cookie(
            response,
            SESSION,
            self.sessions.seal(
                {"sub": sub, "teams": list(principal.teams)}, self.settings.session_hours * 3600
            ),
            self.settings.session_hours * 3600,
        )
        response.delete_cookie(LOGIN, path="/auth/")
        return response

    def _exchange(self, code: str, verifier: str) -> dict[str, Any]:
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.settings.redirect_url,
            "client_id": self.settings.client_id,
            "code_verifier": verifier,
        }
        if self.client_secret:
            form["client_secret"] = self.client_secret
        request = urllib.request.Request(
            self.settings.token_endpoint,
            data=urllib.parse.urlencode(form).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.settings.timeout_seconds) as response:
                body = response.read(MAX_TOKEN_RESPONSE + 1)
        except urllib.error.HTTPError as exc:
            raise Unauthorized(f"the token endpoint answered {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise Unauthorized(f"the token endpoint could not be reached ({type(exc).__name__})") from None
        if len(body) > MAX_TOKEN_RESPONSE:
            raise Unauthorized("the token endpoint's answer is too large")
        try:
            data = json.loads(body)
        except ValueError:
            raise Unauthorized("the token endpoint's answer is not JSON") from None
        if not isinstance(data, dict):
            raise Unauthorized("the token endpoint's answer is not a JSON object")
        return data

    def logout(self) -> Response:
        response = RedirectResponse("/", status_code=302)
        response.delete_cookie(SESSION, path="/")
        return response


def _refused(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status)


def mount(app: FastAPI, signin: SignIn) -> None:
    @app.get("/auth/login", include_in_schema=False)
    def login(request: Request) -> Response:
        return signin.login(request)

    @app.get("/auth/callback", include_in_schema=False)
    def callback(request: Request) -> Response:
        return signin.callback(request)

    @app.get("/auth/logout", include_in_schema=False)
    def logout() -> Response:
        return signin.logout()
