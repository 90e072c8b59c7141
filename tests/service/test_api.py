"""The HTTP API through real HTTP (uvicorn), on SQLite and PostgreSQL."""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from dbsupport import Clock
from httpsupport import call, serving
from seedrepo import seed_files
from sqlalchemy import Engine

from auditor.service.api import create_app
from auditor.service.runner import AuditRunner
from auditor.service.scheduler import Scheduler
from auditor.settings.config import load_settings
from auditor.sources.manifests import Tools
from auditor.store.repository import Store, TargetSpec

TOKEN = "t0ken-for-tests"


@pytest.fixture
def api(tmp_path: Path, engine: Engine, clock: Clock) -> Iterator[tuple[str, AuditRunner]]:
    repo = tmp_path / "repo"
    for name, src in seed_files("before").items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(Path(src).read_bytes())
    config = tmp_path / "auditor.yaml"
    config.write_text(
        # No catch-up: these tests claim their own runs, whatever slot the pinned clock is in.
        "service: {catch_up: false}\n"
        f"targets:\n  - name: lab\n    directory: '{repo}'\n  - name: other\n    directory: '{repo}'\n    paths: [nodes]\n"
    )
    settings = load_settings(config)
    store = Store(engine, clock)
    store.sync_targets(TargetSpec(t.name, t.kind, t.location) for t in settings.targets)
    runner = AuditRunner(settings, store, Tools(None, None), owner="test:1")
    scheduler = Scheduler(settings, runner, clock)
    scheduler.start()
    try:
        with serving(create_app(store, runner, scheduler, TOKEN)) as base:
            yield base, runner
    finally:
        scheduler.shutdown()


def test_health_readiness_and_openapi(api: tuple[str, AuditRunner]) -> None:
    base, _ = api
    assert call(f"{base}/healthz")[:2] == (200, {"status": "ok"})
    status, body, _ = call(f"{base}/readyz")
    assert status == 200 and body["checks"] == {"database": "ok", "schema": "ok", "scheduler": "ok"}
    status, spec, _ = call(f"{base}/api/v1/openapi.json")
    assert status == 200 and spec["openapi"].startswith("3.")
    assert {
        "/api/v1/findings",
        "/api/v1/findings/{finding_id}",
        "/api/v1/runs",
        "/api/v1/targets",
        "/api/v1/targets/{name}/runs",
    } <= set(spec["paths"])


def test_findings_runs_targets_and_detail(api: tuple[str, AuditRunner]) -> None:
    base, runner = api
    result = runner.run("lab")
    assert result is not None and result.status == "succeeded"
    status, page, _ = call(f"{base}/api/v1/findings?target=lab&severity=critical&status=new")
    assert status == 200 and [f["rule"] for f in page["items"]] == ["cross-zone-blocked"]
    assert page["next_cursor"] is None
    finding = page["items"][0]
    status, detail, _ = call(f"{base}/api/v1/findings/{finding['id']}")
    assert status == 200 and detail["history"][0]["run_id"] == result.run_id
    assert detail["detail"]["certainty"] == "always"
    assert call(f"{base}/api/v1/findings?target=lab&severity=low")[1]["items"] == []
    assert call(f"{base}/api/v1/findings?namespace=ml-demo")[1]["items"][0]["id"] == finding["id"]
    status, runs, _ = call(f"{base}/api/v1/runs?target=lab")
    assert status == 200 and runs["items"][0]["status"] == "succeeded"
    status, targets, _ = call(f"{base}/api/v1/targets")
    assert [t["name"] for t in targets["items"]] == ["lab", "other"]
    assert targets["items"][0]["last_successful_run_at"] is not None
    assert call(f"{base}/api/v1/findings/999999")[0] == 404
    assert call(f"{base}/api/v1/runs/999999")[0] == 404


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("severity=critical'%20OR%20'1'='1", 422),
        ("status=open;DROP%20TABLE%20findings", 422),
        ("namespace=" + urllib.parse.quote("a' OR 1=1 --"), 422),
        ("rule=" + urllib.parse.quote('x"); DELETE FROM runs; --'), 422),
        ("target=" + "a" * 300, 422),
        ("limit=1000000", 422),
        ("limit=0", 422),
        ("limit=-5", 422),
        ("limit=abc", 422),
        ("since=yesterday", 422),
        ("cursor=not-a-cursor", 400),
        ("cursor=" + "A" * 500, 422),
        ("rule=%00", 422),
    ],
)
def test_hostile_filters_get_4xx(api: tuple[str, AuditRunner], query: str, expected: int) -> None:
    base, _ = api
    status, body, _ = call(f"{base}/api/v1/findings?{query}")
    assert status == expected, body
    assert call(f"{base}/healthz")[0] == 200  # and the service is fine


@pytest.mark.parametrize(
    "path", ["/api/v1/findings/abc", "/api/v1/findings/99999999999999999999999", "/api/v1/runs/-1"]
)
def test_hostile_ids_get_4xx(api: tuple[str, AuditRunner], path: str) -> None:
    assert call(api[0] + path)[0] == 422


def test_trigger_needs_the_token_and_runs(api: tuple[str, AuditRunner]) -> None:
    base, _ = api
    url = f"{base}/api/v1/targets/lab/runs"
    assert call(url, "POST")[0] == 401
    assert call(url, "POST", token="wrong")[0] == 401
    assert call(f"{base}/api/v1/targets/nope/runs", "POST", token=TOKEN)[0] == 404
    assert call(f"{base}/api/v1/targets/{urllib.parse.quote('../x')}/runs", "POST", token=TOKEN)[0] in (
        404,
        422,
    )
    status, body, headers = call(url, "POST", token=TOKEN)
    assert status == 202 and headers["location"] == f"/api/v1/runs/{body['run_id']}"
    deadline = time.monotonic() + 30
    while True:
        run = call(f"{base}{headers['location']}")[1]
        if run["status"] != "running" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert run["status"] == "succeeded" and run["trigger"] == "api" and run["findings"] == 1


def test_metrics(api: tuple[str, AuditRunner]) -> None:
    base, runner = api
    runner.run("lab")
    runner.run("other")
    status, text, headers = call(f"{base}/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert 'auditor_runs_total{status="succeeded",target="lab"} 1.0' in text
    assert 'auditor_open_findings{rule="cross-zone-blocked",severity="critical"} 1.0' in text
    assert 'auditor_blocked_groups{target="lab"} 1.0' in text
    assert 'auditor_blocked_groups{target="other"} 0.0' in text
    assert 'auditor_last_successful_run_timestamp_seconds{target="lab"}' in text
    assert 'auditor_estimated_monthly_inter_az_cost_usd{target="lab"} 0.0' in text
    assert "auditor_store_up 1.0" in text
    assert "ml-demo" not in text  # no workload or namespace labels


def test_write_endpoints_are_closed_without_a_configured_token(
    tmp_path: Path, engine: Engine, clock: Clock
) -> None:
    settings = load_settings(None)
    store = Store(engine, clock)
    runner = AuditRunner(settings, store, Tools(None, None))
    scheduler = Scheduler(settings, runner, clock)
    with serving(create_app(store, runner, scheduler, "")) as base:
        assert call(f"{base}/api/v1/targets/x/runs", "POST", token="")[0] == 403
        assert call(f"{base}/readyz")[0] == 503  # the scheduler is not running


def test_every_write_and_every_refused_one_is_in_the_audit_log(api: tuple[str, AuditRunner]) -> None:
    base, runner = api
    url = f"{base}/api/v1/targets/lab/runs"
    assert call(url, "POST")[0] == 401
    assert call(f"{base}/api/v1/targets/nope/runs", "POST", token=TOKEN)[0] == 404
    status, body, _ = call(url, "POST", token=TOKEN)
    assert status == 202
    entries = runner.store.audit_log().items
    assert [(e.action, e.subject, e.outcome) for e in entries] == [
        ("run.start", "lab", "done"),
        ("run.start", "nope", "refused"),
        ("run.start", "lab", "refused"),
    ]
    done, unknown, anonymous = entries
    assert done.detail == f"run {body['run_id']}" and done.address == "127.0.0.1"
    assert done.actor == unknown.actor and done.actor.startswith("token:") and TOKEN not in done.actor
    assert anonymous.actor == "anonymous" and anonymous.detail == "a bearer token is required"
    # The export: the token is needed to read it, even though reads are open here.
    assert call(f"{base}/api/v1/audit-log")[0] == 401
    assert call(f"{base}/api/v1/findings")[0] == 200
    status, page, _ = call(f"{base}/api/v1/audit-log?limit=2", token=TOKEN)
    assert status == 200 and [e["outcome"] for e in page["items"]] == ["done", "refused"]
    status, rest, _ = call(f"{base}/api/v1/audit-log?limit=2&cursor={page['next_cursor']}", token=TOKEN)
    assert [e["actor"] for e in rest["items"]] == ["anonymous"] and rest["next_cursor"] is None
    assert call(f"{base}/api/v1/audit-log?actor=anonymous", token=TOKEN)[1]["items"][0]["id"] == anonymous.id
    assert call(f"{base}/api/v1/audit-log?cursor=garbage", token=TOKEN)[0] == 400
    assert call(f"{base}/api/v1/audit-log?limit=100000", token=TOKEN)[0] == 422
    # Nothing in the API changes or removes an entry.
    spec = call(f"{base}/api/v1/openapi.json")[1]
    assert set(spec["paths"]["/api/v1/audit-log"]) == {"get"}
