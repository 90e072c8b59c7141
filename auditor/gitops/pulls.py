"""Fix pull requests: for a git target with a `github` section, one PR per workload with a verified
fix (remediation/fix.py), on a branch named after the fix, committed with real git and opened with
PyGithub. A fix's identity, the store as the state, the escaping of manifest text, force-push
safety, limits and rate limits: docs/remediation.md, "Pull requests"."""

from __future__ import annotations

import hashlib
import html
import json
import logging
import os
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from markupsafe import Markup

from auditor import templating
from auditor.gitops import git
from auditor.model.findings import ObjectRef
from auditor.remediation.fix import Proposal, propose
from auditor.rules.model import object_ref
from auditor.rules.packs import load_packs, with_api_waivers
from auditor.settings.config import Settings
from auditor.settings.service import GitHubSettings, TargetSettings
from auditor.sources.manifests import Tools
from auditor.store.records import PullRequestRecord
from auditor.store.repository import Store

log = logging.getLogger("auditor.pulls")
# The fix id in a PR body, for humans reading it (and tests). Never parsed back: the store is the state.
MARKER = re.compile(r"<!-- placement-auditor fix: ([0-9a-f]{16}) -->")


@dataclass(frozen=True, slots=True)
class PullOutcome:
    workload: str
    branch: str
    action: str  # opened | replaced | up-to-date | skipped | no-fix
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
        token = gh.token or environ.get(gh.token_env, "")
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


# -- escaping: every string from a manifest or a path is hostile ---------------------------------

# Line breaks, control characters, zero-width and bidirectional-override characters: never kept.
_INVISIBLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]+")
# Inline Markdown syntax (emphasis, code, links, images, tables, strikethrough), escaped with `\`.
_MD_PUNCTUATION = re.compile(r"([\\`*_{}\[\]()!|~^$])")
_ZWSP = "\u200b"


def _unlinkable(text: str) -> str:
    """No mention (`@team`), issue reference (`#12`, `GH-12`, `org/repo#12`) or bare URL autolink:
    a zero-width space after `@` and `#`, inside `GH-` and after `://` and `www` (as Dependabot and
    Renovate do)."""
    text = text.replace("@", "@" + _ZWSP).replace("#", "#" + _ZWSP)
    text = re.sub(r"(?i)\b(gh)-(?=\d)", r"\1-" + _ZWSP, text)
    text = re.sub(r":(?=//)", ":" + _ZWSP, text)
    return re.sub(r"(?i)\b(www)(?=\.)", r"\1" + _ZWSP, text)


def markdown_text(value: object) -> str:
    """`value` as inert inline text of a GitHub Markdown body: one line, HTML escaped (no tag, no
    comment, hence no forged marker), Markdown punctuation backslash-escaped (no code span, link,
    image or emphasis), and nothing GitHub links (mentions, issue references, URLs)."""
    text = _unlinkable(_INVISIBLE.sub(" ", str(value)))
    return _MD_PUNCTUATION.sub(r"\\\1", html.escape(text, quote=True))


def title_text(value: object) -> str:
    """`value` for a PR title or commit subject (plain text, where GitHub links references and
    renders code spans): one line, no backtick, nothing linked."""
    return _unlinkable(_INVISIBLE.sub(" ", str(value)).replace("`", "'"))


def _finalize(value: object) -> object:
    # Every `{{ … }}` of the body template is escaped unless a filter made it Markup on purpose.
    return value if isinstance(value, Markup) else markdown_text(value)


def _mermaid(text: Any) -> Markup:
    """A node label inside the ```mermaid fence: no quote, bracket, pipe, backtick or line break
    (which would end the label, the node or the fence), no `<`, `>`, `&`, `#` or `@`."""
    return Markup(re.sub(r'["\[\]{}<>|`&;#@]', " ", _INVISIBLE.sub(" ", str(text)))[:120])


def render_body(values: Mapping[str, Any]) -> str:
    env = templating.sandbox("pr", autoescape=False, finalize=_finalize)
    env.filters["mermaid"] = _mermaid
    return env.get_template("body.md.j2").render(**values)


# -- the fix's identity ---------------------------------------------------------------------------


def fix_intent(proposals: Sequence[Proposal]) -> list[dict[str, Any]]:
    """What the fix means, independent of the file's text: per finding its workload, rule and
    fingerprint, and the plan (strategy, zone, each role's patch)."""
    out: list[dict[str, Any]] = []
    for p in proposals:
        assert p.plan is not None
        patches: list[dict[str, Any]] = [
            {
                "role": f"{object_ref(patch.role).identity}/{patch.role.label}",
                "zone": patch.zone,
                "tolerations": sorted([t.key, t.value, t.effect] for t in patch.tolerations),
                "labels": sorted([k, v] for k, v in patch.labels),
                "coordinator": sorted([k, v] for k, v in patch.coordinator_labels),
                "kueue": patch.kueue,
            }
            for patch in p.plan.patches
        ]
        out.append(
            {
                "workload": p.finding.workload.identity,
                "rule": p.finding.rule,
                "finding": p.finding.fingerprint,
                "strategy": p.plan.strategy,
                "zone": p.plan.zone,
                "patches": sorted(patches, key=lambda d: str(d["role"])),
            }
        )
    return sorted(out, key=lambda d: str(d["finding"]))


def fix_id_of(intent: Sequence[Mapping[str, Any]]) -> str:
    canonical = json.dumps(list(intent), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def branch_prefix(workload: ObjectRef) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", f"{workload.kind}-{workload.namespace}-{workload.name}".lower())
    return f"placement-auditor/{slug.strip('-')[:60].strip('-')}"


def _body(proposals: Sequence[Proposal], fix_id: str, root: Path) -> tuple[str, str]:
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
    title = title_text(f"placement-auditor: keep {w.kind} {w.namespace}/{w.name} in {first.plan.zone}")
    policies = [{**p.to_json(), "file": git.relative_to(p.file, root)} for p in f.policies]
    body = render_body(
        {
            "workload": f"{w.kind} {w.namespace}/{w.name}",
            "plain": plain,
            "before": before,
            "edges": edges,
            "policies": policies,
            "cost": f.estimated_monthly_cost_usd,
            "change": "; ".join(p.plan.describe() for p in proposals if p.plan is not None),
            "reaudit": first.reaudit,
            "fingerprints": [p.finding.fingerprint for p in proposals],
            "marker": Markup(f"<!-- placement-auditor fix: {fix_id} -->"),
        }
    )
    return title[:250], body


def sync_pull_requests(
    target: TargetSettings,
    settings: Settings,
    store: Store,
    environ: Mapping[str, str] | None = None,
    tools: Tools | None = None,
    sleep: Callable[[float], None] | None = None,
    only: Collection[str] | None = None,
    onto: str | None = None,
) -> list[PullOutcome]:
    """Open or update the fix pull requests of one target (`only`: of the workloads of these
    finding fingerprints; `onto`: fixing that branch — a pull request's, for the check run's "Open
    fix PR" button — instead of the target's, each fix then its own, apart from the target's
    fixes); returns what happened per workload. Findings suppressed through the API
    are waived here as in the runs. Raises PullRequestsDeferred when GitHub's rate limit would
    hold the step too long."""
    environ = dict(os.environ if environ is None else environ)
    if target.git is None or target.github is None:
        raise git.GitError(f"target {target.name} has no git repository with a github section")
    gh = target.github
    repo = github_client(gh, environ, store.clock, sleep).get_repo(gh.repository)
    base_branch = onto or target.git.branch or repo.default_branch
    cache = Path(settings.service.git_cache_dir)
    credentials = git.credentials(target.git, environ)
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
        pack = with_api_waivers(
            load_packs([root / p for p in target.policies]), store.suppressions(target.name)
        )
        today = store.clock().date()
        chosen = set(only) if only is not None else None
        _, everything = propose([*paths, *nodes], settings, pack, today, chosen, tools)
        by_workload: dict[str, list[Proposal]] = {}
        for p in everything:
            by_workload.setdefault(p.finding.workload.identity, []).append(p)
        for identity, group in sorted(by_workload.items()):
            branch = branch_prefix(group[0].finding.workload)
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
                    f"{identity}@{onto}" if onto else identity,
                    own,
                    onto,
                )
            )
        git.run(["checkout", "--quiet", "--force", "--detach", checkout.commit], root, env)
    return outcomes


def _one(
    repo: Any,
    gh: GitHubSettings,
    target: str,
    store: Store,
    root: Path,
    env: Mapping[str, str],
    base_commit: str,
    base_branch: str,
    identity: str,
    proposals: Sequence[Proposal],
    onto: str | None = None,
) -> PullOutcome:
    from github import GithubException

    # A fix onto another branch than the target's is another fix: its own id, branch and record.
    fix_id = fix_id_of([*fix_intent(proposals), *([{"onto": onto}] if onto else [])])
    branch = f"{branch_prefix(proposals[0].finding.workload)}-{fix_id}"  # the branch names the fix
    files = {
        str(Path(file).resolve().relative_to(root.resolve())): after
        for p in proposals
        for file, (_, after) in p.files.items()
    }

    def skipped(detail: str, number: int | None = None) -> PullOutcome:
        return PullOutcome(identity, branch, "skipped", detail, number)

    mine = store.pull_requests(target, fix_id=fix_id)
    refused = next((r for r in mine if r.closed_by_human), None)
    if refused is not None:
        return skipped(f"a human closed #{refused.number} for this fix", refused.number)
    closed_by_us = {r.number for r in mine if r.state == "superseded"}
    owner = gh.repository.split("/")[0]
    # What GitHub says of the PRs on the fix's branch: their state, never their body.
    pulls = list(repo.get_pulls(state="all", head=f"{owner}:{branch}"))
    for p in pulls:
        if p.state == "closed" and not p.merged and p.number not in closed_by_us:
            store.record_pull_request(target, identity, branch, p.number, p.html_url, "closed", fix_id, True)
            return skipped(f"#{p.number} was closed unmerged by a human", p.number)
    open_pr = next((p for p in pulls if p.state == "open"), None)
    if open_pr is not None:
        store.record_pull_request(target, identity, branch, open_pr.number, open_pr.html_url, "open", fix_id)
        return PullOutcome(identity, branch, "up-to-date", "", open_pr.number)
    # Open PRs of earlier fixes for this workload: closed as superseded once the new one exists.
    earlier = [
        r for r in store.pull_requests(target, workload=identity) if r.state == "open" and r.fix_id != fix_id
    ]
    remote = git.run(["ls-remote", "origin", f"refs/heads/{branch}"], root, env).split()
    remote_sha = remote[0] if remote else ""
    if remote_sha:
        # Commits on the branch that the base does not have, as GitHub sees them (the local
        # checkout is shallow and cannot tell).
        authors = [c.commit.author.email for c in repo.compare(base_branch, branch).commits]
        foreign = sorted({a for a in authors if a != gh.commit_email})
        if foreign:
            return skipped(f"someone else committed to the branch ({', '.join(foreign)}); not force-pushing")
    if not earlier:
        open_fix_prs = [
            p for p in repo.get_pulls(state="open") if p.head.ref.startswith("placement-auditor/")
        ]
        if len(open_fix_prs) >= gh.max_open_prs:
            return skipped(f"{len(open_fix_prs)} fix pull requests are open (max_open_prs)")
    recent = store.pull_requests_since(target, store.clock() - timedelta(hours=1))
    if recent >= gh.max_new_prs_per_hour:
        return skipped(f"{recent} pull requests opened in the last hour (max_new_prs_per_hour)")
    title, body = _body(proposals, fix_id, root)
    git.run(["checkout", "--quiet", "--force", "-B", branch, base_commit], root, env)
    for rel, text in files.items():
        (root / rel).write_text(text, encoding="utf-8", newline="")
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
    replaced = [n for r in earlier if (n := _supersede(repo, store, target, identity, r, pr.number))]
    if replaced:
        detail = "supersedes " + ", ".join(f"#{n}" for n in replaced)
        return PullOutcome(identity, branch, "replaced", detail, pr.number)
    return PullOutcome(identity, branch, "opened", "", pr.number)


def _supersede(
    repo: Any, store: Store, target: str, identity: str, row: PullRequestRecord, by: int
) -> int | None:
    """Close the open PR of an earlier fix (recorded `superseded`, so it never counts as refused);
    one a human closed meanwhile is recorded as refused instead. The PR's number when closed here."""
    old = repo.get_pull(row.number)
    number, branch, fix_id = row.number, row.branch, row.fix_id
    if old.state == "open":
        # Recorded first: should closing fail half-way, the tool still knows the close was its own.
        store.record_pull_request(target, identity, branch, number, old.html_url, "superseded", fix_id)
        old.create_issue_comment(f"Superseded by #{by}: the fix for this workload changed.")
        old.edit(state="closed")
        return number
    state = "merged" if old.merged else "closed"
    store.record_pull_request(target, identity, branch, number, old.html_url, state, fix_id, not old.merged)
    return None
