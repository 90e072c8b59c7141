"""Who may see and do what: bearer JWTs from an OIDC issuer, hashed machine tokens and the one local
admin token; teams from a group claim; reads scoped to the caller's teams, writes by role.

Callers, in the order a bearer token is tried:

* the **local admin** token (`service.api_token` / `$AUDITOR_API_TOKEN`): sees and does everything,
  as the embedded single-user default always has;
* a **machine token** (`service.auth.tokens`): stored as its SHA-256 only, with scopes (`read`,
  `write`), teams and an expiry date (checked against the injected clock);
* a **JWT** from the configured issuer (`service.auth`): validated with PyJWT against the issuer's
  JWKS (PyJWKClient: keys cached, fetched again when a token names a key id not seen yet — a key
  rotation). Checked: signature, `iss`, `aud`, `exp` and `nbf` (against the injected clock, with the
  configured leeway), the algorithm against an allow-list of asymmetric ones (never `none`, never an
  HMAC algorithm: a public key can never be used as a shared secret), and the key's own `alg` when
  the JWKS states one. Teams are the configured ones whose `groups` meet the token's group claim.

A team grants `read`, `write` or `admin` over its targets (repositories, clusters) and namespaces
(shell patterns such as `ml-*`): a caller sees a finding when its target or its namespace is one of
its teams', may start a run of (or change the schedule of) a target its write role covers, and may
acknowledge, suppress or open the fix pull request of a finding of a target or namespace its write
role covers. `admin` sees everything, including the audit log.

Pure but for PyJWKClient's HTTP fetch of the JWKS (its URL comes from the config, never a token).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from auditor.clock import Clock
from auditor.store.records import Scope

if TYPE_CHECKING:
    from auditor.settings.service import AuthSettings, TeamSettings

ROLES = ("read", "write", "admin")
# Asymmetric algorithms only: `none` and HS* are never accepted, whatever the config says.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
EVERYTHING = Scope(None, None)


class Unauthorized(Exception):
    """No caller could be established from the request (401), with the reason (never the token)."""


@dataclass(frozen=True, slots=True)
class Principal:
    actor: str  # as the audit log names it
    role: str  # read | write | admin
    teams: tuple[str, ...] = ()
    scope: Scope = EVERYTHING

    @property
    def admin(self) -> bool:
        return self.role == "admin"

    def can_write(self, target: str) -> bool:
        """May start runs of, change the schedule of, `target`."""
        return self.admin or (self.role == "write" and self.scope.sees_target(target))

    def can_write_finding(self, target: str, namespace: str) -> bool:
        """May acknowledge, suppress or open the fix PR of a finding of `target` in `namespace`:
        a write role over either (a team owning the namespace owns its workloads' findings)."""
        return self.admin or (self.role == "write" and self.scope.sees(target, namespace))


def token_actor(token: str) -> str:
    """The local admin in the audit log: the first 12 hex digits of its token's SHA-256."""
    return "token:" + hashlib.sha256(token.encode()).hexdigest()[:12]


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def team_scope(teams: Iterable[TeamSettings]) -> tuple[str, Scope]:
    """The highest role of `teams` and the union of what they see."""
    teams = list(teams)
    role = max((t.role for t in teams), key=ROLES.index, default="read")
    if role == "admin":
        return role, EVERYTHING
    targets = frozenset(x for t in teams for x in t.targets)
    namespaces = tuple(dict.fromkeys(x for t in teams for x in t.namespaces))
    return role, Scope(targets, namespaces)


def _lower(role: str, ceiling: str) -> str:
    return min(role, ceiling, key=ROLES.index)


class Authenticator:
    """Turns an Authorization header into a Principal (raises Unauthorized)."""

    def __init__(self, auth: AuthSettings | None, admin_token: str, clock: Clock, jwks: Any = None) -> None:
        self.auth = auth
        self.admin_token = admin_token
        self.clock = clock
        self._jwks = jwks
        self._teams = {t.name: t for t in auth.teams} if auth is not None else {}

    @property
    def identities(self) -> bool:
        """Whether any caller other than the local admin exists (then every read is authenticated)."""
        return self.auth is not None

    @property
    def configured(self) -> bool:
        return bool(self.admin_token) or self.auth is not None

    def authenticate(self, header: str) -> Principal:
        given = bearer(header)
        if given is None:
            raise Unauthorized("a bearer token is required")
        if self.admin_token and hmac.compare_digest(given.encode(), self.admin_token.encode()):
            return Principal(token_actor(self.admin_token), "admin")
        if self.auth is not None:
            machine = self._machine(given)
            if machine is not None:
                return machine
            if given.count(".") == 2 and self.auth.issuer:
                return self._jwt(given)
        raise Unauthorized("not a valid token")

    def _machine(self, given: str) -> Principal | None:
        assert self.auth is not None
        digest = token_hash(given)
        found = None
        for token in self.auth.tokens:  # every entry compared: the time does not tell which matched
            if hmac.compare_digest(digest, token.sha256.lower()):
                found = token
        if found is None:
            return None
        today = self.clock().date()
        if today > found.expires_on:
            raise Unauthorized(f"machine token {found.name} expired on {found.expires}")
        role, scope = team_scope(self._teams[n] for n in found.teams if n in self._teams)
        ceiling = "write" if "write" in found.scopes else "read"
        return Principal(f"machine:{found.name}", _lower(role, ceiling), tuple(found.teams), scope)

    def _jwt(self, token: str, audience: str | None = None, nonce: str | None = None) -> Principal:
        """A bearer JWT (audience `auth.audience`), or an ID token of the sign-in (`audience`: the
        client id, `nonce`: the one the sign-in sent)."""
        import jwt

        auth = self.auth
        assert auth is not None
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise Unauthorized(f"not a JWT ({exc})") from None
        alg = header.get("alg")
        if alg not in auth.algorithms or alg not in ALGORITHMS:
            raise Unauthorized(f"JWT algorithm {alg!r} is not allowed")
        try:
            key = self.jwks().get_signing_key_from_jwt(token)
        except jwt.PyJWTError as exc:
            raise Unauthorized(f"no key of the issuer verifies it ({exc})") from None
        # The algorithm the JWKS itself states for the key, when it states one (PyJWK otherwise
        # infers a default from the key type, which says nothing of the issuer's intent).
        data = getattr(key, "_jwk_data", None)
        stated = data.get("alg") if isinstance(data, dict) else None
        if stated and stated != alg:
            raise Unauthorized(f"the key {header.get('kid')!r} is for {stated}, the token says {alg}")
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=audience or auth.audience,
                issuer=auth.issuer,
                # Times are checked below against the injected clock, not the process's.
                options={
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                    "require": ["exp", "iss", "aud", "sub"],
                },
            )
        except jwt.PyJWTError as exc:
            raise Unauthorized(f"JWT rejected: {exc}") from None
        now = self.clock().timestamp()
        leeway = auth.leeway_seconds
        exp, nbf = claims.get("exp"), claims.get("nbf")
        if not isinstance(exp, int | float) or now > exp + leeway:
            raise Unauthorized("JWT expired")
        if nbf is not None and (not isinstance(nbf, int | float) or now + leeway < nbf):
            raise Unauthorized("JWT not valid yet (nbf)")
        if nonce is not None and not hmac.compare_digest(str(claims.get("nonce", "")), nonce):
            raise Unauthorized("the ID token's nonce is not the sign-in's")
        return self.member(str(claims["sub"]), _groups(claims.get(auth.groups_claim)))

    def id_token(self, token: str, nonce: str) -> Principal:
        """The caller an ID token of the web sign-in names (audience: the client id)."""
        assert self.auth is not None
        if token.count(".") != 2:
            raise Unauthorized("the token endpoint sent no ID token")
        return self._jwt(token, self.auth.client_id, nonce)

    def member(self, sub: str, groups: set[str]) -> Principal:
        """The principal of a signed-in person: the teams its groups make it a member of."""
        auth = self.auth
        assert auth is not None
        teams = [t for t in auth.teams if groups.intersection(t.groups)]
        role, scope = team_scope(teams)
        if not teams:
            scope = Scope(frozenset(), ())
        return Principal(f"oidc:{sub[:200]}", role, tuple(t.name for t in teams), scope)

    def of_teams(self, actor: str, names: Sequence[str]) -> Principal:
        """A session's principal again, from its team names and the teams configured now."""
        teams = [self._teams[n] for n in names if n in self._teams]
        role, scope = team_scope(teams)
        if not teams:
            scope = Scope(frozenset(), ())
        return Principal(actor, role, tuple(t.name for t in teams), scope)

    def jwks(self) -> Any:
        if self._jwks is None:
            import jwt

            assert self.auth is not None
            self._jwks = jwt.PyJWKClient(
                self.auth.jwks_url,
                cache_jwk_set=True,
                lifespan=300,
                timeout=self.auth.timeout_seconds,
                cooldown_duration=self.auth.jwks_refresh_cooldown_seconds,
            )
        return self._jwks


def _groups(raw: Any) -> set[str]:
    """A group claim as a set: a list of strings, or one space-separated string (some issuers)."""
    if isinstance(raw, str):
        return set(raw.split())
    if isinstance(raw, Sequence):
        return {g for g in raw if isinstance(g, str)}
    return set()


def bearer(header: str) -> str | None:
    """The token of `Authorization: Bearer <token>` (or Basic with the token as the password)."""
    import base64
    import binascii

    scheme, _, given = header.partition(" ")
    if scheme.lower() == "basic":
        try:
            return base64.b64decode(given.strip(), validate=True).decode().partition(":")[2] or None
        except (binascii.Error, UnicodeDecodeError):
            return None
    if scheme.lower() != "bearer":
        return None
    return given.strip() or None
