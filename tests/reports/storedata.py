"""A store with realistic history for report, digest and web tests: the seed lab audited twice,
plus a hostile finding (HTML and script in its text) and a waived one."""

from __future__ import annotations

from datetime import date
from pathlib import Path

from dbsupport import Clock
from factory import finding

from auditor.model.findings import EdgeRef, PolicyMention
from auditor.resources import examples_dir
from auditor.service.runner import AuditRunner
from auditor.settings.config import load_settings
from auditor.sources.manifests import Tools
from auditor.store.repository import RunOutcome, Store, TargetSpec, WaiverSeen

HOSTILE = '<script>alert("x")</script><b onmouseover=alert(1)>bold</b>'


def seeded_store(tmp_path: Path, engine, extra_config: str = "") -> tuple[Store, Clock, object]:  # type: ignore[no-untyped-def]
    seed = examples_dir() / "seed-lab"
    config = tmp_path / "auditor.yaml"
    config.write_text(
        f"targets:\n  - name: lab\n    directory: '{seed}'\n    paths: [before, policies.yaml]\n    nodes: [nodes.yaml]\n"
        "  - name: web\n    directory: '/nonexistent'\n" + extra_config
    )
    settings = load_settings(config)
    clock = Clock()
    store = Store(engine, clock)
    store.sync_targets(TargetSpec(t.name, t.kind, t.location) for t in settings.targets)
    runner = AuditRunner(settings, store, Tools(None, None))
    runner.run("lab")
    clock.advance(days=1)
    runner.run("lab")
    runner.run("web")  # fails: the directory does not exist
    # A hand-made run on a third target with a hostile message, a costly split and a waiver.
    store.sync_targets(
        [
            *(TargetSpec(t.name, t.kind, t.location) for t in settings.targets),
            TargetSpec("infra", "git", "https://example.com/infra.git"),
        ]
    )
    run_id = store.claim_run("infra", None, "cli", "h:1")
    evil = finding(
        "evil-job", rule="cross-zone-blocked", severity="critical", namespace="ml-research", message=HOSTILE
    )
    evil = type(evil)(
        **{
            **{
                f: getattr(evil, f)
                for f in ("rule", "severity", "certainty", "symptoms", "workload", "message")
            },
            "edge": EdgeRef("Worker", ("zone-a",), "Master", ("zone-b",), 23456),
            "policies": (PolicyMention("NetworkPolicy", "ml-research", "deny-<all>", "np.yaml", 3),),
        }
    )
    costly = finding("big-job", namespace="ml-prod", cost=2450.0)
    waived = finding("accepted-job", namespace="ml-prod", cost=10.0)
    store.complete_run(
        run_id,
        RunOutcome(
            "succeeded",
            "0123456789abcdef0123456789abcdef01234567",
            [evil, costly],
            waived=[
                (
                    waived,
                    WaiverSeen(
                        waived.fingerprint,
                        "document:waivers.yaml:move",
                        "moving next quarter",
                        date(2026, 12, 10),
                        False,
                    ),
                )
            ],
        ),
    )
    return store, clock, settings
