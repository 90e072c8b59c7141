"""Read a pod template (metadata + spec) into a PodTemplate, naming the field of any problem."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from auditor.model.objects import PodTemplate, Toleration, freeze_labels
from auditor.reachability import specs
from auditor.reachability.endpoints import NamedPort
from auditor.reachability.ports import normalise_protocol
from auditor.reachability.specs import PolicyError
from auditor.workloads.scheduling import parse_scheduling


def parse_pod_template(
    template: Any, field: str, extra_labels: Mapping[str, str] | None = None
) -> PodTemplate:
    body = specs.mapping(template, field)
    meta = specs.mapping(body.get("metadata"), f"{field}.metadata")
    spec = specs.mapping(body.get("spec"), f"{field}.spec")
    return parse_pod(meta, spec, field, extra_labels)


def parse_pod(
    meta: Mapping[str, Any],
    spec: Mapping[str, Any],
    field: str,
    extra_labels: Mapping[str, str] | None = None,
) -> PodTemplate:
    # A Pod object is read from its root (field ""), a template from e.g. "spec.template".
    at = f"{field}." if field else ""
    labels = dict(specs.mapping(meta.get("labels"), f"{at}metadata.labels"))
    for k, v in labels.items():
        if isinstance(v, (dict, list)):
            raise PolicyError(f"{at}metadata.labels.{k}", "label value must be a string")
    if extra_labels:
        labels.update(extra_labels)
    annotations = specs.mapping(meta.get("annotations"), f"{at}metadata.annotations")
    node_selector = specs.mapping(spec.get("nodeSelector"), f"{at}spec.nodeSelector")
    tolerations = []
    for i, t in enumerate(specs.seq(spec.get("tolerations"), f"{at}spec.tolerations")):
        tb = specs.mapping(t, f"{at}spec.tolerations[{i}]")
        op = str(tb.get("operator") or "Equal")
        if op not in ("Equal", "Exists"):
            raise PolicyError(f"{at}spec.tolerations[{i}].operator", f"must be Equal or Exists, got {op!r}")
        tolerations.append(
            Toleration(str(tb.get("key") or ""), op, str(tb.get("value") or ""), str(tb.get("effect") or ""))
        )
    named: list[NamedPort] = []
    declared: list[tuple[str, int]] = []
    requests: list[tuple[tuple[str, str], ...]] = []
    containers = [
        (f"{at}spec.containers[{i}]", c)
        for i, c in enumerate(specs.seq(spec.get("containers"), f"{at}spec.containers"))
    ]
    sidecars = [  # init containers with restartPolicy Always keep running and serve ports
        (f"{at}spec.initContainers[{i}]", c)
        for i, c in enumerate(specs.seq(spec.get("initContainers"), f"{at}spec.initContainers"))
        if isinstance(c, Mapping) and c.get("restartPolicy") == "Always"
    ]
    for cf, c in [*containers, *sidecars]:
        cb = specs.mapping(c, cf)
        for j, p in enumerate(specs.seq(cb.get("ports"), f"{cf}.ports")):
            pb = specs.mapping(p, f"{cf}.ports[{j}]")
            if "containerPort" not in pb:
                raise PolicyError(f"{cf}.ports[{j}].containerPort", "is required")
            port = specs.integer(pb.get("containerPort"), f"{cf}.ports[{j}].containerPort", 1, 65535)
            proto = normalise_protocol(pb.get("protocol") or "TCP")
            if proto is None:
                raise PolicyError(
                    f"{cf}.ports[{j}].protocol", f"must be TCP, UDP or SCTP, got {pb.get('protocol')!r}"
                )
            declared.append((proto, port))
            if pb.get("name"):
                named.append(NamedPort(str(pb["name"]), proto, port))
        res = specs.mapping(cb.get("resources"), f"{cf}.resources")
        req = specs.mapping(res.get("requests"), f"{cf}.resources.requests")
        lim = specs.mapping(res.get("limits"), f"{cf}.resources.limits")
        # A request defaults to the limit when absent (as for nvidia.com/gpu).
        requests.append(tuple(sorted((str(k), str(v)) for k, v in {**lim, **req}.items())))
    frozen_labels = freeze_labels(labels)
    return PodTemplate(
        labels=frozen_labels,
        annotations=freeze_labels(annotations),
        node_selector=freeze_labels(node_selector),
        scheduling=parse_scheduling(spec, dict(frozen_labels), f"{at}spec"),
        tolerations=tuple(tolerations),
        named_ports=tuple(named),
        container_ports=tuple(declared),
        service_account=str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"),
        host_network=bool(spec.get("hostNetwork")),
        node_name=str(spec["nodeName"]) if spec.get("nodeName") else None,
        requests=tuple(requests),
        spec=spec,
    )
