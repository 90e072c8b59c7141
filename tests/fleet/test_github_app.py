"""The GitHub App end to end in the embedded default (no broker): webhooks signed as GitHub signs
them reach the real service over HTTP; forged, replayed and stale ones are refused; a pull
request adding a blocking CiliumNetworkPolicy gets a failing check run annotating the introduced
finding, and the fixing push to the PR turns it green — on the same check-run machinery the
workers use, against a local GitHub (PyGithub, App JWT, installation tokens)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from appsupport import app_repo
from dbsupport import Clock
from fakegithub import FakeGitHub, serve
from fleetsupport import (
    APP_ID,
    SECRET,
    check_run_event,
    check_suite_event,
    deliver,
    installation_repositories_event,
    pull_request_event,
)
from gitsupport import Origin, git
from httpsupport import serving
from seedrepo import SEED
from sqlalchemy import func, select

from auditor.bootstrap import build_service
from auditor.service.leader import FleetScheduler, sweep_slot
from auditor.service.scheduler import slot_text
from auditor.service.tasks import AuditTask, WorkerContext, run_audit, run_installation, run_reconcile
from auditor.service.webhooks import InstallationEvent
from auditor.settings.config import load_settings
from auditor.store.fleet import FleetStore
from auditor.store.repository import FindingFilter, TargetSpec
from auditor.store.schema import CheckRunRow, WebhookDelivery


@dataclass
class Lab:
    base: str
    hub: FakeGitHub
    origin: Origin
    clock: Clock
    fleet: FleetStore
    main_sha: str
    service: Any


@pytest.fixture(params=["sqlite", "postgresql"])
def lab(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Lab]:
    from dbsupport import pg_schema, pg_url

    key_file, origin, main_sha, hub = app_repo(tmp_path)
    clock = Clock()
    with serve(hub) as gh_base:

        def run(db_url: str) -> Iterator[Lab]:
            config = tmp_path / "auditor.yaml"
            config.write_text(
                f"database: {{url: '{db_url}'}}\n"
                "service:\n  catch_up: false\n"
                f"  git_cache_dir: '{tmp_path / 'cache'}'\n"
                "  github_app:\n"
                f"    app_id: {APP_ID}\n    private_key_file: '{key_file}'\n"
                f"    base_url: '{gh_base}'\n    webhook_secret: '{SECRET}'\n"
                f"    clone_url: '{tmp_path}/{{full_name}}.git'\n"
            )
            service = build_service(load_settings(config), clock=clock, environ={})
            service.scheduler.start()
            try:
                with serving(service.app) as base:
                    yield Lab(
                        base, hub, origin, clock, FleetStore(service.store.engine, clock), main_sha, service
                    )
            finally:
                service.scheduler.shutdown()
                service.store.engine.dispose()

        if request.param == "sqlite":
            yield from run(f"sqlite:///{tmp_path / 'store.db'}")
        else:
            with pg_schema() as schema:
                yield from run(pg_url(schema))


def _wait_completed(hub: FakeGitHub, sha: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = [r for r in hub.check_runs if r["head_sha"] == sha]
        if runs and runs[0]["status"] == "completed":
            return runs[0]
        time.sleep(0.1)
    raise AssertionError(f"no completed check run on {sha}: {hub.check_runs}")


def _push_branch(origin: Origin, files: dict, message: str) -> str:
    for name, src in files.items():
        path = origin.work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(Path(src).read_bytes())
    git("add", "--all", cwd=origin.work)
    git("commit", "--quiet", "-m", message, cwd=origin.work)
    git("push", "--quiet", "origin", "HEAD:refs/heads/feature", cwd=origin.work)
    return git("rev-parse", "HEAD", cwd=origin.work)


def test_forged_replayed_and_stale_deliveries_are_refused(lab: Lab) -> None:
    now = lab.clock()
    event = installation_repositories_event(["acme/infra"], [], now)
    # Forged: signed with another secret; tampered: the signature of another body; unsigned.
    assert deliver(lab.base, "installation_repositories", event, secret="not-the-secret")[0] == 401
    status, body = deliver(lab.base, "installation_repositories", event, sign="sha256=" + "0" * 64)
    assert status == 401 and "does not match" in body["error"]
    assert deliver(lab.base, "installation_repositories", event, sign="")[0] == 401
    # Accepted once; the same delivery id again is a replay.
    status, body = deliver(lab.base, "installation_repositories", event, delivery="d-1")
    assert status == 202, body
    status, body = deliver(lab.base, "installation_repositories", event, delivery="d-1")
    assert status == 409 and "replay" in body["error"]
    # A captured body under a new delivery id, once its event time is older than the window.
    old = installation_repositories_event(["acme/infra"], [], now - timedelta(seconds=3601))
    status, body = deliver(lab.base, "installation_repositories", old)
    assert status == 409 and "stale" in body["error"]
    # Malformed payloads name the field.
    del event["installation"]["updated_at"]
    status, body = deliver(lab.base, "installation_repositories", event)
    assert status == 400 and "installation.updated_at" in body["error"]
    with lab.fleet.sessions() as session:
        assert session.scalar(select(func.count()).select_from(WebhookDelivery)) == 1
    # Delivery ids are forgotten after the window (the table does not grow without end).
    lab.clock.advance(seconds=3700)
    fresh = installation_repositories_event([], ["acme/infra"], lab.clock())
    assert deliver(lab.base, "installation_repositories", fresh, delivery="d-1")[0] == 202
    assert lab.fleet.app_repositories() == {}


def test_installation_events_add_and_remove_targets(lab: Lab) -> None:
    now = lab.clock()
    assert (
        deliver(
            lab.base,
            "installation_repositories",
            installation_repositories_event(["acme/infra", "acme/ml"], [], now),
        )[0]
        == 202
    )
    assert lab.fleet.app_repositories() == {"acme/infra": 7, "acme/ml": 7}
    assert (
        deliver(lab.base, "installation_repositories", installation_repositories_event([], ["acme/ml"], now))[
            0
        ]
        == 202
    )
    assert lab.fleet.app_repositories() == {"acme/infra": 7}


def test_pr_adding_a_blocking_policy_fails_and_the_fixing_push_turns_it_green(lab: Lab) -> None:
    git("checkout", "--quiet", "-b", "feature", cwd=lab.origin.work)
    head = _push_branch(lab.origin, {"policies/cilium.yaml": SEED / "policies.yaml"}, "zone isolation")
    event = pull_request_event("opened", 12, head, lab.main_sha, lab.clock())
    status, body = deliver(lab.base, "pull_request", event)
    assert status == 202 and body["queued"] == [f"check:acme/infra:{head}"]
    run = _wait_completed(lab.hub, head)
    assert run["conclusion"] == "failure"
    assert run["name"] == "placement-audit" and run["external_id"] == f"placement-audit:{head}"
    [annotation] = run["annotations"]
    assert annotation["path"] == "training/workload.yaml" and annotation["start_line"] == 38
    assert annotation["annotation_level"] == "failure"
    assert annotation["title"].startswith("cross-zone-blocked (critical")
    assert "CiliumNetworkPolicy" in annotation["message"]
    summary = run["output"]["summary"]
    assert (
        "Introduced: 1, resolved: 1" in summary
        and "### Resolved" in summary
        and "cross-zone-traffic" in summary
    )
    assert "### Map of the affected groups" in summary and "zones zone-a" in summary
    # A redelivery of the same event (GitHub's "Redeliver" keeps the GUID: refused) and a second
    # event for the same head (reopened): that commit's check run is complete, so it is neither
    # created again nor reported again (GitHub would append every annotation a second time).
    assert deliver(lab.base, "pull_request", event, delivery="same-guid")[0] == 202
    assert deliver(lab.base, "pull_request", event, delivery="same-guid")[0] == 409
    updates = run["output_updates"]
    status, _ = deliver(
        lab.base, "pull_request", pull_request_event("reopened", 12, head, lab.main_sha, lab.clock())
    )
    assert status == 202

    # The fixing push: the workload pinned to one zone (the seed lab's "after").
    fixed = _push_branch(lab.origin, {"training/workload.yaml": SEED / "after" / "workload.yaml"}, "pin zone")
    status, _ = deliver(
        lab.base, "pull_request", pull_request_event("synchronize", 12, fixed, lab.main_sha, lab.clock())
    )
    assert status == 202
    green = _wait_completed(lab.hub, fixed)
    assert green["conclusion"] == "success" and green["annotations"] == []
    assert "Introduced: 0" in green["output"]["summary"]

    def recorded() -> set[tuple[str, str, str | None]]:
        with lab.fleet.sessions() as session:
            return {(r.head_sha, r.status, r.conclusion) for r in session.scalars(select(CheckRunRow))}

    # The store records the completion right after GitHub's answer to the final update.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (fixed, "completed", "success") not in recorded():
        time.sleep(0.05)
    assert {(head, "completed", "failure"), (fixed, "completed", "success")} <= recorded()
    # Every queued job done (the redelivery and `reopened` included): the first commit's check run
    # is as it was — one check run, one annotation, no further update.
    lab.service.scheduler.scheduler.shutdown(wait=True)
    [first] = [r for r in lab.hub.check_runs if r["head_sha"] == head]
    assert first["output_updates"] == updates and len(first["annotations"]) == 1
    assert first["conclusion"] == "failure"
    # Installation tokens came from the App's JWT exchange.
    assert any(r.startswith("POST /app/installations/7/access_tokens") for r in lab.hub.requests)


def _wait_runs(hub: FakeGitHub, sha: str, n: int, timeout: float = 120) -> list[dict]:
    """The check runs of `sha` once `n` of them are completed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = [r for r in hub.check_runs if r["head_sha"] == sha]
        if len([r for r in runs if r["status"] == "completed"]) >= n:
            return runs
        time.sleep(0.1)
    raise AssertionError(f"not {n} completed check runs on {sha}: {hub.check_runs}")


def test_re_run_runs_again_once_and_the_fix_button_opens_one_pull_request(lab: Lab) -> None:
    git("checkout", "--quiet", "-b", "feature", cwd=lab.origin.work)
    head = _push_branch(lab.origin, {"policies/cilium.yaml": SEED / "policies.yaml"}, "zone isolation")
    assert (
        deliver(lab.base, "pull_request", pull_request_event("opened", 12, head, lab.main_sha, lab.clock()))[
            0
        ]
        == 202
    )
    first = _wait_completed(lab.hub, head)
    # A failing check with findings offers the button.
    assert first["conclusion"] == "failure" and first["actions"] == [
        {"label": "Open fix PR", "description": "A pull request with the fix", "identifier": "open-fix-pr"}
    ]

    # "Re-run": a check run of its own for the commit, once per request (a replayed body under a
    # new delivery id re-runs nothing).
    rerun = check_run_event("rerequested", first, number=12, base=lab.main_sha)
    status, body = deliver(lab.base, "check_run", rerun)
    assert status == 202 and body["queued"] == [f"rerun:acme/infra:{head}:run-{first['id']}"]
    runs = _wait_runs(lab.hub, head, 2)
    second = runs[1]
    assert (
        second["name"] == "placement-audit"
        and second["external_id"] == f"placement-audit:{head}:run-{first['id']}"
    )
    assert second["conclusion"] == "failure" and len(second["annotations"]) == 1
    assert deliver(lab.base, "check_run", rerun)[0] == 202  # the same request, another delivery id
    # "Re-run all checks" of a fork's pull request (the payload names none): compared with the
    # default branch, the same verdict.
    suite = check_suite_event(88, head, lab.clock())
    status, body = deliver(lab.base, "check_suite", suite)
    assert status == 202 and body["queued"][0].startswith(f"rerun:acme/infra:{head}:suite-88-")
    runs = _wait_runs(lab.hub, head, 3)
    assert runs[2]["conclusion"] == "failure" and len(runs[2]["annotations"]) == 1
    # Another App's check run, and an action that is not ours: acknowledged, nothing queued.
    foreign = check_run_event("rerequested", {**first, "name": "lint"}, number=12, base=lab.main_sha)
    status, body = deliver(lab.base, "check_run", foreign)
    assert status == 202 and body["queued"] == []

    # The button, pressed twice: one fix pull request onto the pull request's branch.
    press = check_run_event(
        "requested_action", second, number=12, base=lab.main_sha, identifier="open-fix-pr"
    )
    status, body = deliver(lab.base, "check_run", press)
    assert status == 202 and body["queued"] == [f"fix:acme/infra:run-{second['id']}"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not lab.hub.pulls:
        time.sleep(0.1)
    assert deliver(lab.base, "check_run", press)[0] == 202
    other = check_run_event("requested_action", second, number=12, base=lab.main_sha, identifier="something")
    assert deliver(lab.base, "check_run", other)[1]["queued"] == []
    lab.service.scheduler.scheduler.shutdown(wait=True)  # every queued job done
    [pr] = lab.hub.pulls
    assert pr["base"] == "feature" and pr["head"].startswith("placement-auditor/")
    fixed = git("show", f"{pr['head']}:training/workload.yaml", cwd=lab.origin.bare)
    assert "nodeAffinity:" in fixed
    # Three check runs on the commit, each reported once: the replayed re-run made none.
    runs = [r for r in lab.hub.check_runs if r["head_sha"] == head]
    assert len(runs) == 3 and all(len(r["annotations"]) == 1 for r in runs)


class _Recording:
    def __init__(self) -> None:
        self.tasks: list[AuditTask] = []

    def audit(self, task: AuditTask) -> None:
        self.tasks.append(task)


def test_sweep_slots_are_spread_and_stable() -> None:
    period = 24 * 3600
    now = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)
    names = [f"org{i % 50}/repo-{i}" for i in range(1000)]
    slots = {n: sweep_slot(n, now, period) for n in names}
    assert all(now - timedelta(seconds=period) < s <= now for s in slots.values())
    assert slots == {n: sweep_slot(n, now, period) for n in names}  # the same in every process
    per_hour = Counter(int((s - (now - timedelta(days=1))).total_seconds() // 3600) for s in slots.values())
    assert len(per_hour) == 24 and max(per_hour.values()) < 2 * 1000 / 24  # no herd at midnight
    later = now + timedelta(seconds=period)
    assert all(sweep_slot(n, later, period) == slots[n] + timedelta(seconds=period) for n in names[:50])


def test_installed_repositories_are_swept_on_schedule_and_unchanged_ones_cost_one_request(lab: Lab) -> None:
    service, clock = lab.service, lab.clock
    settings = replace(
        service.runner.settings,
        service=replace(
            service.runner.settings.service,
            github_app=replace(service.runner.settings.service.github_app, audit_every_hours=1),
        ),
    )
    dispatch = _Recording()
    leader = type("Always", (), {"is_leader": lambda self: True})()
    scheduler = FleetScheduler(settings, service.runner, clock, leader, dispatch)
    ctx = WorkerContext(settings, service.runner, lab.fleet)
    # Added through the installation event: swept from its first slot on, without a restart.
    run_installation(ctx, InstallationEvent(7, "added", ("acme/infra",), ()))
    slot = sweep_slot("acme/infra", clock(), 3600)
    clock.now = slot + timedelta(seconds=5)
    assert scheduler.sweep_app_repositories() == [f"sweep:acme/infra:{slot_text(slot)}"]
    [task] = dispatch.tasks
    assert (task.task_key, task.trigger, task.repository) == (
        f"sweep:acme/infra:{slot_text(slot)}",
        "sweep",
        "acme/infra",
    )
    assert scheduler.sweep_app_repositories() == []  # once per slot
    assert run_audit(ctx, task) == "succeeded"
    state = lab.fleet.branch_state("acme/infra")
    assert state is not None and state.audited_sha == lab.main_sha and state.etag
    runs = service.store.runs("acme.infra", 10).items
    assert [r.trigger for r in runs] == ["sweep"]
    # The next slot, the branch unchanged: one conditional request (304), no clone, no run.
    clock.now = slot + timedelta(hours=1, seconds=5)
    assert len(scheduler.sweep_app_repositories()) == 1
    task = dispatch.tasks[-1]
    before = lab.hub.branch_requests
    assert run_audit(ctx, task) == "unchanged"
    assert lab.hub.branch_requests == before + 1
    assert len(service.store.runs("acme.infra", 10).items) == 1
    # A push to main: the next slot audits the new head.
    git("checkout", "--quiet", "main", cwd=lab.origin.work)
    pushed = lab.origin.commit({"training/workload.yaml": SEED / "after" / "workload.yaml"}, "pin zone")
    clock.now = slot + timedelta(hours=2, seconds=5)
    assert len(scheduler.sweep_app_repositories()) == 1
    task = dispatch.tasks[-1]
    assert run_audit(ctx, task) == "succeeded"
    assert lab.fleet.branch_state("acme/infra").audited_sha == pushed  # type: ignore[union-attr]
    findings = service.store.findings(FindingFilter(target="acme.infra"), 10).items
    assert [f.status for f in findings] == ["resolved"]
    # Removed from the installation: no longer swept, its target retired, its findings kept.
    run_installation(ctx, InstallationEvent(7, "removed", (), ("acme/infra",)))
    clock.now = slot + timedelta(hours=3, seconds=5)
    assert scheduler.sweep_app_repositories() == []
    [target] = [t for t in service.store.targets() if t.name == "acme.infra"]
    assert target.retired_at is not None
    assert len(service.store.findings(FindingFilter(target="acme.infra"), 10).items) == 1
    # A sweep task queued before the removal does nothing.
    assert (
        run_audit(ctx, AuditTask("", "sweep:acme/infra:late", None, "sweep", "acme/infra", 7)) == "unchanged"
    )
    # Added again: swept again, no longer retired.
    run_installation(ctx, InstallationEvent(7, "added", ("acme/infra",), ()))
    assert [t.retired_at for t in service.store.targets() if t.name == "acme.infra"] == [None]


def test_the_reconcile_finds_repositories_whose_events_never_came(lab: Lab) -> None:
    service, clock = lab.service, lab.clock
    ctx = WorkerContext(service.runner.settings, service.runner, lab.fleet)
    # acme/gone was removed while the service was away; acme/infra was added while it was away.
    lab.fleet.set_app_repositories(7, ["acme/gone"], [])
    service.store.sync_targets([TargetSpec("acme.gone", "git", "x")])
    assert run_reconcile(ctx) == (["acme/infra"], ["acme/gone"])
    assert lab.fleet.app_repositories() == {"acme/infra": 7}
    retired = {t.name: t.retired_at for t in service.store.targets()}
    assert retired["acme.gone"] is not None
    assert run_reconcile(ctx) == ([], [])  # nothing missed now
    # Uninstalled from the repository: the next reconcile removes it.
    lab.hub.installed = False
    assert run_reconcile(ctx) == ([], ["acme/infra"]) and lab.fleet.app_repositories() == {}
    # The leader enqueues it once per slot of github_app.reconcile_schedule (17 */6 * * *).
    dispatch = _Recording()
    calls: list[str] = []
    dispatch.reconcile = lambda: calls.append("reconcile")  # type: ignore[attr-defined]
    leader = type("Always", (), {"is_leader": lambda self: True})()
    scheduler = FleetScheduler(service.runner.settings, service.runner, clock, leader, dispatch)
    clock.now = clock.now.replace(hour=12, minute=17, second=30)
    assert scheduler.reconcile_app_repositories() is not None and calls == ["reconcile"]
    assert scheduler.reconcile_app_repositories() is None and calls == ["reconcile"]
