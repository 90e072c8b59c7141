"""The GitHub App: authentication, pull-request audits and their Check Runs.

Authentication is PyGithub's: `Auth.AppAuth` signs a JWT with the App's private key;
`GithubIntegration.get_github_for_installation` returns a client on `Auth.AppInstallationAuth`,
which fetches an installation token (POST /app/installations/{id}/access_tokens) and fetches a new
one when the current one is within 20 s of its `expires_at` (the library reads the wall clock for
that; tests check the refresh with tokens the local server issues already expired).

A pull-request audit (`audit_pull_request`) fetches the base and head commits, audits both the way
a stored run audits a target, and publishes one Check Run on the head SHA:
- annotations for the findings the head has and the base has not (file and line of the
  workload, the rule and severity as title, the message and the deciding policies), at most 50
  per API call (GitHub's limit): the first batch with the create/update, the rest appended by
  further updates;
- a summary with the introduced and the resolved findings and the map of each affected group
  (its roles' feasible zones, and which zone pairs each edge is allowed or denied in);
- the conclusion by the exit-code contract, applied to the introduced findings as
  `scan --baseline` applies it: `success` (0: none at or above `fail_on`), `failure` (1), and
  `failure` titled "audit incomplete" when an audit failed or was partial (3: never green).
The check run's id is kept per (repository, head SHA, kind) in the store, with how many
annotations it already has: a task redelivered after its worker died mid-report updates the same
check run and sends only the annotations still missing; when the id itself was lost (the worker died
between GitHub's answer and the store's commit), the check run is found again by its `external_id`
on the commit. A commit whose check run is completed is not reported again (a replay, or
`reopened` with an unchanged head): GitHub appends annotations on every update and cannot remove
them, so a second report would repeat each one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from auditor.audit.scan import ScanResult
from auditor.gitops import git
from auditor.model.findings import SEVERITY_RANK, Finding
from auditor.rules.groups import Group
from auditor.service.webhooks import PullRequestEvent
from auditor.settings.config import Settings
from auditor.settings.service import GitHubAppSettings, GitHubSettings, GitSource, TargetSettings
from auditor.store import database
from auditor.store.fleet import FleetStore

log = logging.getLogger("auditor.githubapp")

MAX_ANNOTATIONS_PER_CALL = 50  # GitHub: "maximum of 50 annotations per API request"
MAX_SUMMARY = 65535  # GitHub: output.summary is at most 65535 characters
LEVEL = {"critical": "failure", "high": "failure", "medium": "warning", "low": "notice"}


def app_auth(app: GitHubAppSettings) -> Any:
    from github import Auth

    key = Path(app.private_key_file).read_text(encoding="utf-8")
    return Auth.AppAuth(app.app_id, key)


def integration(app: GitHubAppSettings) -> Any:
    from github import GithubIntegration

    pace = app.seconds_between_writes
    return GithubIntegration(
        auth=app_auth(app),
        base_url=app.base_url,
        timeout=30,
        seconds_between_requests=min(0.25, pace),
        seconds_between_writes=pace,
    )


def installation_client(app: GitHubAppSettings, installation_id: int) -> Any:
    """A PyGithub client acting as the installation (token fetched and refreshed by the library)."""
    return integration(app).get_github_for_installation(installation_id)


def installation_token(app: GitHubAppSettings, installation_id: int) -> str:
    """A fresh installation token (for git over HTTPS: user x-access-token)."""
    return str(integration(app).get_access_token(installation_id).token)


def installed_repositories(app: GitHubAppSettings) -> dict[str, int]:
    """Every repository the App can see now, by installation: `GET /app/installations` (the App's
    JWT), then each installation's `GET /installation/repositories` (its token), page by page."""
    out: dict[str, int] = {}
    for installation in integration(app).get_installations():
        requester = installation_client(app, installation.id).requester
        page = 1
        while True:
            _, data = requester.requestJsonAndCheck(
                "GET", "/installation/repositories", parameters={"per_page": 100, "page": page}
            )
            repos = data.get("repositories") or []
            out.update({str(r["full_name"]): int(installation.id) for r in repos})
            if len(repos) < 100 or page * 100 >= int(data.get("total_count") or 0):
                break
            page += 1
    return out


def target_name(full_name: str) -> str:
    """The target name of an App repository: owner/name → owner.name (a valid target name)."""
    return full_name.replace("/", ".")[:100]


def app_target(app: GitHubAppSettings, full_name: str, installation_id: int) -> TargetSettings:
    """The audit target of a repository the App is installed on (no config entry needed)."""
    return TargetSettings(
        name=target_name(full_name),
        git=GitSource(app.clone_url.format(full_name=full_name)),
        paths=app.paths,
        nodes=app.nodes,
        github=GitHubSettings(
            full_name,
            base_url=app.base_url,
            app_id=app.app_id,
            installation_id=installation_id,
            private_key_file=app.private_key_file,
        ),
    )


def target_for(settings: Settings, full_name: str, installation_id: int) -> TargetSettings:
    """The configured target whose `github.repository` is this repository, else the App's."""
    for t in settings.targets:
        if t.github is not None and t.git is not None and t.github.repository == full_name:
            return t
    assert settings.service.github_app is not None
    return app_target(settings.service.github_app, full_name, installation_id)


@dataclass(frozen=True, slots=True)
class BranchHead:
    """A conditional GET of a repository's default branch: unchanged (304: nothing else was
    sent), or its head SHA now, with the ETag to send next time."""

    branch: str
    unchanged: bool
    sha: str | None
    etag: str | None


def branch_head(client: Any, full_name: str, branch: str | None, etag: str | None) -> BranchHead:
    """`GET /repos/{full_name}/branches/{branch}` with `If-None-Match` (PyGithub's requester: the
    endpoint's ETag is what GitHub documents for conditional requests; a 304 does not count
    against the primary rate limit). The default branch is asked for only when not known yet, or
    when the known one is gone (renamed): one request for an unchanged branch."""
    requester = client.requester
    if branch:
        known = _branch(requester, full_name, branch, etag, missing_ok=True)
        if known is not None:
            return known
    _, repo = requester.requestJsonAndCheck("GET", f"/repos/{full_name}")
    found = _branch(requester, full_name, str(repo["default_branch"]), None, missing_ok=False)
    assert found is not None
    return found


def _branch(
    requester: Any, full_name: str, branch: str, etag: str | None, missing_ok: bool
) -> BranchHead | None:
    """One conditional GET of a branch; None for a 404 when `missing_ok`, else GitHub's error."""
    from urllib.parse import quote

    headers = {"If-None-Match": etag} if etag else {}
    status, answer_headers, body = requester.requestJson(
        "GET", f"/repos/{full_name}/branches/{quote(branch, safe='')}", headers=headers
    )
    if status == 304:
        return BranchHead(branch, True, None, etag)
    if status == 404 and missing_ok:
        return None
    if status >= 400:
        raise requester.createException(status, answer_headers, json.loads(body or "{}"))
    sha = str(json.loads(body)["commit"]["sha"])
    tag = next((v for k, v in answer_headers.items() if k.lower() == "etag"), None)
    return BranchHead(branch, False, sha, tag)


# -- the check run's content (pure) ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckOutput:
    conclusion: str
    title: str
    summary: str
    annotations: tuple[dict[str, Any], ...]


def annotation(f: Finding, root: Path | None) -> dict[str, Any]:
    policies = ", ".join(f"{p.kind} {p.namespace}/{p.name}".replace(" /", " ") for p in f.policies)
    message = f.message + (f"\nDeciding policies: {policies}" if policies else "")
    line = max(1, f.workload.line)
    return {
        "path": git.relative_to(f.workload.file, root) if root is not None else f.workload.file,
        "start_line": line,
        "end_line": line,
        "annotation_level": LEVEL.get(f.severity, "warning"),
        "title": f"{f.rule} ({f.severity}, {f.certainty})"[:255],
        "message": message[:64000],
    }


def _group_map(group: Group) -> list[str]:
    w = group.workload
    out = [f"**{w.kind} {w.namespace}/{w.name}** ({group.recognised_as})", ""]
    for r in group.roles:
        zones = ", ".join(r.feasible_zones) or "no node"
        out.append(f"- role `{r.name}` ×{r.replicas}: zones {zones}")
    for e in group.edges:
        allowed = ", ".join(f"{a}→{b}" for a, b in e.allowed) or "none"
        denied = ", ".join(f"{a}→{b}" for a, b in e.denied) or "none"
        out.append(
            f"- `{e.source}` → `{e.destination}` {e.ports}/{e.protocol}: allowed {allowed}; denied {denied}"
        )
    return out


def check_output(
    base: ScanResult, head: ScanResult, fail_on: str, head_root: Path | None = None
) -> CheckOutput:
    before = {f.fingerprint for f in base.findings}
    after = {f.fingerprint for f in head.findings}
    introduced = sorted(f for f in head.findings if f.fingerprint not in before)
    resolved = sorted(f for f in base.findings if f.fingerprint not in after)
    incomplete = bool(head.errors or head.not_audited or base.not_audited)
    limit = SEVERITY_RANK.get(fail_on, -1)
    blocking = [f for f in introduced if fail_on != "none" and SEVERITY_RANK.get(f.severity, 99) <= limit]
    if incomplete:
        conclusion, title = "failure", "Placement audit incomplete (exit 3)"
    elif blocking:
        conclusion, title = "failure", f"{len(blocking)} introduced finding(s) at or above {fail_on}"
    else:
        conclusion, title = "success", "No introduced finding at or above " + fail_on
    lines = [f"Introduced: {len(introduced)}, resolved: {len(resolved)}, fail on: {fail_on}.", ""]
    if introduced:
        lines += ["### Introduced", ""]
        lines += [
            f"- `{f.rule}` {f.severity} {f.workload.namespace}/{f.workload.name}: {f.message}"
            for f in introduced
        ]
        lines.append("")
    if resolved:
        lines += ["### Resolved", ""]
        lines += [f"- `{f.rule}` {f.severity} {f.workload.namespace}/{f.workload.name}" for f in resolved]
        lines.append("")
    if incomplete:
        problems = [str(e.to_json()) for e in head.errors[:10]] + [str(n) for n in head.not_audited[:10]]
        lines += ["### Not audited", "", *[f"- {p}" for p in problems], ""]
    affected = {f.workload.identity for f in (*introduced, *resolved)}
    groups = [g for g in (head.groups.groups if head.groups else ()) if g.workload.identity in affected]
    if groups:
        lines += ["### Map of the affected groups", ""]
        for g in groups:
            lines += [*_group_map(g), ""]
    summary = "\n".join(lines)
    if len(summary) > MAX_SUMMARY:
        summary = summary[: MAX_SUMMARY - 20] + "\n… (truncated)"
    return CheckOutput(conclusion, title, summary, tuple(annotation(f, head_root) for f in introduced))


def batches(
    items: Sequence[dict[str, Any]], size: int = MAX_ANNOTATIONS_PER_CALL
) -> list[list[dict[str, Any]]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)] or [[]]


# -- publishing -------------------------------------------------------------------------------------


# The button a failing check run offers (GitHub's limits: label 20, description 40, identifier 20).
FIX_ACTION = {
    "label": "Open fix PR",
    "description": "A pull request with the fix",
    "identifier": "open-fix-pr",
}


class CheckRuns:
    """Creates (once) and updates the check run of (repository, head SHA, kind); a re-run
    (`attempt`: what was re-requested) is a check run of its own, recorded apart."""

    def __init__(
        self, fleet: FleetStore, client: Any, kind: str, attempt: str = "", button: bool = False
    ) -> None:
        self.fleet, self.client, self.name = fleet, client, kind
        self.attempt, self.button = attempt, button
        self.kind = f"{kind}#{attempt}"[:60] if attempt else kind  # the store's key

    def external_id(self, head_sha: str) -> str:
        return f"{self.name}:{head_sha}" + (f":{self.attempt}" if self.attempt else "")

    def start(self, repository: str, head_sha: str, task_key: str) -> tuple[Any, int] | None:
        """The check run to report on and how many annotations it already has; None when this
        commit's check run is completed (a redelivery or a second event for the same head SHA:
        the audit of one commit is reported once — GitHub appends annotations on every update and
        cannot remove them, so a re-report would repeat each one)."""
        record = self.fleet.check_run(repository, head_sha, self.kind)
        if record is not None and record.status == "completed":
            return None
        repo = self.client.withLazy(True).get_repo(repository)  # no GET: the calls below name it
        run = None
        sent = 0
        if record is not None and record.check_run_id is not None:
            run = repo.get_check_run(record.check_run_id)
            sent = record.annotations_sent
        else:
            # The id may have been lost between GitHub's answer and the store's commit.
            for found in repo.get_commit(head_sha).get_check_runs(check_name=self.name):
                if found.external_id == self.external_id(head_sha):
                    run = found
                    sent = int(found.output.annotations_count or 0)
                    break
        if run is None:
            run = repo.create_check_run(
                name=self.name,
                head_sha=head_sha,
                status="in_progress",
                external_id=self.external_id(head_sha),
            )
        elif run.status == "completed":
            self._record(repository, head_sha, run, status="completed", conclusion=run.conclusion)
            return None
        self._record(
            repository, head_sha, run, status="in_progress", task_key=task_key, annotations_sent=sent
        )
        return run, sent

    def _record(self, repository: str, head_sha: str, run: Any, **values: Any) -> None:
        self.fleet.record_check_run(repository, head_sha, self.kind, check_run_id=run.id, **values)

    def finish(self, repository: str, head_sha: str, run: Any, output: CheckOutput, sent: int = 0) -> None:
        """Send the annotations not sent yet (batches of 50, progress recorded after each), then
        the conclusion with the last batch."""
        parts = batches(output.annotations[sent:])
        base = {"title": output.title, "summary": output.summary}
        for part in parts[:-1]:
            run.edit(output={**base, "annotations": part})
            sent += len(part)
            self._record(repository, head_sha, run, status="in_progress", annotations_sent=sent)
        # A failing check with findings offers the "Open fix PR" button (webhooks: requested_action).
        offer = self.button and output.conclusion == "failure" and bool(output.annotations)
        run.edit(
            status="completed",
            conclusion=output.conclusion,
            output={**base, "annotations": parts[-1]},
            **({"actions": [FIX_ACTION]} if offer else {}),
        )
        done = sent + len(parts[-1])
        self._record(
            repository, head_sha, run, status="completed", conclusion=output.conclusion, annotations_sent=done
        )


def with_target(settings: Settings, target: TargetSettings) -> Settings:
    """`settings` with `target` among its targets (App repositories are not in the config)."""
    if any(t.name == target.name for t in settings.targets):
        return settings
    return replace(settings, targets=(*settings.targets, target))


def fetch_commit(
    settings: Settings,
    target: TargetSettings,
    sha: str,
    token: str,
    environ: dict[str, str],
    client: Any = None,
    repository: str = "",
) -> Path:
    """Check out one commit of the target's repository (the cache work tree); with no `sha`, the
    head of the target's branch (else the repository's default branch, which `client` tells)."""
    assert target.git is not None
    credentials = git.Credentials(target.git.username, token) if token else None
    service = settings.service
    ref = sha or target.git.branch or client.get_repo(repository).default_branch
    checkout = git.fetch(
        target.git.url, ref, Path(service.git_cache_dir), credentials, service.git_timeout_seconds, environ
    )
    if sha and checkout.commit != sha:
        raise git.GitError(f"fetched {checkout.commit}, not {sha}")
    return checkout.path


def audit_pull_request(
    settings: Settings,
    runner: Any,  # AuditRunner (its audit of a tree is the one a stored run does)
    fleet: FleetStore,
    event: PullRequestEvent,
    task_key: str,
    client: Any | None = None,
    token: str | None = None,
    attempt: str = "",
) -> CheckOutput:
    """The check run of a pull request's head against its base (`attempt`: a re-run's, on a check
    run of its own; a re-run whose payload named no pull request compares with the default branch)."""
    app = settings.service.github_app
    assert app is not None
    target = target_for(settings, event.repository, event.installation_id)
    client = client or installation_client(app, event.installation_id)
    if token is None:
        token = (
            installation_token(app, event.installation_id)
            if target.git and target.git.url.startswith("http")
            else ""
        )
    checks = CheckRuns(fleet, client, app.check_name, attempt, app.fix_button)
    started = checks.start(event.repository, event.head_sha, task_key)
    if started is None:
        log.info("%s %s: its check run is complete; nothing to do", event.repository, event.head_sha)
        record = fleet.check_run(event.repository, event.head_sha, app.check_name)
        return CheckOutput(record.conclusion if record and record.conclusion else "success", "", "", ())
    run, sent = started
    assert target.git is not None
    from auditor import gcpause

    try:
        with git.checkout_lock(Path(settings.service.git_cache_dir), target.git.url):
            if event.base_sha:
                root = fetch_commit(settings, target, event.base_sha, token, runner.environ)
            else:
                root = fetch_commit(settings, target, "", token, runner.environ, client, event.repository)
            with gcpause.paused():
                base = runner._analyse(target, root).result
            root = fetch_commit(settings, target, event.head_sha, token, runner.environ)
            with gcpause.paused():
                head = runner._analyse(target, root).result
            output = check_output(base, head, app.fail_on, root)
    except Exception as exc:
        if runner.raise_transient and database.is_transient(exc):
            raise  # the database away: the task waits and tries again (tasks.patiently)
        log.error("pull request %s#%s: %s: %s", event.repository, event.number, type(exc).__name__, exc)
        output = CheckOutput(
            "failure",
            "Placement audit failed (exit 3)",
            f"The audit could not run: {type(exc).__name__}: {exc}"[:2000],
            (),
        )
    checks.finish(event.repository, event.head_sha, run, output, sent)
    return output
