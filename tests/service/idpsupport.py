"""A local identity provider for the access tests: a JWKS endpoint (RFC 7517) on loopback whose
keys the test makes with `cryptography` and can rotate, and tokens signed with PyJWT as an
issuer's would be."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from dbsupport import Clock

ISSUER = "https://idp.example.test/realms/ml"


class JWKS:
    """A JWKS endpoint whose keys the test can rotate; counts its fetches."""

    def __init__(self) -> None:
        self.keys: list[dict[str, Any]] = []
        self.fetches = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.fetches += 1
                body = json.dumps({"keys": outer.keys}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/certs"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def add(self, kid: str, private: Any, alg: str) -> None:
        jwk = json.loads(jwt.algorithms.get_default_algorithms()[alg].to_jwk(private.public_key()))
        self.keys.append({**jwk, "kid": kid, "use": "sig", "alg": alg})


RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())


def token(clock: Clock, key: Any = RSA_KEY, kid: str = "k1", alg: str = "RS256", **claims: Any) -> str:
    now = int(clock().timestamp())
    body = {"iss": ISSUER, "aud": "placement-auditor", "sub": "ana", "exp": now + 300, "iat": now, **claims}
    return jwt.encode(
        {k: v for k, v in body.items() if v is not None}, key, algorithm=alg, headers={"kid": kid}
    )
