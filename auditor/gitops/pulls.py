"""Fix pull requests: one per workload, on a deterministic branch, proposed once.

For a git target with a `github` section: fetch the branch, compute the verified fixes
(remediation/fix.py) per workload, commit each on `placement-auditor/<kind>-<namespace>-<name>`
with real git, push to the target's remote, and open or update the pull request with PyGithub.

- The existing PR is found by its head branch and updated only when the fix changed (its body
  carries the fix's id).
- A PR a human closed unmerged is never reopened for the same fix (recorded in the store).
- A branch with someone else's commits is never force-pushed; the push itself uses
  `--force-with-lease` on the sha just read, so a commit pushed meanwhile is not lost either.
- Limits: open fix PRs in the repository, new PRs per hour. GitHub's rate limits (403/429 with
  Retry-After or a rate-limit message) and 5xx answers are retried by PyGithub's GithubRetry,
  sleeping (an injected sleep) at most `max_rate_limit_wait_seconds`: a reset further away (the
  injected clock decides) raises `PullRequestsDeferred`, and the step runs again in a later job.
- Token or GitHub App (installation token) authentication; GitHub Enterprise through `base_url`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from auditor import templating
from auditor.config import Settings
from auditor.gitops import git
from auditor.model.findings import Finding
from auditor.remediation.fix import Proposal, propose
from auditor.rules.packs import load_packs
from auditor.service_config import GitHubSettings, TargetSettings
from auditor.sources.manifests import Tools
from auditor.store.repository import Store

log = logging.getLogger("auditor.pulls")
MARKER = re.compile(r"<!-- placement-auditor fix: ([0-9a-f]{16}) -->")


@dataclass(frozen=True, slots=True)
class PullOutcome:
    workload: str
    branch: str
    action: str  # opened | updated | up-to-date | skipped | no-fix
    detail: str = ""
    number: int | None = None


class PullRequestsDeferred(Exception):
    """A temporary failure with a delay: GitHub's rate limit resets at `until`, later than the
    run may wait; the PR step is retried by a later job."""

    def __init__(self, until: datetime, reason: str) -> None:
        super().__init__(f"deferred until {until.isoformat()}: {reason}")
        self.until = until
        self.reason = reason


def bounded_retry(max_wait: float, clock: Callable[[], datetime], sleep: Callable[[float], None]) -> Any:
    """PyGithub's GithubRetry, waiting at most `max_wait` seconds (with `sleep`), judging a
    rate-limit reset by `clock`; a longer wait raises PullRequestsDeferred."""
    from github import GithubRetry
    from github.GithubException import RateLimitExceededExceedsMaxWait

    class BoundedRetry(GithubRetry):
        def increment(
            self, method: Any = None, url: Any = None, response: Any = None, *a: Any, **k: Any
        ) -> Any:
            if response is not None and response.status in (403, 429):
                headers = response.headers
                retry_after = str(headers.get("Retry-After", ""))
                reset = str(headers.get("X-RateLimit-Reset", ""))
                now = clock()
                if retry_after.isdigit() and int(retry_after) > max_wait:
                    raise PullRequestsDeferred(
                        now + timedelta(seconds=int(retry_after)),
                        f"GitHub asked to retry after {retry_after} s",
                    )
                if str(headers.get("X-RateLimit-Remaining", "")) == "0" and reset.isdigit():
                    until = datetime.fromtimestamp(int(reset), UTC)
                    if (until - now).total_seconds() > max_wait:
                        raise PullRequestsDeferred(until, "GitHub's rate limit is exhausted until its reset")
            try:
                return super().increment(method, url, response, *a, **k)
            except RateLimitExceededExceedsMaxWait as exc:
                raise PullRequestsDeferred(
                    clock() + timedelta(seconds=float(getattr(exc, "wait", max_wait) or max_wait)),
                    "GitHub's rate limit",
                ) from None

        def sleep(self, response: Any = None) -> None:
            wait = self.get_retry_after(response) if response is not None else None
            if wait is None:
                wait = self.get_backoff_time()
            if wait > max_wait:
                raise PullRequestsDeferred(clock() + timedelta(seconds=wait), f"a retry wait of {wait:g} s")
            if wait > 0:
                sleep(wait)

    return BoundedRetry(
        total=6, backoff_factor=0.5, status_forcelist=[429, *range(500, 600)], max_rate_limit_wait=max_wait
    )


def github_client(
    gh: GitHubSettings,
    environ: Mapping[str, str],
    clock: Callable[[], datetime] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> Any:
    import time

    from github import Auth, Github

    retry = bounded_retry(
        gh.max_rate_limit_wait_seconds, clock or (lambda: datetime.now(UTC)), sleep or time.sleep
    )
    auth: Any
    if gh.app_id:
        key = Path(gh.private_key_file).read_text(encoding="utf-8")
        auth = Auth.AppAuth(gh.app_id, key).get_installation_auth(gh.installation_id)
    else:
        token = gh.token or (environ.get(gh.token_env, "") if gh.token_env else "")
        if not token:
            raise git.GitError(
                f"no GitHub token: set {gh.token_env or 'github.token_env'} for {gh.repository}"
            )
        auth = Auth.Token(token)
    return Github(
        base_url=gh.base_url,
        auth=auth,
        retry=retry,
        timeout=30,
        seconds_between_requests=min(0.25, gh.seconds_between_writes),
        seconds_between_writes=gh.seconds_between_writes,
    )


def branch_for(finding: Finding) -> str:
    w = finding.workload
    slug = re.sub(r"[^a-z0-9.-]+", "-", f"{w.kind}-{w.namespace}-{w.name}".lower()).strip("-.")[:80]
    return f"placement-auditor/{slug}-{hashlib.sha256(w.identity.encode()).hexdigest()[:6]}"


def _mermaid(text: Any) -> str:
    return re.sub(r'["\[\]{}<>|`\n\r]', " ", str(text))[:120]


def render_body(values: Mapping[str, Any]) -> str:
    env = templating.sandbox("pr", autoescape=False)
    env.filters["mermaid"] = _mermaid
    return env.get_template("body.md.j2").render(**values)


def _body(proposals: Sequence[Proposal], fix_id: str) -> tuple[str, str]:
    first = proposals[0]
    f = first.finding
    assert first.plan is not None
    edge = f.edge
    before: dict[str, list[dict[str, str]]] = {}
    edges = []
    if edge is not None:
        for zone in edge.from_zones or ("?",):
            before.setdefault(zone, []).append({"id": "src", "label": edge.from_role})
        for zone in edge.to_zones or ("?",):
            if {"id": "dst", "label": edge.to_role} not in before.get(zone, []):
                before.setdefault(zone, []).append({"id": "dst", "label": edge.to_role})
        verb = "denied" if "blocked" in f.rule else "crosses zones"
        edges.append(
            {
                "source": "src",
                "destination": "dst",
                "blocked": "blocked" in f.rule,
                "label": f"{edge.protocol}/{edge.port or 'ephemeral'} {verb}",
            }
        )
    plain = {
        "cross-zone-blocked": "the pods of this group can land in different zones, and then a network policy "
        "closes the path between them: training hangs with every health check green.",
        "cross-zone-traffic": "the pods of this group can land in different zones: their traffic "
        "crosses zones, slowing training and billed as inter-AZ transfer.",
        "zone-label-mismatch": "a pod label names a zone the pod can never be in, so policies that draw zone "
        "boundaries on it treat the pod as being where it is not.",
    }.get(f.rule, f.message)
    w = f.workload
    title = f"placement-auditor: keep {w.kind} {w.namespace}/{w.name} in {first.plan.zone}"
    body = render_body(
        {
            "workload": f"{f.workload.kind} {f.workload.namespace}/{f.workload.name}",
            "plain": plain,
            "before": before,
            "edges": edges,
            "policies": [p.to_json() for p in f.policies],
            "cost": f.estimated_monthly_cost_usd,
            "change": "; ".join(p.plan.describe() for p in proposals if p.plan is not None),
            "reaudit": first.reaudit,
            "fingerprints": [p.finding.fingerprint for p in proposals],
            "fix_id": fix_id,
        }
    )
    return title[:250], body


def sync_pull_requests(
    target: TargetSettings,
    settings: Settings,
    store: Store,
    environ: Mapping[str, str] | None = None,
    client: Any = None,
    tools: Tools | None = None,
    sleep: Callable[[float], None] | None = None,
) -> list[PullOutcome]:
    """Open or update the fix pull requests of one target; returns what happened per workload.
    Raises PullRequestsDeferred when GitHub's rate limit would hold the step too long."""
    environ = dict(os.environ if environ is None else environ)
    if target.git is None or target.github is None:
        raise git.GitError(f"target {target.name} has no git repository with a github section")
    gh = target.github
    client = client or github_client(gh, environ, store.clock, sleep)
    repo = client.get_repo(gh.repository)
    base_branch = target.git.branch or repo.default_branch
    cache = Path(settings.service.git_cache_dir)
    token = target.git.token or (environ.get(target.git.token_env, "") if target.git.token_env else "")
    credentials = git.Credentials(target.git.username, token) if token else None
    outcomes: list[PullOutcome] = []
    with git.checkout_lock(cache, target.git.url):
        checkout = git.fetch(
            target.git.url, base_branch, cache, credentials, settings.service.git_timeout_seconds, environ
        )
        env = {
            **git.environment(credentials, environ),
            "GIT_AUTHOR_NAME": gh.commit_name,
            "GIT_AUTHOR_EMAIL": gh.commit_email,
            "GIT_COMMITTER_NAME": gh.commit_name,
            "GIT_COMMITTER_EMAIL": gh.commit_email,
        }
        root = checkout.path
        paths = [root / p for p in target.paths] or [root]
        nodes = [root / n for n in target.nodes]
        pack = load_packs([root / p for p in target.policies])
        today = store.clock().date()
        _, everything = propose([*paths, *nodes], settings, pack, today, None, tools)
        by_workload: dict[str, list[Proposal]] = {}
        for p in everything:
            by_workload.setdefault(p.finding.workload.identity, []).append(p)
        for identity, group in sorted(by_workload.items()):
            branch = branch_for(group[0].finding)
            if not any(p.fixed for p in group):
                reasons = "; ".join(sorted({p.reason for p in group if p.reason}))
                outcomes.append(PullOutcome(identity, branch, "no-fix", reasons))
                continue
            # This workload's fix alone (on the fetched tree), so each PR stands on its own.
            fingerprints = {p.finding.fingerprint for p in group}
            git.run(["checkout", "--quiet", "--force", "--detach", checkout.commit], root, env)
            _, own = propose([*paths, *nodes], settings, pack, today, fingerprints, tools)
            own = [p for p in own if p.fixed]
            if not own:
                outcomes.append(PullOutcome(identity, branch, "no-fix", "the fix did not verify on its own"))
                continue
            outcomes.append(
                _one(
                    repo,
                    gh,
                    target.name,
                    store,
                    root,
                    env,
                    checkout.commit,
                    base_branch,
                    branch,
                    identity,
                    own,
                )
            )
        git.run(["checkout", "--quiet", "--force", "--detach", checkout.commit], root, env)
    return outcomes


def _fix_id(root: Path, proposals: Sequence[Proposal]) -> tuple[str, dict[str, str]]:
    files: dict[str, str] = {}
    for p in proposals:
        for file, (_, after) in p.files.items():
            files[str(Path(file).resolve().relative_to(root.resolve()))] = after
    digest = hashlib.sha256(json.dumps(sorted(files.items())).encode()).hexdigest()[:16]
    return digest, files


def _one(
    repo: Any,
    gh: GitHubSettings,
    target: str,
    store: Store,
    root: Path,
    env: Mapping[str, str],
    base_commit: str,
    base_branch: str,
    branch: str,
    identity: str,
    proposals: Sequence[Proposal],
) -> PullOutcome:
    from github import GithubException

    fix_id, files = _fix_id(root, proposals)
    if fix_id in store.refused_fixes(target, branch):
        return PullOutcome(identity, branch, "skipped", "a human closed the pull request for this fix")
    owner = gh.repository.split("/")[0]
    pulls = list(repo.get_pulls(state="all", head=f"{owner}:{branch}"))
    open_pr = next((p for p in pulls if p.state == "open"), None)
    for p in pulls:
        marker = MARKER.search(p.body or "")
        if p.state == "closed" and not p.merged and marker and marker.group(1) == fix_id:
            store.record_pull_request(target, identity, branch, p.number, p.html_url, "closed", fix_id, True)
            return PullOutcome(
                identity, branch, "skipped", f"#{p.number} was closed unmerged by a human", p.number
            )
    remote = git.run(["ls-remote", "origin", f"refs/heads/{branch}"], root, env).split()
    remote_sha = remote[0] if remote else ""
    if remote_sha:
        # Commits on the branch that the base does not have, as GitHub sees them (the local
        # checkout is shallow and cannot tell).
        authors = [c.commit.author.email for c in repo.compare(base_branch, branch).commits]
        foreign = sorted({a for a in authors if a != gh.commit_email})
        if foreign:
            return PullOutcome(
                identity,
                branch,
                "skipped",
                f"someone else committed to the branch ({', '.join(foreign)}); not force-pushing",
                open_pr.number if open_pr else None,
            )
    if open_pr is not None:
        marker = MARKER.search(open_pr.body or "")
        if marker and marker.group(1) == fix_id:
            store.record_pull_request(
                target, identity, branch, open_pr.number, open_pr.html_url, "open", fix_id
            )
            return PullOutcome(identity, branch, "up-to-date", "", open_pr.number)
    else:
        open_fix_prs = [
            p for p in repo.get_pulls(state="open") if p.head.ref.startswith("placement-auditor/")
        ]
        if len(open_fix_prs) >= gh.max_open_prs:
            return PullOutcome(
                identity, branch, "skipped", f"{len(open_fix_prs)} fix pull requests are open (max_open_prs)"
            )
        recent = store.pull_requests_since(target, store.clock() - timedelta(hours=1))
        if recent >= gh.max_new_prs_per_hour:
            return PullOutcome(
                identity,
                branch,
                "skipped",
                f"{recent} pull requests opened in the last hour (max_new_prs_per_hour)",
            )
    title, body = _body(proposals, fix_id)
    git.run(["checkout", "--quiet", "--force", "-B", branch, base_commit], root, env)
    for rel, text in files.items():
        with (root / rel).open("w", encoding="utf-8", newline="") as handle:
            handle.write(text)
    git.run(["add", "--", *files], root, env)
    # The commit's dates come from the injected clock, like every other time here.
    when = store.clock().isoformat()
    commit_env = {**env, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
    git.run(["commit", "--quiet", "-m", title, "-m", proposals[0].reaudit], root, commit_env)
    git.run(
        [
            "push",
            "--quiet",
            f"--force-with-lease=refs/heads/{branch}:{remote_sha}",
            "origin",
            f"HEAD:refs/heads/{branch}",
        ],
        root,
        env,
    )
    if open_pr is not None:
        open_pr.edit(title=title, body=body)
        store.record_pull_request(target, identity, branch, open_pr.number, open_pr.html_url, "open", fix_id)
        return PullOutcome(identity, branch, "updated", "", open_pr.number)
    try:
        pr = repo.create_pull(title=title, body=body, head=branch, base=base_branch)
    except GithubException as exc:
        if exc.status != 422:
            raise
        # Created meanwhile (another process, or a retried request that had succeeded).
        pr = next(p for p in repo.get_pulls(state="open", head=f"{owner}:{branch}"))
        pr.edit(title=title, body=body)
    if gh.labels:
        pr.add_to_labels(*gh.labels)
    store.record_pull_request(target, identity, branch, pr.number, pr.html_url, "open", fix_id)
    return PullOutcome(identity, branch, "opened", "", pr.number)
