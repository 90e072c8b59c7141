"""Policy packs: loading and merging, scope and severity, custom CEL rules, waivers."""

from __future__ import annotations

import dataclasses
from datetime import date
from pathlib import Path

import pytest
from support import DATA

from auditor.model.findings import Finding
from auditor.rules import RULES, run_rules
from auditor.rules.cel_rules import ITERATION_BUDGET, MAX_EXPRESSION_CHARS, CelError, compile_expression
from auditor.rules.model import AuditModel, build_model
from auditor.rules.packs import (
    MAX_ERRORS_PER_RULE,
    PackError,
    PolicyPack,
    apply_pack,
    default_pack_path,
    evaluate_custom_rules,
    load_packs,
)
from auditor.settings.config import ConfigError, Settings
from auditor.sources.manifests import load_inventory

LAB = DATA / "seed-lab"
TODAY = date(2026, 3, 15)
HEADER = "apiVersion: placement-auditor.io/v1\nkind: PolicyPack\nmetadata: {name: NAME}\n"


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text.lstrip("\n"))
    return path


def pack(directory: Path, spec: str, name: str = "team") -> Path:
    """A PolicyPack file named after the pack, `spec` given as YAML indented under `spec:`."""
    return write(directory, f"{name}.yaml", HEADER.replace("NAME", name) + "spec:\n" + spec)


def seed_lab(tmp_path: Path, workload: str | None = None) -> tuple[AuditModel, list[Finding]]:
    """The seed lab's broken state: one cross-zone-blocked finding on Job ml-demo/trainer-workers."""
    manifests = tmp_path / "manifests"
    manifests.mkdir(exist_ok=True)
    write(manifests, "workload.yaml", workload or (LAB / "before" / "workload.yaml").read_text())
    inv = load_inventory([manifests, LAB / "policies.yaml", LAB / "nodes.yaml"], Settings())
    assert not inv.errors, inv.errors
    model = build_model(inv)
    return model, run_rules(model)


def annotated(annotations: str) -> str:
    """The seed lab's workload with annotations on the Job's own metadata."""
    text = (LAB / "before" / "workload.yaml").read_text()
    anchor = "  name: trainer-workers\n  namespace: ml-demo\n  labels: {app: trainer}\n"
    assert anchor in text
    return text.replace(anchor, anchor + "  annotations:\n" + annotations)


GPU_NODES = """
apiVersion: v1
kind: NodeList
items:
- apiVersion: v1
  kind: Node
  metadata: {name: gpu-a, labels: {topology.kubernetes.io/zone: za}}
  status: {allocatable: {cpu: "64", memory: 256Gi, pods: "110", nvidia.com/gpu: "64"}}
- apiVersion: v1
  kind: Node
  metadata: {name: gpu-b, labels: {topology.kubernetes.io/zone: zb}}
  status: {allocatable: {cpu: "64", memory: 256Gi, pods: "110", nvidia.com/gpu: "64"}}
"""
BIG_JOB = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: big, namespace: ml, labels: {team: vision}}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template: {spec: {containers: [{name: t, image: x, resources: {requests: {cpu: "1"}}}]}}
    Worker:
      replicas: 12
      template:
        spec:
          containers:
          - {name: t, image: x, resources: {limits: {nvidia.com/gpu: "1"}}}
"""


def gpu_model(tmp_path: Path, job: str = BIG_JOB) -> AuditModel:
    manifests = tmp_path / "gpu"
    manifests.mkdir(exist_ok=True)
    write(manifests, "nodes.yaml", GPU_NODES)
    write(manifests, "job.yaml", job)
    inv = load_inventory([manifests], Settings())
    assert not inv.errors, inv.errors
    return build_model(inv)


def only(result_findings: object) -> Finding:
    assert isinstance(result_findings, list | tuple) and len(result_findings) == 1, result_findings
    (finding,) = result_findings
    assert isinstance(finding, Finding)
    return finding


# ---------------------------------------------------------------------------------------------
# The default pack


def test_default_pack_enables_every_builtin_rule_at_its_own_severity() -> None:
    loaded = load_packs([])
    assert loaded.names == ("default",)
    assert loaded.files == (str(default_pack_path()),)
    for rule in RULES:
        settings = loaded.settings(rule.META.id)
        assert settings.enabled, rule.META.id
        # cross-zone-traffic rates itself (high when always, medium otherwise): no override.
        expected = None if rule.META.id == "cross-zone-traffic" else rule.META.severity
        assert settings.severity == expected, rule.META.id
    assert set(loaded.rules) == {rule.META.id for rule in RULES}
    assert loaded.rule_options() == {rule.META.id: dict(rule.META.options) for rule in RULES}


def test_default_pack_leaves_the_seed_lab_finding_as_it_is(tmp_path: Path) -> None:
    model, findings = seed_lab(tmp_path)
    result = apply_pack(findings, model, load_packs([]), TODAY)
    assert result.findings == tuple(findings)
    assert [(f.rule, f.severity, f.workload.name) for f in findings] == [
        ("cross-zone-blocked", "critical", "trainer-workers")
    ]
    assert not (result.waived or result.expired or result.unused_waivers or result.errors)
    assert result.filtered == 0


def test_without_the_default_pack_rules_keep_their_defaults(tmp_path: Path) -> None:
    loaded = load_packs([pack(tmp_path, "  rules: {}\n")], include_default=False)
    assert loaded.names == ("team",)
    assert loaded.settings("cross-zone-blocked").enabled
    assert loaded.settings("cross-zone-blocked").severity is None


# ---------------------------------------------------------------------------------------------
# Severity, scope, enabled


def test_severity_override_keeps_the_fingerprint(tmp_path: Path) -> None:
    model, findings = seed_lab(tmp_path)
    loaded = load_packs([pack(tmp_path, "  rules:\n    cross-zone-blocked: {severity: low}\n")])
    finding = only(apply_pack(findings, model, loaded, TODAY).findings)
    assert finding.severity == "low"
    assert finding.fingerprint == findings[0].fingerprint
    assert finding.sort_key[0] == 3  # re-rated findings sort by their new severity
    assert dataclasses.replace(finding, severity="critical") == findings[0]


def test_later_packs_override_earlier_ones(tmp_path: Path) -> None:
    first = pack(tmp_path, "  rules:\n    cross-zone-blocked: {severity: medium, enabled: false}\n", "first")
    second = pack(tmp_path, "  rules:\n    cross-zone-blocked: {enabled: true}\n", "second")
    loaded = load_packs([first, second])
    assert loaded.names == ("default", "first", "second")
    settings = loaded.settings("cross-zone-blocked")
    assert (settings.enabled, settings.severity) == (True, "medium")
    assert settings.source == f"{second}:6"


def test_a_disabled_rule_reports_nothing(tmp_path: Path) -> None:
    model, findings = seed_lab(tmp_path)
    loaded = load_packs([pack(tmp_path, "  rules:\n    cross-zone-blocked: {enabled: false}\n")])
    assert not loaded.enabled("cross-zone-blocked")
    result = apply_pack(findings, model, loaded, TODAY)
    assert result.findings == ()
    assert result.filtered == 1


@pytest.mark.parametrize(
    ("scope", "reported"),
    [
        ("{namespaces: [ml-demo]}", True),
        ("{namespaces: [ml-*]}", True),
        ("{namespaces: [prod, staging-*]}", False),
        ("{excludeNamespaces: [ml-*]}", False),
        ("{namespaces: [ml-*], excludeNamespaces: [ml-demo]}", False),
        ("{kinds: [Job]}", True),
        ("{kinds: [Deployment, PyTorchJob]}", False),
        ("{labels: {matchLabels: {app: trainer}}}", True),
        ("{labels: {matchLabels: {app: other}}}", False),
        ("{labels: {matchExpressions: [{key: app, operator: In, values: [trainer, x]}]}}", True),
        ("{labels: {matchExpressions: [{key: tier, operator: Exists}]}}", False),
        ("{namespaces: [ml-demo], kinds: [Job], labels: {matchLabels: {app: trainer}}}", True),
        ("{}", True),
    ],
)
def test_scope_by_namespace_kind_and_labels(tmp_path: Path, scope: str, reported: bool) -> None:
    model, findings = seed_lab(tmp_path)
    loaded = load_packs([pack(tmp_path, f"  rules:\n    cross-zone-blocked:\n      scope: {scope}\n")])
    result = apply_pack(findings, model, loaded, TODAY)
    assert len(result.findings) == (1 if reported else 0)
    assert result.filtered == (0 if reported else 1)


def test_a_later_scope_replaces_the_earlier_one_whole(tmp_path: Path) -> None:
    first = pack(tmp_path, "  rules:\n    cross-zone-blocked: {scope: {namespaces: [prod]}}\n", "first")
    second = pack(tmp_path, "  rules:\n    cross-zone-blocked: {scope: {kinds: [Job]}}\n", "second")
    scope = load_packs([first, second]).settings("cross-zone-blocked").scope
    assert (scope.namespaces, scope.kinds) == ((), ("Job",))


# ---------------------------------------------------------------------------------------------
# Custom rules

GPU_RULES = """
  customRules:
  - id: gpu-role-without-toleration
    title: GPU role cannot tolerate the GPU taint
    severity: high
    symptoms: [blocked]
    message: GPU role has no toleration for nvidia.com/gpu
    condition: >-
      'nvidia.com/gpu' in role.resources &&
      !role.tolerations.exists(t, t.key == 'nvidia.com/gpu' || (t.key == '' && t.operator == 'Exists'))
  - id: wide-role-across-zones
    severity: medium
    symptoms: [slowdown, cost]
    certainty: likely
    message: many replicas can spread over zones
    messageExpression: "role.name + ' x' + string(role.replicas) + ' can land in ' + role.zones.join(', ')"
    options: {maxReplicas: 8}
    condition: role.replicas > params.maxReplicas && size(role.zones) > 1
"""


def test_custom_rules_report_per_role(tmp_path: Path) -> None:
    model = gpu_model(tmp_path)
    loaded = load_packs([pack(tmp_path, GPU_RULES)])
    assert [r.id for r in loaded.custom_rules] == ["gpu-role-without-toleration", "wide-role-across-zones"]
    findings, errors = evaluate_custom_rules(loaded, model)
    assert errors == []
    got = sorted((f.rule, f.severity, f.certainty, f.target, f.workload.name, f.message) for f in findings)
    assert got == [
        (
            "gpu-role-without-toleration",
            "high",
            "always",
            "Worker",
            "big",
            "GPU role has no toleration for nvidia.com/gpu",
        ),
        ("wide-role-across-zones", "medium", "likely", "Worker", "big", "Worker x12 can land in za, zb"),
    ]
    gpu = next(f for f in findings if f.rule == "gpu-role-without-toleration")
    assert gpu.symptoms == ("blocked",)
    assert gpu.workload.kind == "PyTorchJob" and gpu.workload.file.endswith("job.yaml")
    # The custom findings go through apply_pack like built-in ones.
    result = apply_pack(findings, model, loaded, TODAY)
    assert len(result.findings) == 2


def test_custom_rule_fixed_by_a_toleration_reports_nothing(tmp_path: Path) -> None:
    tolerating = BIG_JOB.replace(
        "        spec:\n          containers:",
        "        spec:\n          tolerations: [{key: nvidia.com/gpu, operator: Exists}]\n          containers:",
    )
    model = gpu_model(tmp_path, tolerating)
    findings, errors = evaluate_custom_rules(load_packs([pack(tmp_path, GPU_RULES)]), model)
    assert errors == []
    assert [f.rule for f in findings] == ["wide-role-across-zones"]


def test_custom_rule_params_severity_and_enabled_are_overridden_by_later_packs(tmp_path: Path) -> None:
    model = gpu_model(tmp_path)
    tune = pack(
        tmp_path,
        "  rules:\n"
        "    wide-role-across-zones: {options: {maxReplicas: 16}}\n"
        "    gpu-role-without-toleration: {severity: critical, scope: {namespaces: [ml]}}\n",
        "tune",
    )
    loaded = load_packs([pack(tmp_path, GPU_RULES), tune])
    findings, _ = evaluate_custom_rules(loaded, model)
    assert [(f.rule, f.severity) for f in findings] == [("gpu-role-without-toleration", "critical")]
    off = pack(tmp_path, "  rules:\n    gpu-role-without-toleration: {enabled: false}\n", "disable")
    findings, _ = evaluate_custom_rules(load_packs([pack(tmp_path, GPU_RULES), tune, off]), model)
    assert findings == []


def test_custom_rule_options_may_be_lists_and_maps(tmp_path: Path) -> None:
    model = gpu_model(tmp_path)
    spec = """
  customRules:
  - id: outside-allowed-zones
    severity: medium
    message: a role can land outside the zones the team pays for
    options: {allowed: {zones: [za]}}
    condition: role.zones.exists(z, !(z in params.allowed.zones))
"""
    findings, errors = evaluate_custom_rules(load_packs([pack(tmp_path, spec)]), model)
    assert errors == []
    assert sorted(f.target for f in findings) == ["Master", "Worker"]
    widen = pack(
        tmp_path, "  rules:\n    outside-allowed-zones: {options: {allowed: {zones: [za, zb]}}}\n", "z"
    )
    findings, errors = evaluate_custom_rules(load_packs([pack(tmp_path, spec), widen]), model)
    assert (findings, errors) == ([], [])


def test_custom_rule_scope_is_applied_before_evaluating(tmp_path: Path) -> None:
    model = gpu_model(tmp_path)
    scoped = GPU_RULES.replace(
        "    severity: high\n", "    severity: high\n    scope: {namespaces: [prod]}\n"
    )
    findings, _ = evaluate_custom_rules(load_packs([pack(tmp_path, scoped)]), model)
    assert [f.rule for f in findings] == ["wide-role-across-zones"]


def test_workload_level_custom_rule_sees_the_group(tmp_path: Path) -> None:
    model = gpu_model(tmp_path)
    spec = """
  customRules:
  - id: training-group-can-split
    for: workload
    severity: medium
    symptoms: [slowdown]
    message: the group can split
    condition: >-
      workload.kind == 'PyTorchJob' && group.canSplit && group.split == 'likely'
      && group.zones == ['za', 'zb'] && group.commonZones == ['za', 'zb']
      && group.roles.exists(r, r.name == 'Worker' && r.replicas == 12)
      && group.edges.exists(e, e.from == 'Worker' && e.to == 'Master' && e.port == 23456 && e.crossZone)
      && cluster.zones == ['za', 'zb'] && cluster.nodes == 2 && workload.labels.team == 'vision'
"""
    findings, errors = evaluate_custom_rules(load_packs([pack(tmp_path, spec)]), model)
    assert errors == []
    finding = only(findings)
    assert (finding.rule, finding.target, finding.workload.name) == ("training-group-can-split", "", "big")


def test_custom_rules_see_placement_in_the_seed_lab(tmp_path: Path) -> None:
    model, _ = seed_lab(tmp_path)
    spec = """
  customRules:
  - id: coordinator-elsewhere
    severity: high
    message: the role can only land where its peers cannot
    condition: >-
      role.split == 'always' && role.zones.size() == 1
      && group.edges.exists(e, e.denied && e.toWorkload == 'ml-demo/trainer-coordinator')
"""
    findings, errors = evaluate_custom_rules(load_packs([pack(tmp_path, spec)]), model)
    assert errors == []
    assert sorted((f.workload.name, f.target) for f in findings) == [
        ("trainer-coordinator", "trainer-coordinator"),
        ("trainer-workers", "trainer-workers"),
    ]


def test_cel_syntax_error_is_reported_at_load_with_rule_and_position(tmp_path: Path) -> None:
    path = pack(
        tmp_path,
        "  customRules:\n"
        "  - id: broken-rule\n"
        "    severity: low\n"
        "    message: m\n"
        "    condition: role.replicas >\n",
    )
    with pytest.raises(PackError) as caught:
        load_packs([path])
    error = caught.value
    assert isinstance(error, ConfigError)  # the CLI's configuration-error boundary (exit code 2)
    assert (error.file, error.line, error.key) == (str(path), 9, "spec.customRules[0].condition")
    assert "rule 'broken-rule'" in error.message
    assert "Syntax error" in error.message and "expression line 1, column 16" in error.message
    assert str(error).startswith(f"{path}:9: spec.customRules[0].condition: ")


@pytest.mark.parametrize(
    ("target", "condition", "expected"),
    [
        ("role", "rol.replicas > 1", "undeclared reference to 'rol.replicas'"),
        ("role", "role.name.shout()", "undeclared reference to 'shout'"),
        ("role", "role.replicas + 1 > 'a'", "no matching overload"),
        ("role", "size(role.zones)", "yields int, but a bool is needed"),
        ("workload", "role.replicas > 1", "undeclared reference to 'role.replicas'"),
        ("role", "'" + "x" * MAX_EXPRESSION_CHARS + "' == ''", "over the limit"),
    ],
)
def test_cel_is_type_checked_at_load(tmp_path: Path, target: str, condition: str, expected: str) -> None:
    path = pack(
        tmp_path,
        "  customRules:\n"
        "  - id: checked\n"
        f"    for: {target}\n"
        "    severity: low\n"
        "    message: m\n"
        f'    condition: "{condition}"\n',
    )
    with pytest.raises(PackError, match=expected) as caught:
        load_packs([path])
    assert caught.value.line == 10 and "rule 'checked'" in caught.value.message


def test_cel_runtime_errors_become_error_entries(tmp_path: Path) -> None:
    model = gpu_model(tmp_path)
    path = pack(
        tmp_path,
        "  customRules:\n"
        "  - id: needs-owner\n"
        "    severity: low\n"
        "    message: m\n"
        "    condition: role.labels['owner'] == 'ml'\n"
        "  - id: not-a-bool\n"
        "    severity: low\n"
        "    message: m\n"
        "    condition: role.name\n"
        "  - id: fine\n"
        "    severity: low\n"
        "    message: m\n"
        "    messageExpression: role.missing\n"
        "    condition: role.name == 'Master'\n",
    )
    findings, errors = evaluate_custom_rules(load_packs([path]), model)
    # The failing rules cost error entries, not the scan; the message falls back to `message`.
    assert [(f.rule, f.target, f.message) for f in findings] == [("fine", "Master", "m")]
    assert [(e.file, e.line, e.field) for e in errors] == [
        (str(path), 9, "spec.customRules[0].condition"),
        (str(path), 9, "spec.customRules[0].condition"),
        (str(path), 13, "spec.customRules[1].condition"),
        (str(path), 13, "spec.customRules[1].condition"),
        (str(path), 17, "spec.customRules[2].messageExpression"),
    ]
    assert errors[0].object == "PyTorchJob ml/big role Master"
    assert "custom rule 'needs-owner': condition failed on PyTorchJob ml/big role Master" in errors[0].message
    assert "owner" in errors[0].message
    assert "returned string, not bool" in errors[2].message


def test_runtime_errors_are_capped_per_rule(tmp_path: Path) -> None:
    jobs = "\n---\n".join(
        f"apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: d{i}, namespace: ns}}\n"
        "spec: {template: {spec: {containers: [{name: c, image: x}]}}}"
        for i in range(MAX_ERRORS_PER_RULE + 5)
    )
    model = gpu_model(tmp_path, jobs)
    path = pack(
        tmp_path, "  customRules:\n  - {id: r, severity: low, message: m, condition: 'role.labels.x == 1'}\n"
    )
    findings, errors = evaluate_custom_rules(load_packs([path]), model)
    assert findings == []
    assert len(errors) == MAX_ERRORS_PER_RULE + 1
    assert "5 more evaluation error(s) not listed" in errors[-1].message


def test_cel_evaluation_is_bounded() -> None:
    hundred = "[" + ", ".join(str(i) for i in range(100)) + "]"
    nested = compile_expression(f"{hundred}.all(x, {hundred}.all(y, x + y >= 0))", ())
    with pytest.raises(CelError, match="budget"):
        nested.evaluate({})
    assert ITERATION_BUDGET == 10_000
    within = compile_expression(f"{hundred}.all(x, [1, 2].all(y, x + y >= 0))", ())
    assert within.evaluate({}) is True


# ---------------------------------------------------------------------------------------------
# Waivers

WAIVER = """
apiVersion: placement-auditor.io/v1
kind: Waiver
metadata: {name: NAME}
spec:
  rule: cross-zone-blocked
  MATCH
  reason: GPU capacity only in zone-a until the coordinator moves
  expires: EXPIRES
  owner: ml-platform@example.com
"""


def waiver(directory: Path, match: str, expires: str = "2026-03-31", name: str = "lab-split") -> Path:
    text = WAIVER.replace("NAME", name).replace("MATCH", match).replace("EXPIRES", expires)
    return write(directory, f"waiver-{name}.yaml", text)


def test_waiver_by_fingerprint(tmp_path: Path) -> None:
    model, findings = seed_lab(tmp_path)
    path = waiver(tmp_path, f"fingerprint: {findings[0].fingerprint}")
    result = apply_pack(findings, model, load_packs([path]), TODAY)
    assert result.findings == ()
    (waived,) = result.waived
    assert waived.finding == findings[0]
    assert waived.waiver.name == "lab-split" and waived.waiver.origin == "document"
    assert waived.waiver.reason.startswith("GPU capacity")
    assert waived.waiver.expires == date(2026, 3, 31)
    assert (waived.waiver.source.file, waived.waiver.source.line) == (str(path), 1)
    assert waived.waiver.to_json()["fingerprint"] == findings[0].fingerprint
    assert result.unused_waivers == () and result.expired == ()


def test_waiver_by_workload(tmp_path: Path) -> None:
    model, findings = seed_lab(tmp_path)
    path = waiver(tmp_path, "workload: {kind: Job, namespace: ml-demo, name: trainer-workers}")
    result = apply_pack(findings, model, load_packs([path]), TODAY)
    assert result.findings == ()
    assert [w.finding for w in result.waived] == findings


def test_a_waiver_applies_through_its_expiry_day_then_the_finding_returns(tmp_path: Path) -> None:
    model, findings = seed_lab(tmp_path)
    loaded = load_packs([waiver(tmp_path, f"fingerprint: {findings[0].fingerprint}", "2026-03-14")])
    assert apply_pack(findings, model, loaded, date(2026, 3, 14)).findings == ()
    result = apply_pack(findings, model, loaded, date(2026, 3, 15))
    assert result.findings == tuple(findings)
    (notice,) = result.expired
    assert notice.finding == findings[0]
    assert notice.waiver.expires == date(2026, 3, 14)
    assert result.waived == () and result.unused_waivers == ()


def test_unused_waivers_are_listed(tmp_path: Path) -> None:
    model, findings = seed_lab(tmp_path)
    stale = waiver(tmp_path, "workload: {kind: Job, namespace: ml-demo, name: gone}", name="stale")
    old = waiver(tmp_path, f"fingerprint: '{'0' * 32}'", "2025-01-01", name="old")
    result = apply_pack(findings, model, load_packs([stale, old]), TODAY)
    assert result.findings == tuple(findings)
    assert [w.name for w in result.unused_waivers] == ["stale", "old"]
    assert result.notes and "2 waiver(s) unused" in result.notes[0]


def test_a_waiver_does_not_hide_findings_of_other_rules(tmp_path: Path) -> None:
    model, findings = seed_lab(tmp_path)
    path = waiver(tmp_path, "workload: {kind: Job, namespace: ml-demo, name: trainer-workers}")
    path.write_text(path.read_text().replace("rule: cross-zone-blocked", "rule: cross-zone-traffic"))
    result = apply_pack(findings, model, load_packs([path]), TODAY)
    assert result.findings == tuple(findings)
    assert [w.rule for w in result.unused_waivers] == ["cross-zone-traffic"]


ANNOTATION_WAIVER = """\
    placement-auditor.io/waive: "cross-zone-blocked, role-unschedulable"
    placement-auditor.io/waive-reason: "accepted until the zone-b GPU pool exists"
    placement-auditor.io/waive-expires: "EXPIRES"
    placement-auditor.io/waive-owner: ml-platform
"""


def test_annotation_waiver(tmp_path: Path) -> None:
    model, findings = seed_lab(tmp_path, annotated(ANNOTATION_WAIVER.replace("EXPIRES", "2026-04-01")))
    assert [f.rule for f in findings] == ["cross-zone-blocked"]
    result = apply_pack(findings, model, load_packs([]), TODAY)
    assert result.findings == ()
    (waived,) = result.waived
    assert waived.waiver.origin == "annotation"
    assert waived.waiver.owner == "ml-platform"
    assert waived.waiver.reason == "accepted until the zone-b GPU pool exists"
    assert waived.waiver.source.file.endswith("workload.yaml") and waived.waiver.source.line == 45
    # role-unschedulable has no finding on the Job: that half of the annotation is unused.
    assert [(w.rule, w.origin) for w in result.unused_waivers] == [("role-unschedulable", "annotation")]
    expired = apply_pack(findings, model, load_packs([]), date(2026, 4, 2))
    assert expired.findings == tuple(findings) and len(expired.expired) == 1


@pytest.mark.parametrize(
    ("annotations", "problem", "line"),
    [
        (
            '    placement-auditor.io/waive: cross-zone-blocked\n    placement-auditor.io/waive-expires: "2026-04-01"\n',
            "has no placement-auditor.io/waive-reason",
            45,
        ),
        (
            "    placement-auditor.io/waive: cross-zone-blocked\n    placement-auditor.io/waive-reason: ok\n",
            "has no placement-auditor.io/waive-expires",
            45,
        ),
        (
            '    placement-auditor.io/waive: cross-zone-blocked\n    placement-auditor.io/waive-reason: ok\n    placement-auditor.io/waive-expires: "April"\n',
            "must be a date as YYYY-MM-DD",
            47,
        ),
        (
            '    placement-auditor.io/waive-reason: ok\n    placement-auditor.io/waive-expires: "2026-04-01"\n',
            "set without placement-auditor.io/waive",
            45,
        ),
    ],
)
def test_malformed_annotation_waiver_hides_nothing_and_is_reported(
    tmp_path: Path, annotations: str, problem: str, line: int
) -> None:
    model, findings = seed_lab(tmp_path, annotated(annotations))
    result = apply_pack(findings, model, load_packs([]), TODAY)
    assert result.findings == tuple(findings)
    (error,) = result.errors
    assert problem in error.message
    assert error.line == line and error.file.endswith("workload.yaml")
    assert error.object == "Job ml-demo/trainer-workers"


def test_annotation_waiver_naming_an_unknown_rule_keeps_the_known_ones(tmp_path: Path) -> None:
    text = ANNOTATION_WAIVER.replace("EXPIRES", "2026-04-01").replace("role-unschedulable", "no-such-rule")
    model, findings = seed_lab(tmp_path, annotated(text))
    result = apply_pack(findings, model, load_packs([]), TODAY)
    assert result.findings == () and len(result.waived) == 1
    (error,) = result.errors
    assert "unknown rule 'no-such-rule'" in error.message


# ---------------------------------------------------------------------------------------------
# Precise errors


@pytest.mark.parametrize(
    ("text", "line", "key", "message"),
    [
        (
            HEADER + "spec:\n  rules:\n    cross-zone-blocked:\n      severty: low\n",
            7,
            "spec.rules.cross-zone-blocked.severty",
            "unknown key (known: enabled, options, scope, severity)",
        ),
        (HEADER + "spec:\n  rulez: {}\n", 5, "spec.rulez", "unknown key"),
        (HEADER + "spec:\n  rules:\n    no-such-rule: {}\n", 6, "spec.rules.no-such-rule", "unknown rule"),
        (
            HEADER + "spec:\n  rules:\n    cross-zone-blocked: {severity: urgent}\n",
            6,
            "spec.rules.cross-zone-blocked.severity",
            "'urgent' is not one of critical, high, medium, low",
        ),
        (
            HEADER + "spec:\n  rules:\n    cross-zone-blocked:\n      scope:\n        namespace: [a]\n",
            8,
            "spec.rules.cross-zone-blocked.scope.namespace",
            "unknown key",
        ),
        (
            HEADER
            + "spec:\n  rules:\n    cross-zone-blocked:\n      scope:\n        labels: {matchLabel: {a: b}}\n",
            8,
            "spec.rules.cross-zone-blocked.scope.labels",
            "unknown field(s) matchLabel",
        ),
        (
            HEADER + "spec:\n  rules:\n    cross-zone-blocked: {options: {depth: 3}}\n",
            6,
            "spec.rules.cross-zone-blocked.options.depth",
            "unknown key (known: fix)",
        ),
        (
            HEADER + "spec:\n  rules:\n    cross-zone-blocked: {enabled: 'no'}\n",
            6,
            "spec.rules.cross-zone-blocked.enabled",
            "must be true or false",
        ),
        (
            HEADER
            + "spec:\n  customRules:\n  - id: r\n    severity: low\n    message: m\n    condition: 'true'\n    when: x\n",
            10,
            "spec.customRules[0].when",
            "unknown key",
        ),
        (
            HEADER
            + "spec:\n  customRules:\n  - id: cross-zone-blocked\n    severity: low\n    message: m\n    condition: 'true'\n",
            6,
            "spec.customRules[0].id",
            "is a built-in rule",
        ),
        (
            HEADER + "spec:\n  customRules:\n  - id: r\n    severity: low\n    condition: 'true'\n",
            6,
            "spec.customRules[0].message",
            "is required",
        ),
        (
            HEADER
            + "spec:\n  customRules:\n  - id: r\n    severity: low\n    message: m\n    condition: 'true'\n    symptoms: [slow]\n",
            10,
            "spec.customRules[0].symptoms[0]",
            "'slow' is not one of blocked, slowdown, cost",
        ),
        (
            "apiVersion: placement-auditor.io/v2\nkind: PolicyPack\n",
            1,
            "apiVersion",
            "must be placement-auditor.io/v1",
        ),
        ("apiVersion: placement-auditor.io/v1\nkind: Policy\n", 2, "kind", "must be PolicyPack or Waiver"),
        (
            WAIVER.replace("NAME", "w").replace("MATCH", "fingerprint: abc").replace("EXPIRES", "2026-01-01"),
            6,
            "spec.fingerprint",
            "32 hex digits",
        ),
        (
            WAIVER.replace("NAME", "w")
            .replace("MATCH", "workload: {kind: Job, name: x}")
            .replace("EXPIRES", "2026-01-01"),
            6,
            "spec.workload.namespace",
            "is required",
        ),
        (
            WAIVER.replace("NAME", "w")
            .replace("MATCH", "fingerprint: " + "a" * 32)
            .replace("EXPIRES", "2026-02-30"),
            8,
            "spec.expires",
            "is not a calendar date",
        ),
        (
            WAIVER.replace("NAME", "w").replace("MATCH", "").replace("EXPIRES", "2026-01-01"),
            5,
            "spec",
            "exactly one of fingerprint and workload",
        ),
        (
            WAIVER.replace("NAME", "w")
            .replace("MATCH", "fingerprint: " + "a" * 32)
            .replace("EXPIRES", "2026-01-01")
            .replace("rule: cross-zone-blocked", "rule: cross-zone-blok"),
            5,
            "spec.rule",
            "unknown rule 'cross-zone-blok'",
        ),
        (HEADER + "spec:\n  rules: [a]\n", 5, "spec.rules", "must be a mapping, not a list"),
        (HEADER + "spec:\n  rules: {cross-zone-blocked: {\n", 6, "(file)", "invalid YAML"),
    ],
)
def test_errors_name_file_line_and_key_path(
    tmp_path: Path, text: str, line: int, key: str, message: str
) -> None:
    path = write(tmp_path, "bad.yaml", text)
    with pytest.raises(PackError) as caught:
        load_packs([path])
    error = caught.value
    assert (error.file, error.line, error.key) == (str(path), line, key), str(error)
    assert message in error.message


def test_duplicate_waiver_names_are_rejected(tmp_path: Path) -> None:
    first = waiver(tmp_path, "fingerprint: " + "a" * 32, name="same")
    second = write(tmp_path, "again.yaml", first.read_text())
    with pytest.raises(PackError, match=f"already defined at {first}:1"):
        load_packs([first, second])


def test_a_rules_entry_may_not_name_a_rule_defined_only_later(tmp_path: Path) -> None:
    early = pack(tmp_path, "  rules:\n    wide-role-across-zones: {severity: low}\n", "early")
    with pytest.raises(PackError, match="unknown rule"):
        load_packs([early, pack(tmp_path, GPU_RULES)])


def test_missing_and_empty_pack_paths_are_errors(tmp_path: Path) -> None:
    with pytest.raises(PackError, match="no such file"):
        load_packs([tmp_path / "absent.yaml"])
    empty = write(tmp_path, "empty.yaml", "# nothing\n")
    with pytest.raises(PackError, match="no PolicyPack or Waiver"):
        load_packs([empty])


def test_a_directory_of_packs_loads_in_name_order(tmp_path: Path) -> None:
    packs = tmp_path / "packs"
    packs.mkdir()
    pack(packs, "  rules:\n    cross-zone-blocked: {severity: low}\n", "b-later")
    pack(packs, "  rules:\n    cross-zone-blocked: {severity: medium}\n", "a-first")
    waiver(packs, "fingerprint: " + "a" * 32)
    loaded = load_packs([packs])
    assert loaded.names == ("default", "a-first", "b-later")
    assert loaded.settings("cross-zone-blocked").severity == "low"
    assert [w.name for w in loaded.waivers] == ["lab-split"]


def test_policy_pack_is_immutable() -> None:
    loaded = load_packs([])
    assert isinstance(loaded, PolicyPack)
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded.names = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        loaded.rules["cross-zone-blocked"] = loaded.rules["traffic-blocked"]  # type: ignore[index]
