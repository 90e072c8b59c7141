"""The API's writes (issue 36): acknowledge, suppress, open the fix pull request of a finding and
change a target's schedule, each by role (a write role over the finding's target or namespace, or
over the target), each appended to the audit log, done or refused; on SQLite and PostgreSQL,
through real HTTP (uvicorn), with tokens of a local identity provider (a real JWKS on loopback)
and the fix pull request opened through PyGithub against the local GitHub stand-in over a real
bare repository."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from dbsupport import Clock
from gitops.fakegithub import TOKEN, FakeGitHub, serve
from gitsupport import Origin
from httpsupport import call, serving
from idpsupport import ISSUER, JWKS, RSA_KEY, token
from seedrepo import seed_files
from sqlalchemy import Engine

from auditor.service.access import Authenticator
from auditor.service.api import create_app
from auditor.service.runner import AuditRunner
from auditor.service.scheduler import Scheduler
from auditor.settings.config import load_settings
from auditor.sources.manifests import Tools
from auditor.store.repository import FindingFilter, Store, TargetSpec

ADMIN = "local-admin-token"
READER_TOKEN = "reader-machine-token-abcdef"


@dataclass
class Service:
    base: str
    runner: AuditRunner
    scheduler: Scheduler
    hub: FakeGitHub
    clock: Clock
    settings: Any

    @property
    def store(self) -> Store:
        return self.runner.store

    def finding(self, target: str) -> dict[str, Any]:
        status, page, _ = call(f"{self.base}/api/v1/findings?target={target}", token=ADMIN)
        assert status == 200 and page["items"], page
        return dict(page["items"][0])

    def as_(self, *groups: str) -> str:
        return token(self.clock, groups=list(groups))

    def log(self, n: int) -> list[tuple[str, str, str, str]]:
        """The newest `n` audit log entries, oldest first: (actor, action, subject, outcome)."""
        items = self.store.audit_log(limit=n).items
        return [(e.actor, e.action, e.subject, e.outcome) for e in reversed(items)]


def _config(tmp_path: Path, jwks_url: str, bare: Path, github: str) -> Path:
    other = tmp_path / "other"
    for name, src in seed_files("before").items():
        (other / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, other / name)
    path = tmp_path / "auditor.yaml"
    reader = hashlib.sha256(READER_TOKEN.encode()).hexdigest()
    path.write_text(
        f"""
service:
  catch_up: false
  git_cache_dir: cache
  max_suppression_days: 30
  auth:
    issuer: {ISSUER}
    jwks_url: {jwks_url}
    teams:
      - {{name: ml-platform, groups: [ml-platform], targets: [infra], role: write}}
      - {{name: ml-owners, groups: [ml-owners], namespaces: ["ml-*"], role: write}}
      - {{name: viewers, groups: [viewers], targets: [infra, other], role: read}}
      - {{name: data, groups: [data-eng], namespaces: ["data-*"], role: write}}
      - {{name: sec, groups: [security], role: admin}}
    tokens:
      - {{name: dash, sha256: '{reader}', scopes: [read, write], teams: [viewers], expires: "2026-12-31"}}
targets:
  - name: infra
    schedule: '0 3 * * *'
    git: {{url: '{bare}', branch: main}}
    paths: [training, policies]
    nodes: [nodes/nodes.yaml]
    github: {{repository: acme/infra, base_url: '{github}', token_env: GH_TOKEN, seconds_between_writes: 0}}
  - name: other
    directory: '{other}'
"""
    )
    return path


@pytest.fixture
def service(tmp_path: Path, engine: Engine, clock: Clock, idp: JWKS) -> Iterator[Service]:
    idp.add("k1", RSA_KEY, "RS256")
    origin = Origin(tmp_path)
    origin.commit(seed_files())
    hub = FakeGitHub(origin.bare)
    with serve(hub) as github:
        settings = load_settings(_config(tmp_path, idp.url, origin.bare, github))
        store = Store(engine, clock)
        store.sync_targets(
            TargetSpec(t.name, t.kind, t.location, schedule=t.schedule) for t in settings.targets
        )
        environ = {"GH_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"}
        runner = AuditRunner(settings, store, Tools(None, None), owner="test:1", environ=environ)
        scheduler = Scheduler(settings, runner, clock)
        scheduler.start()
        auth = Authenticator(settings.service.auth, ADMIN, clock)
        try:
            with serving(create_app(store, runner, scheduler, ADMIN, authenticator=auth)) as base:
                for name in ("infra", "other"):
                    done = runner.run(name)
                    assert done is not None and done.status == "succeeded", done
                yield Service(base, runner, scheduler, hub, clock, settings)
        finally:
            scheduler.shutdown()


def test_acknowledge_by_role_kept_by_runs_and_taken_back(service: Service) -> None:
    base, f = service.base, service.finding("infra")
    url = f"{base}/api/v1/findings/{f['id']}/acknowledgement"
    assert f["acknowledgement"] is None
    status, body, _ = call(url, "PUT", service.as_("ml-platform"), {"note": "moving it to zone-a, PLAT-12"})
    assert status == 200, body
    assert body["acknowledgement"] == {
        "by": "oidc:ana",
        "at": body["acknowledgement"]["at"],
        "note": "moving it to zone-a, PLAT-12",
    }
    assert body["status"] == f["status"]  # it hides nothing
    # A run keeps it.
    again = service.runner.run("infra")
    assert again is not None and again.status == "succeeded"
    kept = call(f"{base}/api/v1/findings/{f['id']}", token=ADMIN)[1]
    assert kept["acknowledgement"]["note"] == "moving it to zone-a, PLAT-12" and kept["status"] == "open"
    page = call(f"{base}/findings/{f['id']}", token=ADMIN)[1]
    assert 'id="acknowledgement">Acknowledged by oidc:ana' in page and "PLAT-12" in page
    # A read role may not; a team that does not see it finds nothing; anonymous is 401.
    assert call(url, "PUT", service.as_("viewers"), {"note": "x"})[0] == 403
    assert call(url, "PUT", READER_TOKEN, {"note": "x"})[0] == 403  # machine token of a read team
    assert call(url, "PUT", service.as_("data-eng"), {"note": "x"})[0] == 404
    assert call(url, "PUT", None, {"note": "x"})[0] == 401
    # Hostile or malformed bodies are 422, never stored.
    assert call(url, "PUT", service.as_("ml-platform"), {"note": "a\x1b[31mred"})[0] == 422
    assert call(url, "PUT", service.as_("ml-platform"), {"note": "x" * 2001})[0] == 422
    assert call(url, "PUT", service.as_("ml-platform"), {"note": "x", "by": "someone else"})[0] == 422
    # Taken back; twice is 404.
    status, body, _ = call(url, "DELETE", service.as_("ml-owners"))  # a write role over ml-*
    assert status == 200 and body["acknowledgement"] is None
    assert call(url, "DELETE", service.as_("ml-owners"))[0] == 404
    subject = str(f["id"])
    assert service.log(7) == [
        ("oidc:ana", "finding.acknowledge", subject, "done"),
        ("oidc:ana", "finding.acknowledge", subject, "refused"),
        ("machine:dash", "finding.acknowledge", subject, "refused"),
        ("oidc:ana", "finding.acknowledge", subject, "refused"),
        ("anonymous", "finding.acknowledge", subject, "refused"),
        ("oidc:ana", "finding.unacknowledge", subject, "done"),
        ("oidc:ana", "finding.unacknowledge", subject, "refused"),
    ]
    [done] = [
        e
        for e in service.store.audit_log(limit=20).items
        if e.action == "finding.acknowledge" and e.outcome == "done"
    ]
    assert "cross-zone" in done.detail and "ml-demo/" in done.detail and "PLAT-12" in done.detail


def test_a_suppression_waives_now_in_every_run_until_it_expires(service: Service) -> None:
    base, clock, f = service.base, service.clock, service.finding("infra")
    url = f"{base}/api/v1/findings/{f['id']}/suppression"
    today = clock().date()
    until = today + timedelta(days=10)
    owner = service.as_("ml-owners")  # a namespace team's write role covers its workloads' findings
    status, body, _ = call(url, "PUT", owner, {"reason": "zone-b drained this week", "until": str(until)})
    assert status == 200, body
    assert body["status"] == "waived"
    assert body["waiver"] == {"reason": "zone-b drained this week", "expires": str(until)}
    waived = service.store.findings(FindingFilter(target="infra", status="waived"), 10).items
    assert [w.id for w in waived] == [f["id"]]
    # Every run applies it as a waiver of origin api; the other target's same finding is untouched.
    run = service.runner.run("infra")
    assert run is not None and run.status == "succeeded" and run.summary is not None
    assert run.summary.waived == 1
    assert call(f"{base}/api/v1/findings/{f['id']}", token=ADMIN)[1]["status"] == "waived"
    assert service.finding("other")["status"] == "new"  # its one run saw it
    [seen] = service.store.export("infra").waivers
    assert seen.source == "api:oidc:ana" and not seen.expired and seen.reason == "zone-b drained this week"
    # The namespace team may suppress, but not start runs of the target.
    assert call(f"{base}/api/v1/targets/infra/runs", "POST", owner)[0] == 403
    # Out of bounds: past, or beyond service.max_suppression_days (30 here).
    for bad in (today - timedelta(days=1), today + timedelta(days=31)):
        status, body, _ = call(url, "PUT", owner, {"reason": "x", "until": str(bad)})
        assert status == 422 and "until must be between" in body["detail"]
    assert call(url, "PUT", owner, {"reason": "", "until": str(until)})[0] == 422
    assert call(url, "PUT", service.as_("viewers"), {"reason": "x", "until": str(until)})[0] == 403
    # Expired: the next run shows it again (and reports the expired waiver).
    clock.advance(days=11)
    run = service.runner.run("infra")
    assert run is not None and run.summary is not None and run.summary.waived == 0
    assert call(f"{base}/api/v1/findings/{f['id']}", token=ADMIN)[1]["status"] == "open"
    assert [w.expired for w in service.store.export("infra").waivers] == [True]
    # Again, and lifted: open at once, and the next run keeps it open.
    until = clock().date() + timedelta(days=5)
    owner = service.as_("ml-owners")  # a token of today's
    assert call(url, "PUT", owner, {"reason": "again", "until": str(until)})[1]["status"] == "waived"
    status, body, _ = call(url, "DELETE", owner)
    assert status == 200 and body["status"] == "open" and body["waiver"] is None
    assert call(url, "DELETE", owner)[0] == 404
    run = service.runner.run("infra")
    assert run is not None and run.summary is not None and run.summary.waived == 0
    assert [a for _, a, _, o in service.log(8) if o == "done"] == [
        "finding.suppress",
        "finding.suppress",
        "finding.unsuppress",
    ]


def test_a_schedule_set_through_the_api_is_followed_by_every_replica(service: Service) -> None:
    base, store = service.base, service.store
    url = f"{base}/api/v1/targets/infra/schedule"
    writer = service.as_("ml-platform")
    status, body, _ = call(url, "PUT", writer, {"schedule": "*/15  *  * * *"})
    assert status == 200, body
    assert (body["schedule"], body["configured_schedule"], body["schedule_changed_by"]) == (
        "*/15 * * * *",
        "0 3 * * *",
        "oidc:ana",
    )
    # This replica's scheduler at once; another replica on the same store at its next tick.
    assert service.scheduler.crons["infra"] == "*/15 * * * *"
    job = service.scheduler.scheduler.get_job("target:infra")
    assert job is not None and "*/15" in str(job.trigger)
    other = Scheduler(service.settings, service.runner, service.clock)
    assert other.crons["infra"] == "0 3 * * *"
    other.refresh_schedules()
    assert (
        other.crons["infra"] == "*/15 * * * *" and other.crons["other"] == other.settings.targets[1].schedule
    )
    listed = {t["name"]: t for t in call(f"{base}/api/v1/targets", token=writer)[1]["items"]}
    assert listed["infra"]["schedule"] == "*/15 * * * *"
    # Refused: not a cron line, a target the role does not cover, a read role, an unknown target.
    for bad in ("61 * * * *", "* * * *", "@daily", "* * * * * *"):
        assert call(url, "PUT", writer, {"schedule": bad})[0] == 422, bad
    assert call(f"{base}/api/v1/targets/other/schedule", "PUT", writer, {"schedule": "0 * * * *"})[0] == 403
    assert call(url, "PUT", service.as_("viewers"), {"schedule": "0 * * * *"})[0] == 403
    assert call(f"{base}/api/v1/targets/nope/schedule", "PUT", ADMIN, {"schedule": "0 * * * *"})[0] == 404
    # Back to the config's.
    status, body, _ = call(url, "DELETE", writer)
    assert status == 200 and body["schedule"] == "0 3 * * *" and body["schedule_changed_by"] is None
    assert service.scheduler.crons["infra"] == "0 3 * * *"
    assert store.schedule_overrides() == {}
    # (A body the API's validation refuses before the endpoint, "@daily" here, is not a write.)
    assert [(a, o) for _, a, s, o in service.log(20) if s == "infra"] == [
        ("schedule.set", "done"),
        ("schedule.set", "refused"),  # 61 * * * *
        ("schedule.set", "refused"),  # six fields
        ("schedule.set", "refused"),  # a read role
        ("schedule.reset", "done"),
    ]


def test_the_fix_pull_request_of_a_finding_is_opened_once(service: Service) -> None:
    base, f = service.base, service.finding("infra")
    url = f"{base}/api/v1/findings/{f['id']}/pull-request"
    assert call(url, "POST", service.as_("viewers"))[0] == 403
    assert service.hub.pulls == []
    status, body, _ = call(url, "POST", service.as_("ml-owners"))
    assert status == 200, body
    [opened] = body["items"]
    assert opened["action"] == "opened" and opened["number"] == 1 and "ml-demo" in opened["workload"]
    status, body, _ = call(url, "POST", service.as_("ml-platform"))  # pressed again, by another team
    assert status == 200 and [o["action"] for o in body["items"]] == ["up-to-date"]
    assert len(service.hub.pulls) == 1 and len(service.store.pull_requests("infra")) == 1
    # A target without a github section: 409, saying why.
    other = service.finding("other")
    status, body, _ = call(f"{base}/api/v1/findings/{other['id']}/pull-request", "POST", ADMIN)
    assert status == 409 and "github section" in body["detail"]
    # The callers' requests, and the pull request itself (opened once, by the service).
    assert service.log(5) == [
        ("oidc:ana", "pull-request.open", str(f["id"]), "refused"),
        ("service", "pull-request.open", "infra batch/Job/ml-demo/trainer-workers", "done"),
        ("oidc:ana", "pull-request.open", str(f["id"]), "done"),
        ("oidc:ana", "pull-request.open", str(f["id"]), "done"),
        (
            "token:" + hashlib.sha256(ADMIN.encode()).hexdigest()[:12],
            "pull-request.open",
            str(other["id"]),
            "refused",
        ),
    ]
    details = [e.detail for e in service.store.audit_log(limit=4).items]
    assert "opened #1" in details[2] and "up-to-date #1" in details[1]
