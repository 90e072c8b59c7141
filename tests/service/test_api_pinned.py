"""Every read endpoint's full response, byte for byte, pinned (tests/service/data/api_pinned.json):
new, open, reopened, resolved and waived findings, partial and failed runs, costs, history."""

from __future__ import annotations

import json
import os
import urllib.request
from datetime import date
from pathlib import Path

from dbsupport import DEFAULT_NOW, Clock
from httpsupport import serving
from sqlalchemy import Engine
from store.factory import finding

from auditor.service.api import create_app
from auditor.store.repository import RunOutcome, Store, TargetSpec, WaiverSeen

PINNED = Path(__file__).parent / "data" / "api_pinned.json"


class _Idle:
    running = True

    def submit(self, run_id: int, target: str) -> None:
        raise AssertionError("no run is triggered here")

    def refresh_schedules(self) -> None:
        raise AssertionError("not used")


def _history(store: Store, clock: Clock) -> None:
    store.sync_targets(
        [
            TargetSpec(
                "infra", "git", "https://example.com/infra.git", "main", ("clusters",), (), "0 6 * * *"
            ),
            TargetSpec("lab", "directory", "/srv/lab"),
        ]
    )
    a, b = finding("a", cost=100.0), finding("b", cost=50.5)
    c = finding("c", rule="cross-zone-blocked", severity="critical", namespace="team-x")
    waiver = WaiverSeen(
        c.fingerprint, "document:waivers.yaml:c", "accepted until the move", date(2027, 1, 1), False
    )
    outcomes = [
        ("infra", RunOutcome("succeeded", "abc123", [a, b], labels={a.workload.identity: {"team": "ml"}})),
        ("infra", RunOutcome("succeeded", "abc124", [a, c])),
        ("lab", RunOutcome("partial", None, [b], errors=[{"file": "x.yaml", "line": 1, "message": "bad"}])),
        ("infra", RunOutcome("succeeded", "abc125", [a, b], waived=[(c, waiver)])),
    ]
    for target, outcome in outcomes:
        clock.advance(hours=5)
        store.complete_run(store.claim_run(target, None, "cli", "host:1"), outcome)
    clock.advance(hours=1)
    store.fail_run(store.claim_run("lab", None, "api", "host:1"), "fetching: unreachable")


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return str(response.read().decode())


def test_every_read_endpoint_answers_the_pinned_bytes(engine: Engine) -> None:
    # The bytes hold the times: this history starts at one fixed instant whatever the hour
    # (tests/test_any_hour.py moves the other tests' clocks), and the API reads no other clock.
    clock = Clock(DEFAULT_NOW)
    store = Store(engine, clock)
    _history(store, clock)
    paths = [
        "/api/v1/targets",
        "/api/v1/findings",
        "/api/v1/findings?limit=2",
        "/api/v1/findings?target=infra&status=waived",
        "/api/v1/runs",
        "/api/v1/runs?target=lab&limit=1",
    ]
    with serving(create_app(store, None, _Idle(), "token")) as base:  # type: ignore[arg-type]
        found = json.loads(_get(base + "/api/v1/findings"))["items"]
        runs = json.loads(_get(base + "/api/v1/runs"))["items"]
        paths += [f"/api/v1/findings/{f['id']}" for f in found] + [f"/api/v1/runs/{r['id']}" for r in runs]
        cursor = json.loads(_get(base + "/api/v1/findings?limit=2"))["next_cursor"]
        paths.append(f"/api/v1/findings?limit=2&cursor={cursor}")
        answers = {path: _get(base + path) for path in paths}
    if os.environ.get("AUDITOR_PIN_API") == "write":
        PINNED.write_text(json.dumps(answers, indent=1, sort_keys=True) + "\n")
    assert answers == json.loads(PINNED.read_text())
