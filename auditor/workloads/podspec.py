"""Read a pod template (metadata + spec) into a PodTemplate, naming the field of any problem.

Fields the API types loosely or no filter needs exact (env, command, args, volumes, sysctls, init
containers) are read leniently: a malformed item is skipped, not an error, so a workload still audits.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from auditor.model.objects import (
    Claim,
    Container,
    NamedPort,
    PodRequests,
    PodTemplate,
    Toleration,
    freeze_labels,
)
from auditor.placement.resources import CPU, HUGEPAGES_PREFIX, MEMORY, ResourceList, parse_quantity
from auditor.reachability import specs
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
    tolerations = parse_tolerations(spec.get("tolerations"), f"{at}spec.tolerations")
    named: list[NamedPort] = []
    declared: list[tuple[str, int]] = []
    requests: list[tuple[tuple[str, str], ...]] = []
    app = specs.seq(spec.get("containers"), f"{at}spec.containers")
    init = specs.seq(spec.get("initContainers"), f"{at}spec.initContainers")
    containers = [(f"{at}spec.containers[{i}]", c) for i, c in enumerate(app)]
    sidecars = [  # init containers with restartPolicy Always keep running and serve ports
        (f"{at}spec.initContainers[{i}]", c)
        for i, c in enumerate(init)
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
        pod_requests=pod_requests(spec),
        claims=tuple(_claims(spec.get("volumes"))),
        sysctls=_sysctls(spec.get("securityContext")),
        resource_claims=_resource_claims(spec.get("resourceClaims"), f"{at}spec.resourceClaims"),
        containers=tuple(_container(c) for c in app if isinstance(c, Mapping)),
        init_containers=tuple(_container(c) for c in init if isinstance(c, Mapping)),
    )


def parse_tolerations(raw: Any, field: str) -> list[Toleration]:
    """A list of tolerations (a pod's, a Kueue ResourceFlavor's): `field` names the list."""
    out = []
    for i, t in enumerate(specs.seq(raw, field)):
        tb = specs.mapping(t, f"{field}[{i}]")
        op = str(tb.get("operator") or "Equal")
        if op not in ("Equal", "Exists"):
            raise PolicyError(f"{field}[{i}].operator", f"must be Equal or Exists, got {op!r}")
        out.append(
            Toleration(str(tb.get("key") or ""), op, str(tb.get("value") or ""), str(tb.get("effect") or ""))
        )
    return out


def _container(body: Mapping[str, Any]) -> Container:
    env = body.get("env")
    return Container(
        name=str(body.get("name") or ""),
        env=tuple(
            (str(e.get("name", "")), e["value"])
            for e in (env if isinstance(env, list) else ())
            if isinstance(e, Mapping) and isinstance(e.get("value"), str)
        ),
        command=_strings(body.get("command")),
        args=_strings(body.get("args")),
        restart_policy=str(body.get("restartPolicy") or ""),
    )


def _strings(raw: Any) -> tuple[str, ...]:
    return tuple(a for a in raw if isinstance(a, str)) if isinstance(raw, list) else ()


def _claims(volumes: Any) -> list[Claim]:
    out: list[Claim] = []
    for v in volumes if isinstance(volumes, list) else []:
        pvc = v.get("persistentVolumeClaim") if isinstance(v, Mapping) else None
        if isinstance(pvc, Mapping) and pvc.get("claimName"):
            out.append(Claim(str(pvc["claimName"])))
    return out


def _resource_claims(raw: Any, field: str) -> tuple[tuple[str, str, str], ...]:
    """spec.resourceClaims: each names a ResourceClaim (shared by every pod naming it) or a
    ResourceClaimTemplate (one claim per pod), never both (the API server's validation)."""
    out: list[tuple[str, str, str]] = []
    for i, item in enumerate(specs.seq(raw, field)):
        body = specs.mapping(item, f"{field}[{i}]")
        name = str(body.get("name") or "")
        if not name:
            raise PolicyError(f"{field}[{i}].name", "is required")
        claim = str(body.get("resourceClaimName") or "")
        template = str(body.get("resourceClaimTemplateName") or "")
        if bool(claim) == bool(template):
            raise PolicyError(
                f"{field}[{i}]", "must set exactly one of resourceClaimName and resourceClaimTemplateName"
            )
        out.append((name, claim, template))
    return tuple(out)


def _sysctls(context: Any) -> tuple[tuple[str, str], ...]:
    sysctls = context.get("sysctls") if isinstance(context, Mapping) else None
    return tuple(
        (str(item.get("name")), str(item.get("value", "")))
        for item in (sysctls if isinstance(sysctls, list) else ())
        if isinstance(item, Mapping)
    )


def pod_requests(spec: Mapping[str, Any]) -> PodRequests:
    """The pod's effective requests as kube-scheduler computes them (`resourcehelper.PodRequests`):
    the sum of app containers and running sidecars, raised to the largest init container (each one
    counted with the sidecars started before it), pod-level requests (`spec.resources`) replacing
    cpu/memory/hugepages, plus `spec.overhead`."""
    try:
        result: ResourceList = {}
        for i, c in enumerate(_list(spec, "containers")):
            _add(result, _container_requests(c, f"spec.containers[{i}]"))
        # Init containers run one at a time; sidecars (restartPolicy Always) keep running after
        # they start, so each later init container runs alongside the sidecars declared before it.
        sidecars: ResourceList = {}
        init_peak: ResourceList = {}
        for i, c in enumerate(_list(spec, "initContainers")):
            req = _container_requests(c, f"spec.initContainers[{i}]")
            if isinstance(c, Mapping) and c.get("restartPolicy") == "Always":
                _add(result, req)
                _add(sidecars, req)
                _max(init_peak, sidecars)
            else:
                running = dict(req)
                _add(running, sidecars)
                _max(init_peak, running)
        _max(result, init_peak)
        _apply_pod_level(result, spec)
        _add(result, _resource_list(spec.get("overhead"), "spec.overhead"))
    except ValueError as e:
        return PodRequests(error=str(e))
    return PodRequests(tuple(result.items()))


def _list(spec: Mapping[str, Any], key: str) -> list[Any]:
    raw = spec.get(key)
    return list(raw) if isinstance(raw, list) else []


def _is_pod_level_resource(name: str) -> bool:
    return name in (CPU, MEMORY) or name.startswith(HUGEPAGES_PREFIX)


def _add(into: ResourceList, other: Mapping[str, Fraction]) -> None:
    for k, v in other.items():
        into[k] = into[k] + v if k in into else v  # no Fraction(0) to add to: it is slow to make


def _max(into: ResourceList, other: Mapping[str, Fraction]) -> None:
    for k, v in other.items():
        if k not in into or v > into[k]:
            into[k] = v


def _resource_list(raw: Any, where: str) -> ResourceList:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: must be a mapping of resource to quantity")
    out: ResourceList = {}
    for k, v in raw.items():
        try:
            out[str(k)] = parse_quantity(v)
        except ValueError as e:
            raise ValueError(f"{where}.{k}: {e}") from None
    return out


def _container_requests(container: Any, where: str) -> ResourceList:
    """A container's requests, its limits filling requests that are absent (API defaulting)."""
    if not isinstance(container, Mapping):
        return {}
    res = container.get("resources")
    if not isinstance(res, Mapping):
        return {}
    limits = _resource_list(res.get("limits"), f"{where}.resources.limits")
    requests = _resource_list(res.get("requests"), f"{where}.resources.requests")
    return {**limits, **requests}


def _apply_pod_level(result: ResourceList, spec: Mapping[str, Any]) -> None:
    """Pod-level `spec.resources` (PodLevelResources, on by default since 1.34) for cpu/memory/hugepages.

    API defaulting first: a pod-level limit without a pod-level request defaults the request to the
    containers' aggregate when some container requests that resource, else to the limit.
    """
    res = spec.get("resources")
    if not isinstance(res, Mapping):
        return
    requests = _resource_list(res.get("requests"), "spec.resources.requests")
    limits = _resource_list(res.get("limits"), "spec.resources.limits")
    for name, limit in limits.items():
        if name not in requests and name not in result and _is_pod_level_resource(name):
            requests[name] = limit
    for name, quantity in requests.items():
        if _is_pod_level_resource(name):
            result[name] = quantity
