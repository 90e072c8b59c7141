"""The progress bar draws only after a moment, and erases itself."""

from __future__ import annotations

import io

from auditor.progress import TerminalProgress


def test_nothing_drawn_for_quick_work() -> None:
    out = io.StringIO()
    bar = TerminalProgress(out)
    bar("reading manifests", 5, 10)
    bar.close()
    assert out.getvalue() == ""


def test_drawn_after_the_delay_and_erased() -> None:
    out = io.StringIO()
    bar = TerminalProgress(out)
    bar.started -= 5
    bar("evaluating paths", 3, 12)
    assert "evaluating paths" in out.getvalue() and "3/12" in out.getvalue()
    bar.close()
    assert out.getvalue().endswith("\r")
