"""Check runs against the local GitHub through PyGithub with App authentication: more than 50
annotations go in batches (the server refuses 51 in one request, as GitHub does); a check run whose
id the store lost is found again by its external_id, never created twice; installation tokens that
expire are refreshed by the library."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from dbsupport import Clock, engine_for
from fakegithub import FakeGitHub, serve
from fleetsupport import APP_ID, app_key
from gitsupport import Origin
from sqlalchemy import delete

from auditor.service import githubapp
from auditor.service.githubapp import CheckOutput, CheckRuns
from auditor.service_config import GitHubAppSettings
from auditor.store.fleet import FleetStore
from auditor.store.schema import CheckRunRow


def _annotation(i: int) -> dict[str, object]:
    return {
        "path": "training/workload.yaml",
        "start_line": i + 1,
        "end_line": i + 1,
        "annotation_level": "failure",
        "title": f"cross-zone-blocked #{i}",
        "message": "blocked",
    }


def test_annotations_batched_and_lost_ids_found_again(tmp_path: Path) -> None:
    key, public = app_key(tmp_path)
    origin = Origin(tmp_path)
    sha = origin.commit({"a.yaml": "a: 1\n"})
    hub = FakeGitHub(origin.bare, app_id=APP_ID, tokens=set(), app_public_key=public, installation_ids=(7,))
    with serve(hub) as base, engine_for("sqlite", tmp_path) as engine:
        app = GitHubAppSettings(APP_ID, str(key), base_url=base)
        fleet = FleetStore(engine, Clock())
        checks = CheckRuns(fleet, githubapp.installation_client(app, 7), "placement-audit")
        run = checks.start("acme/infra", sha, "check:1")
        output = CheckOutput("failure", "120 findings", "summary", tuple(_annotation(i) for i in range(120)))
        checks.finish("acme/infra", sha, run, output)
        [stored] = hub.check_runs
        assert len(stored["annotations"]) == 120 and stored["output_updates"] == 3  # 50 + 50 + 20
        assert stored["status"] == "completed" and stored["conclusion"] == "failure"
        # 51 in one request is refused, as GitHub does (the batching above is what made it pass).
        try:
            run.edit(
                output={"title": "t", "summary": "s", "annotations": [_annotation(i) for i in range(51)]}
            )
        except Exception as exc:  # github.GithubException
            assert getattr(exc, "status", None) == 422
        else:
            raise AssertionError("51 annotations were accepted")
        # The store lost the id (a worker died between GitHub's answer and the commit): the check
        # run is found by its external_id on the commit and updated, not created again.
        with fleet.sessions.begin() as session:
            session.execute(delete(CheckRunRow))
        again = checks.start("acme/infra", sha, "check:2")
        assert again.id == stored["id"] and len(hub.check_runs) == 1
        checks.finish("acme/infra", sha, again, CheckOutput("success", "ok", "fine", ()))
        assert hub.check_runs[0]["conclusion"] == "success"
        assert fleet.check_run("acme/infra", sha, "placement-audit").check_run_id == stored["id"]


def test_expiring_installation_tokens_are_refreshed_by_the_library(tmp_path: Path) -> None:
    """PyGithub reads the wall clock for token expiry (20 s before `expires_at`), so the clock of
    this process — the library's and the local server's alike — is moved with time-machine."""
    import time_machine

    key, public = app_key(tmp_path)
    origin = Origin(tmp_path)
    sha = origin.commit({"a.yaml": "a: 1\n"})
    hub = FakeGitHub(origin.bare, app_id=APP_ID, tokens=set(), app_public_key=public, installation_ids=(7,))
    with (
        serve(hub) as base,
        time_machine.travel(datetime(2026, 12, 1, 6, 0, tzinfo=UTC), tick=False) as clock,
    ):
        app = GitHubAppSettings(APP_ID, str(key), base_url=base)
        client = githubapp.installation_client(app, 7)
        for _ in range(3):
            assert client.get_repo("acme/infra").get_commit(sha).sha == sha
        assert len(hub.issued) == 1  # one token (an hour long) serves every request
        first, expires = hub.issued[0]
        clock.shift(3600 - 30)  # 30 s before expiry: still used
        client.get_repo("acme/infra")
        assert len(hub.issued) == 1
        clock.shift(15)  # 15 s before expiry: inside the library's 20 s margin, so refreshed
        client.get_repo("acme/infra")
        assert len(hub.issued) == 2 and hub.issued[1][0] != first
        clock.shift(60)  # the first token has expired: the server refuses it, as GitHub does
        from github import Auth, Github

        stale = Github(base_url=base, auth=Auth.Token(first))
        try:
            stale.get_repo("acme/infra")
        except Exception as exc:
            assert getattr(exc, "status", None) == 401
        else:
            raise AssertionError(f"a token expired at {expires} was accepted")
        assert client.get_repo("acme/infra").get_commit(sha).sha == sha  # the refreshed one works
        # A JWT signed by another key is refused (401), so no token is issued.
        (tmp_path / "other").mkdir()
        other, _ = app_key(tmp_path / "other")
        bad = githubapp.installation_client(GitHubAppSettings(APP_ID, str(other), base_url=base), 7)
        try:
            bad.get_repo("acme/infra")
        except Exception as exc:
            assert getattr(exc, "status", None) == 401
        else:
            raise AssertionError("a JWT of another key was accepted")
        assert len(hub.issued) == 2
