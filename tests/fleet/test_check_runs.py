"""Check runs against the local GitHub through PyGithub with App authentication: more than 50
annotations go in batches (the server refuses 51 in one request, as GitHub does) and a report cut
off after a batch resumes with the missing ones only; a completed commit is not reported twice; a
check run whose id the store lost is found again by its external_id, never created twice;
installation tokens that expire are refreshed by the library."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from pathlib import Path

from dbsupport import Clock, engine_for
from fakegithub import FakeGitHub, serve
from fleetsupport import APP_ID, app_key
from gitsupport import Origin
from sqlalchemy import delete

from auditor.service import githubapp
from auditor.service.githubapp import CheckOutput, CheckRuns
from auditor.settings.service import GitHubAppSettings
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


def test_annotations_batched_resumed_once_and_lost_ids_found_again(tmp_path: Path) -> None:
    key, public = app_key(tmp_path)
    origin = Origin(tmp_path)
    sha = origin.commit({"a.yaml": "a: 1\n"})
    hub = FakeGitHub(origin.bare, app_id=APP_ID, tokens=set(), app_public_key=public, installation_ids=(7,))
    with serve(hub) as base, engine_for("sqlite", tmp_path) as engine:
        app = GitHubAppSettings(APP_ID, str(key), base_url=base, seconds_between_writes=0)
        fleet = FleetStore(engine, Clock())
        checks = CheckRuns(fleet, githubapp.installation_client(app, 7), "placement-audit")
        output = CheckOutput("failure", "120 findings", "summary", tuple(_annotation(i) for i in range(120)))
        started = checks.start("acme/infra", sha, "check:1")
        assert started is not None and started[1] == 0
        run, _ = started
        # The worker "dies" after the first batch of 50 went out: its second update never leaves.
        original_edit = run.edit
        calls = {"n": 0}

        def edit_then_fail(**kwargs: object) -> None:
            calls["n"] += 1
            if calls["n"] == 2:
                raise RuntimeError("worker lost")
            original_edit(**kwargs)

        run.edit = edit_then_fail
        with contextlib.suppress(RuntimeError):
            checks.finish("acme/infra", sha, run, output)
        [stored] = hub.check_runs
        assert len(stored["annotations"]) == 50 and stored["status"] == "in_progress"
        assert fleet.check_run("acme/infra", sha, "placement-audit").annotations_sent == 50
        # The redelivered task: the same check run, only the 70 missing annotations.
        again = checks.start("acme/infra", sha, "check:1")
        assert again is not None and again[0].id == stored["id"] and again[1] == 50
        checks.finish("acme/infra", sha, again[0], output, again[1])
        assert len(hub.check_runs) == 1
        assert [a["title"] for a in stored["annotations"]] == [f"cross-zone-blocked #{i}" for i in range(120)]
        assert stored["output_updates"] == 3 and stored["conclusion"] == "failure"  # 50, then 50 + 20
        # Done: a further task for this commit does nothing.
        assert checks.start("acme/infra", sha, "check:1") is None
        # 51 in one request is refused, as GitHub does (the batching above is what made it pass).
        try:
            again[0].edit(
                output={"title": "t", "summary": "s", "annotations": [_annotation(i) for i in range(51)]}
            )
        except Exception as exc:  # github.GithubException
            assert getattr(exc, "status", None) == 422
        else:
            raise AssertionError("51 annotations were accepted")
        # Another commit whose check run id the store lost (a worker died between GitHub's answer
        # and the commit): found again by its external_id, with its annotation count.
        sha2 = origin.commit({"b.yaml": "b: 1\n"})
        started2 = checks.start("acme/infra", sha2, "check:2")
        assert started2 is not None
        checks.finish("acme/infra", sha2, started2[0], CheckOutput("failure", "t", "s", (_annotation(0),)))
        with fleet.sessions.begin() as session:
            session.execute(delete(CheckRunRow).where(CheckRunRow.head_sha == sha2))
        assert checks.start("acme/infra", sha2, "check:3") is None  # completed on GitHub: nothing to do
        assert len(hub.check_runs) == 2
        assert fleet.check_run("acme/infra", sha2, "placement-audit").check_run_id == started2[0].id


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
