"""The seed scenario through the CLI: `auditor explain` on before/ and after/."""

from __future__ import annotations

import json

import pytest
from support import DATA

from auditor.cli import main

LAB = DATA / "seed-lab"
ARGS = ["--from", "ml-demo/trainer-workers", "--to", "ml-demo/trainer-coordinator", "--port", "9999"]


def run(capsys: pytest.CaptureFixture[str], state: str, *extra: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    code = main(
        [
            "explain",
            str(LAB / state),
            str(LAB / "policies.yaml"),
            str(LAB / "nodes.yaml"),
            *ARGS,
            "--format",
            "json",
            *extra,
        ]
    )
    return code, json.loads(capsys.readouterr().out)


def names(side: dict) -> set[str]:  # type: ignore[type-arg]
    return {d["name"] for d in side["decided_by"]}


def test_before_is_denied_naming_the_three_policies(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "before")
    assert code == 1
    assert out["verdict"] == "deny"
    assert out["from"]["zone"] == "zone-a" and out["to"]["zone"] == "zone-b"
    assert out["egress"]["verdict"] == "deny" and out["ingress"]["verdict"] == "deny"
    assert names(out["egress"]) == {"zone-a-only", "gpu-workers-stay-in-zone-a"}
    assert names(out["ingress"]) == {"zone-b-only"}
    for d in out["egress"]["decided_by"] + out["ingress"]["decided_by"]:
        assert d["kind"] == "CiliumNetworkPolicy" and d["file"].endswith("policies.yaml") and d["line"] > 0
    assert out["errors"] == []


def test_after_is_allowed(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "after")
    assert code == 0
    assert out["verdict"] == "allow"
    assert out["to"]["zone"] == "zone-a"
    assert "zone-a-only" in names(out["ingress"])


def test_text_output_names_policies_and_lines(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["explain", str(LAB / "before"), str(LAB / "policies.yaml"), str(LAB / "nodes.yaml"), *ARGS])
    text = capsys.readouterr().out
    assert code == 1
    assert "DENIED" in text and "zone-b-only" in text and "policies.yaml:" in text


def test_bundled_example_matches(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--example", "seed-lab/before", *ARGS]) == 1
    assert main(["explain", "--example", "seed-lab/after", *ARGS]) == 0


def test_zone_override_opens_the_door(capsys: pytest.CaptureFixture[str]) -> None:
    """Forcing the coordinator into zone-a does not help in before/: its template label `zone: zone-b`
    still matches zone-b-only (the label, not the node, decides)."""
    code, out = run(capsys, "before", "--to-zone", "zone-a")
    assert code == 1 and out["to"]["zone"] == "zone-a"
    assert names(out["ingress"]) == {"zone-b-only"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--from", "ml-demo/nope", "--to", "ml-demo/trainer-coordinator", "--port", "9999"],
            "no pod or workload",
        ),
        (["--from", "ml-demo", "--to", "ml-demo/trainer-coordinator", "--port", "9999"], "expected NS/NAME"),
        (
            ["--from", "ml-demo/trainer-workers", "--to", "ml-demo/trainer-coordinator", "--port", "70000"],
            "between 1",
        ),
        (
            ["--from", "ml-demo/trainer-workers", "--to", "ml-demo/trainer-coordinator", "--port", "nope"],
            "named 'nope'",
        ),
        (
            [
                "--from",
                "ml-demo/trainer-workers",
                "--to",
                "ml-demo/trainer-coordinator",
                "--port",
                "9999",
                "--protocol",
                "ICMP",
            ],
            "TCP, UDP or SCTP",
        ),
    ],
)
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    code = main(["explain", str(LAB / "before"), str(LAB / "policies.yaml"), str(LAB / "nodes.yaml"), *args])
    assert code == 2
    assert message in capsys.readouterr().err


def test_named_port_resolves_on_destination(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "explain",
            str(LAB / "after"),
            str(LAB / "policies.yaml"),
            str(LAB / "nodes.yaml"),
            "--from",
            "ml-demo/trainer-workers",
            "--to",
            "ml-demo/trainer-coordinator",
            "--port",
            "rendezvous",
            "--format",
            "json",
        ]
    )
    assert code == 0
    assert json.loads(capsys.readouterr().out)["port"] == 9999
