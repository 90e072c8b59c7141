"""Shared by the two blocked rules: does co-locating the roles help?"""

from __future__ import annotations

from auditor.rules.model import EdgeAnalysis


def classify(analysis: EdgeAnalysis) -> tuple[str, str] | None:
    """(rule id, certainty) for an edge denied in some allowed placement, else None.

    traffic-blocked when a same-zone placement is denied too (moving the pods would not help);
    cross-zone-blocked when only split placements are denied: the split is the cause.
    """
    denied = analysis.denied
    if not denied:
        return None
    verdicts = analysis.verdicts
    if any(v.same_zone for v in denied):
        return "traffic-blocked", "always" if len(denied) == len(verdicts) else "possible"
    if len(denied) == len(verdicts):
        return "cross-zone-blocked", "always"  # every allowed placement is a split, and denied
    cross = [v for v in verdicts if not v.same_zone]
    if len(denied) == len(cross) and analysis.placement.split in ("always", "likely"):
        return "cross-zone-blocked", analysis.placement.split
    return "cross-zone-blocked", "possible"
