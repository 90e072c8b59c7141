"""The YAML editor and the patch templates against hostile values: nothing can be injected."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from auditor.model.objects import Taint
from auditor.remediation import render, yamledit

DOC = "# keep me\nkind: Pod\nmetadata:\n  labels: {app: x, zone: zone-b}   # trailing\nspec:\n  containers: []\n"
HOSTILE = "zone-a\nprivileged: true"


@pytest.mark.parametrize(
    "value", [HOSTILE, "'; rm -rf /", "{{ 7*7 }}", "yes", "1.5", "a: b", "- item", "#x", "ü"]
)
def test_scalars_read_back_exactly(value: str) -> None:
    out = yamledit.set_scalar(DOC, yamledit.locate(DOC, 2), ["metadata", "labels", "zone"], value)
    data = yaml.safe_load(out)
    assert data["metadata"]["labels"] == {"app": "x", "zone": value}
    assert "privileged" not in data and set(data) == {"kind", "metadata", "spec"}
    assert out.startswith("# keep me\n") and out.splitlines()[3].endswith("   # trailing")


def test_templates_keep_hostile_values_as_data() -> None:
    data = render.render(
        "pin-zone",
        zone_key="topology.kubernetes.io/zone",
        zone=HOSTILE,
        tolerations=[render.toleration(Taint("gpu", "present\nprivileged: true", "NoSchedule"))],
    )
    expr = data["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"
    ][0]
    assert expr["values"] == [HOSTILE]
    assert data["tolerations"][0]["value"] == "present\nprivileged: true"
    inserted = yamledit.insert_keys(
        DOC, yamledit.locate(DOC, 2), ["spec"], render.block({"tolerations": data["tolerations"]})
    )
    assert yaml.safe_load(inserted)["spec"]["tolerations"][0]["value"] == "present\nprivileged: true"


def test_the_sandbox_and_strict_undefined(tmp_path: Path) -> None:
    (tmp_path / "pin-zone.yaml.j2").write_text("x: {{ ''.__class__.__mro__[1].__subclasses__() }}\n")
    with pytest.raises(render.RenderError, match="SecurityError"):
        render.render("pin-zone", render.environment(tmp_path), zone="a", zone_key="k", tolerations=[])
    (tmp_path / "pin-zone.yaml.j2").write_text("nodeAffinity: {{ missing | tojson }}\n")
    with pytest.raises(render.RenderError, match="Undefined"):
        render.render("pin-zone", render.environment(tmp_path), zone="a", zone_key="k", tolerations=[])
    (tmp_path / "pin-zone.yaml.j2").write_text("privileged: true\n")
    with pytest.raises(render.RenderError, match="unexpected"):
        render.render("pin-zone", render.environment(tmp_path), zone="a", zone_key="k", tolerations=[])


def test_aliases_and_missing_paths_are_refused() -> None:
    doc = "base: &b {zone: zone-a}\nitems:\n- *b\n"
    with pytest.raises(yamledit.EditError, match="anchor"):
        yamledit.set_scalar(doc, yamledit.locate(doc, 1), ["base", "zone"], "zone-b")
    with pytest.raises(yamledit.EditError, match="does not exist"):
        yamledit.set_scalar(DOC, yamledit.locate(DOC, 2), ["metadata", "annotations", "x"], "y")
