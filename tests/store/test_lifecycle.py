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
