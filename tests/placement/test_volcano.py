"""Volcano network-topology-aware scheduling (issue 35): HyperNodes and a Job's networkTopology.

Test data: tests/data/volcano (the Volcano user guide's HyperNodes s0–s6 and its mindspore-cpu
Job; origin in its README). The guide's expectation: with `mode: hard, highestTierAllowed: 2` the
job lands inside s4 (node-0..3) or s5 (node-4..7), never across both; `soft` only prefers it.
"""

from __future__ import annotations

import pytest
import support
from support import DATA, inventory

from auditor.placement import volcano
from auditor.placement.coupling import PairContext, RolePlacement, pair_placement

VOLCANO = DATA / "volcano"
ROLE = "ml/mindspore-cpu/pod"


def nodes(zones: dict[int, str]) -> str:
    return "".join(
        f"---\napiVersion: v1\nkind: Node\nmetadata: {{name: node-{i}, labels: "
        f"{{topology.kubernetes.io/zone: {z}, kubernetes.io/hostname: node-{i}}}}}\n"
        for i, z in zones.items()
    )


def placed(text: str, job: str | None = None) -> tuple[dict[str, RolePlacement], PairContext]:
    job = job if job is not None else (VOLCANO / "job.yaml").read_text()
    found, ctx, _ = support.placed(text + "---\n" + job, [VOLCANO / "hypernodes.yaml"])
    return found, ctx


# node-0..3 in zone-a, node-4..7 in zone-b: s4 and s5 each inside one zone.
ALIGNED = nodes({i: "zone-a" if i < 4 else "zone-b" for i in range(8)})
# node-2 and node-3 in zone-b: s4 spans two zones.
ACROSS = nodes({i: "zone-a" if i < 2 else "zone-b" for i in range(8)})


def test_hard_topology_within_zone_aligned_hypernodes_keeps_the_job_in_one_zone() -> None:
    p, ctx = placed(ALIGNED)
    assert p[ROLE].zones == ("zone-a", "zone-b")  # s4 or s5
    assert "hard Volcano networkTopology (highestTierAllowed 2)" in p[ROLE].one_zone
    assert pair_placement(p[ROLE], p[ROLE], ctx).split is None


def test_a_hypernode_spanning_zones_does_not() -> None:
    p, ctx = placed(ACROSS)
    assert not p[ROLE].one_zone
    assert pair_placement(p[ROLE], p[ROLE], ctx).split == "likely"


def test_the_highest_tier_bounds_the_domains() -> None:
    # highestTierAllowed 3: s6 holds every node, across both zones.
    job = (VOLCANO / "job.yaml").read_text().replace("highestTierAllowed: 2", "highestTierAllowed: 3")
    p, ctx = placed(ALIGNED, job)
    assert not p[ROLE].one_zone and pair_placement(p[ROLE], p[ROLE], ctx).split == "likely"
    # highestTierAllowed 1: s0..s3, each inside one zone.
    job = (VOLCANO / "job.yaml").read_text().replace("highestTierAllowed: 2", "highestTierAllowed: 1")
    assert placed(ACROSS, job)[0][ROLE].one_zone


def test_hard_mode_keeps_the_job_off_nodes_in_no_allowed_hypernode() -> None:
    p, _ = placed(ALIGNED + nodes({8: "zone-c"}))
    assert "node-8" not in p[ROLE].nodes and p[ROLE].zones == ("zone-a", "zone-b")
    (why,) = [r for r in p[ROLE].rejected if r.node == "node-8"]
    assert why.plugin == "NetworkTopology" and "tier 2 or lower" in why.reason


def test_soft_mode_only_prefers_one_hypernode() -> None:
    job = (VOLCANO / "job.yaml").read_text().replace("mode: hard", "mode: soft")
    p, ctx = placed(ALIGNED, job)
    assert not p[ROLE].one_zone
    pair = pair_placement(p[ROLE], p[ROLE], ctx)
    assert pair.split == "possible" and "soft Volcano networkTopology" in pair.coupling


def test_without_a_network_topology_nothing_changes() -> None:
    job = (
        (VOLCANO / "job.yaml")
        .read_text()
        .replace("  networkTopology:\n    mode: hard\n    highestTierAllowed: 2\n", "")
    )
    p, ctx = placed(ALIGNED, job)
    assert not p[ROLE].one_zone and pair_placement(p[ROLE], p[ROLE], ctx).split == "likely"


def test_regex_and_label_members() -> None:
    text = (
        ALIGNED
        + """---
apiVersion: topology.volcano.sh/v1alpha1
kind: HyperNode
metadata: {name: by-regex}
spec:
  tier: 1
  members:
  - {type: Node, selector: {regexMatch: {pattern: "node-[01]"}}}
---
apiVersion: topology.volcano.sh/v1alpha1
kind: HyperNode
metadata: {name: by-label}
spec:
  tier: 1
  members:
  - {type: Node, selector: {labelMatch: {matchLabels: {topology.kubernetes.io/zone: zone-b}}}}
"""
    )
    inv = inventory(text=text)
    leaves = volcano.leaf_nodes(inv.hypernodes, inv.nodes)
    assert leaves["by-regex"] == {"node-0", "node-1"}
    assert leaves["by-label"] == {f"node-{i}" for i in range(4, 8)}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ("{tier: -1}", "spec.tier"),
        ("{tier: 1, members: [{type: Rack, selector: {exactMatch: {name: x}}}]}", "spec.members[0].type"),
        (
            "{tier: 1, members: [{type: Node, selector: {exactMatch: {name: x}, regexMatch: {pattern: y}}}]}",
            "spec.members[0].selector",
        ),
        ("{tier: 1, members: [{type: Node, selector: {regexMatch: {pattern: '('}}}]}", "pattern"),
    ],
)
def test_a_bad_hypernode_is_an_error_naming_file_object_and_field(spec: str, field: str) -> None:
    text = (
        f"apiVersion: topology.volcano.sh/v1alpha1\nkind: HyperNode\nmetadata: {{name: bad}}\nspec: {spec}\n"
    )
    inv = inventory(text=text + ALIGNED)
    (e,) = inv.errors
    assert e.object == "HyperNode bad" and field in e.field
    assert len(inv.nodes) == 8


def test_cyclic_hypernodes_terminate() -> None:
    text = """apiVersion: topology.volcano.sh/v1alpha1
kind: HyperNode
metadata: {name: a}
spec: {tier: 2, members: [{type: HyperNode, selector: {exactMatch: {name: b}}}]}
---
apiVersion: topology.volcano.sh/v1alpha1
kind: HyperNode
metadata: {name: b}
spec: {tier: 2, members: [{type: HyperNode, selector: {exactMatch: {name: a}}}, {type: Node, selector: {exactMatch: {name: node-0}}}]}
"""
    inv = inventory(text=text + ALIGNED)
    leaves = volcano.leaf_nodes(inv.hypernodes, inv.nodes)
    assert leaves == {"a": {"node-0"}, "b": {"node-0"}}


def test_a_hostile_pattern_matches_in_linear_time_and_an_unsupported_one_is_an_error() -> None:
    # Nested quantifiers backtrack exponentially in Python's re; RE2 does not.
    many = "".join(
        f"---\napiVersion: v1\nkind: Node\nmetadata: {{name: {'a' * 200}{i}x}}\n" for i in range(50)
    )
    text = (
        "apiVersion: topology.volcano.sh/v1alpha1\nkind: HyperNode\nmetadata: {name: evil}\n"
        "spec: {tier: 1, members: [{type: Node, selector: {regexMatch: {pattern: '^(a+)+$'}}}]}\n" + many
    )
    inv = inventory(text=text)
    assert volcano.leaf_nodes(inv.hypernodes, inv.nodes) == {"evil": frozenset()}
    # Unanchored, as Go's regexp.MatchString: `node-[01]` also matches node-10.
    assert volcano.Member("Node", pattern="node-[01]").matches("node-10", None)
    backref = (
        "apiVersion: topology.volcano.sh/v1alpha1\nkind: HyperNode\nmetadata: {name: bad}\n"
        "spec: {tier: 1, members: [{type: Node, selector: {regexMatch: {pattern: '(a)\\1'}}}]}\n"
    )
    (e,) = inventory(text=backref).errors
    assert e.field.endswith("regexMatch.pattern") and "RE2" in e.message


def test_a_long_chain_of_hypernodes_resolves_without_exhausting_the_stack() -> None:
    chain = "".join(
        "---\napiVersion: topology.volcano.sh/v1alpha1\nkind: HyperNode\n"
        f"metadata: {{name: h{i}}}\nspec: {{tier: {i + 1}, members: "
        + (
            f"[{{type: HyperNode, selector: {{exactMatch: {{name: h{i - 1}}}}}}}]}}\n"
            if i
            else "[{type: Node, selector: {exactMatch: {name: node-0}}}]}\n"
        )
        for i in reversed(range(3000))  # the top first: resolving it walks the whole chain
    )
    inv = inventory(text=chain + ALIGNED)
    assert not inv.errors
    leaves = volcano.leaf_nodes(inv.hypernodes, inv.nodes)
    assert leaves["h2999"] == leaves["h0"] == {"node-0"}
