"""A tiny HTTP client for the service tests; the app is served by benchmarks/world/httpserve.py
(`serving`, which the fleet benchmark uses too)."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from world.httpserve import serving

__all__ = ["call", "serving"]


def call(
    url: str, method: str = "GET", token: str | None = None, body: Any = None
) -> tuple[int, Any, dict[str, str]]:
    """One request; `body` is sent as JSON."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
            status, headers = response.status, dict(response.headers)
    except urllib.error.HTTPError as exc:
        body, status, headers = exc.read(), exc.code, dict(exc.headers)
    ctype = headers.get("content-type", headers.get("Content-Type", ""))
    return status, (json.loads(body) if "json" in ctype else body.decode()), headers
