"""`admission:` in the config file: the validating admission webhook (`auditor admit`,
docs/admission.md)."""

from __future__ import annotations

from dataclasses import dataclass

from auditor.settings.schema import setting

MODE_LABEL = "placement-auditor.io/admission"
"""The namespace label (or annotation) that sets a namespace's mode: warn, deny or off."""


@dataclass(frozen=True, slots=True)
class AdmissionSettings:
    """The admission webhook: what it answers, how fast, and how it fails."""

    default_mode: str = setting(
        "warn",
        doc="Mode of a namespace without the placement-auditor.io/admission label or annotation.",
        choices=("warn", "deny", "off"),
        why="warn first: a team sees what deny would refuse before anything is refused.",
    )
    budget_ms: int = setting(
        1000,
        doc="An answer that would take longer is replaced by an allowed one with a warning.",
        unit="milliseconds",
        exclusive_minimum=0,
        why="far inside the webhook's timeoutSeconds (5 s in deploy/), so the API server never times "
        "out on us; never a denial we could not finish deciding.",
    )
    max_staleness_seconds: int = setting(
        300,
        doc="A resource whose watch has been broken this long makes answers fail open.",
        unit="seconds",
        exclusive_minimum=0,
        why="a model that misses recent changes could deny on a state that no longer exists.",
    )
    max_body_bytes: int = setting(
        3_145_728,
        doc="A request body larger than this is refused with 413.",
        unit="bytes",
        exclusive_minimum=0,
        why="3 MiB: etcd's default object limit is 1.5 MiB; a review holds object and oldObject.",
    )
    deny_cost_usd: float = setting(
        0.0,
        doc="In deny mode, a costed cross-zone-traffic finding at or above this monthly cost denies; "
        "0: costed cross-zone traffic only warns.",
        unit="USD per month",
        minimum=0,
        why="slowdown and cost are not outages: denying them is a choice a platform team makes.",
    )
    tls_reload_seconds: int = setting(
        10,
        doc="How often the server checks its certificate files for a rotation.",
        unit="seconds",
        exclusive_minimum=0,
    )
