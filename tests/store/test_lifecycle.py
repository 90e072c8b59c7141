"""The lifecycle table (auditor/store/lifecycle.py), case by case."""

from __future__ import annotations

import pytest

from auditor.store.lifecycle import Seen, after_run

R, W = Seen.REPORTED, Seen.WAIVED


@pytest.mark.parametrize(
    ("previous", "seen", "run", "expected"),
    [
        (None, R, "succeeded", "new"),
        ("new", R, "succeeded", "open"),
        ("open", R, "succeeded", "open"),
        ("resolved", R, "succeeded", "reopened"),
        ("reopened", R, "succeeded", "open"),
        ("waived", R, "succeeded", "open"),  # the waiver expired or was removed
        (None, W, "succeeded", "waived"),
        ("open", W, "succeeded", "waived"),
        ("new", None, "succeeded", "resolved"),
        ("open", None, "succeeded", "resolved"),
        ("reopened", None, "succeeded", "resolved"),
        ("waived", None, "succeeded", "resolved"),
        ("resolved", None, "succeeded", None),
        # A partial run records what it saw and resolves nothing.
        (None, R, "partial", "new"),
        ("resolved", R, "partial", "reopened"),
        ("open", None, "partial", None),
        # A failed or interrupted run changes nothing.
        ("open", None, "failed", None),
        ("open", R, "failed", None),
        (None, R, "interrupted", None),
    ],
)
def test_status_after_a_run(previous: str | None, seen: Seen | None, run: str, expected: str | None) -> None:
    change = after_run(previous, seen, run)
    assert (change.status if change else None) == expected
    if change is not None:
        assert change.resolved == (expected == "resolved")
        assert change.reopened == (expected == "reopened")


def test_plan_run_decides_every_change_before_anything_is_written() -> None:
    from dataclasses import replace

    from auditor.store.lifecycle import Stored, plan_run
    from tests.store.factory import finding

    a, b, c = finding(name="a", cost=100.0), finding(name="b", cost=50.5), finding(name="c")
    hidden = finding(name="h", rule="cross-zone-traffic", cost=7.0)
    gone, already = finding(name="gone"), finding(name="already")
    previous = {
        a.fingerprint: Stored(1, "open", "critical", "always"),
        b.fingerprint: Stored(2, "resolved", "critical", "always"),
        gone.fingerprint: Stored(3, "open", "high", "likely"),
        already.fingerprint: Stored(4, "resolved", "high", "likely"),
    }
    plan = plan_run(previous, [a, b, c, replace(c, message="again")], [(hidden, "waiver-1")], "succeeded")
    got = [(ch.finding.workload.name, ch.transition.status, ch.hidden_by, ch.before) for ch in plan.seen]
    assert got == [
        ("a", "open", None, previous[a.fingerprint]),
        ("b", "reopened", None, previous[b.fingerprint]),
        ("c", "new", None, None),  # the first finding of a fingerprint wins
        ("h", "waived", "waiver-1", None),
    ]
    assert plan.resolved == [previous[gone.fingerprint]]
    assert (plan.new, plan.reopened, plan.waived, plan.reported) == (1, 1, 1, 3)
    assert plan.total_cost == 150.5  # waived findings cost nothing
    # A partial run records the same transitions and resolves nothing.
    partial = plan_run(previous, [a], [], "partial")
    assert partial.resolved == [] and [ch.transition.status for ch in partial.seen] == ["open"]
    assert plan_run({}, [], [], "succeeded").total_cost is None
