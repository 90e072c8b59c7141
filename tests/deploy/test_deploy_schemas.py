"""Every rendered object validated offline: built-in kinds against the Kubernetes JSON schemas that
kubernetes-validate bundles (strict: unknown fields are errors), the Prometheus Operator kinds
(ServiceMonitor, PrometheusRule) against the models cloudcoil generates from the operator's CRD
schemas, with unknown fields detected by a round trip. No network."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from deploysupport import kubectl, render_variant

pytestmark = pytest.mark.skipif(kubectl() is None, reason="kubectl is installed by .ci/run")
kv = pytest.importorskip(
    "kubernetes_validate.utils", reason="kubernetes-validate is in the dev extras: pip install -e '.[dev]'"
)

# The oldest Kubernetes minor the manifests support, and the newest the package has schemas for.
VERSIONS = ("1.29.0", kv.latest_version())
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}


def validate_builtin(obj: dict[str, Any]) -> None:
    for version in VERSIONS:
        try:
            kv.validate(obj, version, strict=True)
        except kv.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            pytest.fail(
                f"{obj['kind']} {obj['metadata']['name']} (Kubernetes {version}): {path}: {exc.message}"
            )


def validate_crd(obj: dict[str, Any]) -> None:
    v1 = pytest.importorskip(
        "cloudcoil.models.prometheus_operator.v1",
        reason="cloudcoil.models.prometheus_operator is in the dev extras: pip install -e '.[dev]'",
    )
    model = getattr(v1, obj["kind"])
    parsed = model.model_validate(obj)  # types, required fields, patterns, enums of the CRD schema
    # The models ignore unknown fields (as a server prunes them): any field lost in the round trip
    # is one the CRD does not have.
    again = parsed.model_dump(by_alias=True, exclude_unset=True, mode="json")
    assert again == obj, f"{obj['kind']} {obj['metadata']['name']} has fields its CRD does not define"


def validate_all(objs: list[dict[str, Any]]) -> set[str]:
    kinds = set()
    for obj in objs:
        if (obj["apiVersion"], obj["kind"]) in CRD_KINDS:
            validate_crd(obj)
        else:
            validate_builtin(obj)  # a kind without a bundled schema raises SchemaNotFoundError
        kinds.add(obj["kind"])
    return kinds


@pytest.mark.parametrize("overlay", ["sqlite", "postgres"])
def test_every_rendered_object_matches_its_schema(rendered: dict[str, list[dict]], overlay: str) -> None:
    kinds = validate_all(rendered[overlay])
    assert {
        "Deployment",
        "Service",
        "NetworkPolicy",
        "ClusterRole",
        "Role",
        "ServiceMonitor",
        "PrometheusRule",
    } <= kinds


def test_components_match_their_schemas(tmp_path: Path) -> None:
    for i, component in enumerate(("cilium-namespace", "cilium-config-any-namespace")):
        where = tmp_path / str(i)
        where.mkdir()
        validate_all(render_variant(where, "sqlite", [component]))


def test_the_validators_reject_broken_objects(rendered: dict[str, list[dict]]) -> None:
    objs = rendered["postgres"]
    deploy = next(o for o in objs if o["kind"] == "Deployment")
    typo = copy.deepcopy(deploy)
    typo["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFileSystem"] = True
    with pytest.raises(kv.ValidationError):
        kv.validate(typo, VERSIONS[0], strict=True)
    wrong = copy.deepcopy(deploy)
    wrong["spec"]["replicas"] = "two"
    with pytest.raises(kv.ValidationError):
        kv.validate(wrong, VERSIONS[0], strict=True)
    monitor = next(o for o in objs if o["kind"] == "ServiceMonitor")
    bad_interval = copy.deepcopy(monitor)
    bad_interval["spec"]["endpoints"][0]["interval"] = "one minute"
    with pytest.raises(Exception, match="interval"):
        validate_crd(bad_interval)
    unknown = copy.deepcopy(monitor)
    unknown["spec"]["endpoints"][0]["pth"] = "/metrics"
    with pytest.raises(AssertionError, match="fields its CRD does not define"):
        validate_crd(unknown)
    rule = next(o for o in objs if o["kind"] == "PrometheusRule")
    no_expr = copy.deepcopy(rule)
    del no_expr["spec"]["groups"][0]["rules"][0]["expr"]
    with pytest.raises(Exception, match="expr"):
        validate_crd(no_expr)
