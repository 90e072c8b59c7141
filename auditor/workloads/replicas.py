"""Per-replica labels: the labels a controller sets on each pod with a value of its own
(StatefulSet `statefulset.kubernetes.io/pod-name`, `apps.kubernetes.io/pod-index`, an Indexed
Job's `batch.kubernetes.io/job-completion-index`, JobSet, Kubeflow, LeaderWorkerSet and Volcano
indexes), and the split of a role into the classes of replicas the inventory's selectors tell apart.

A role is one pod template × replica count, so it has one label set. Where no Service, policy or
affinity term reads a per-replica key, that is exact and roles stay whole (nothing is computed per
replica). Where one does, the role is split, at inventory time, into sub-roles: the replicas for
which every comparison those selectors make on per-replica keys (`pod-name == trainer-0`, Calico
`starts with`, ...) comes out the same form one class, with the labels of its lowest index. Each
selector then selects whole sub-roles, so `Worker[0]` ×1 and `Worker[1-7]` ×7 get their own edges,
placements and verdicts. Sub-roles keep the role's name (patches and built-in edges find them by
it); findings name them with their indexes (`Role.label`). Pure.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from auditor.model.objects import ReplicaClass, ReplicaTest, Role, Service, Workload

POD_NAME = "statefulset.kubernetes.io/pod-name"
POD_INDEX = "apps.kubernetes.io/pod-index"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
KUBEFLOW_INDEX = "training.kubeflow.org/replica-index"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
VOLCANO_INDEX = "volcano.sh/task-index"
# The PodIndexLabel feature gate (beta, on by default) makes the StatefulSet and Job
# controllers set the index labels from Kubernetes 1.28; before, the Job index was an annotation.
POD_INDEX_LABEL_SINCE = (1, 28)
# Splitting enumerates a role's replicas once; past this many the role stays whole (and a note says so).
MAX_SPLIT_REPLICAS = 100_000
_PART_RUNS = 4  # index runs shown in a sub-role's label before "…"

_QUOTED = r"""(['"])(.*?)\{q}"""


def _calico_tests(text: str, keys: frozenset[str]) -> Iterator[ReplicaTest]:
    """Comparisons on per-replica keys in a Calico selector expression."""
    for key in keys:
        if key not in text:
            continue
        k = re.escape(key)
        for m in re.finditer(rf"{k}\s*(==|!=)\s*{_QUOTED.format(q=2)}", text):
            yield ReplicaTest(key, "==", m.group(3))
        for m in re.finditer(rf"{k}\s+(?:not\s+)?in\s*\{{([^}}]*)\}}", text):
            for lit in re.finditer(r"""(['"])(.*?)\1""", m.group(1)):
                yield ReplicaTest(key, "==", lit.group(2))
        for m in re.finditer(rf"{k}\s+(starts with|ends with|contains)\s*{_QUOTED.format(q=2)}", text):
            yield ReplicaTest(key, m.group(1), m.group(3))


def _plain(key: str) -> str:
    """A label key without a Cilium source prefix (`k8s:`, `any:`)."""
    return key.rpartition(":")[2]


def tests_in(tree: Any, keys: frozenset[str]) -> Iterator[ReplicaTest]:
    """Comparisons on per-replica `keys` anywhere in a manifest subtree: matchLabels-style
    mappings (`{key: value}`), matchExpressions (`{key: ..., values: [...]}`) and selector strings.
    Walked with a stack (every policy of a large repository passes through here)."""
    found: list[ReplicaTest] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            if any(k in node for k in keys):
                found.extend(_calico_tests(node, keys))
        elif isinstance(node, (dict, Mapping)):  # dict first: cheaper than the ABC's test
            expr_key = node.get("key")
            if isinstance(expr_key, str) and _plain(expr_key) in keys:
                found.extend(ReplicaTest(_plain(expr_key), "==", str(v)) for v in node.get("values") or ())
            for k, v in node.items():
                # (`k in keys` first: most keys are no replica key and carry no source prefix)
                mentioned = k in keys or (isinstance(k, str) and ":" in k and _plain(k) in keys)
                if isinstance(v, str):  # strings first: most values, and no ABC check for them
                    if mentioned:
                        found.append(ReplicaTest(_plain(k), "==", v))
                    if "/" in v:
                        stack.append(v)
                elif isinstance(v, (dict, list)):
                    stack.append(v)
                elif isinstance(v, int):
                    if mentioned:
                        found.append(ReplicaTest(_plain(k), "==", str(v)))
                elif isinstance(v, Mapping):
                    stack.append(v)
    return iter(found)


def replica_keys(workloads: Iterable[Workload]) -> frozenset[str]:
    return frozenset(rl.key for w in workloads for r in w.roles for rl in r.replica_labels)


def mentioned_tests(
    workloads: Sequence[Workload],
    services: Sequence[Service],
    policies: Iterable[Any],
    keys: frozenset[str] | None = None,
) -> frozenset[ReplicaTest]:
    """Every comparison on a per-replica key (`keys`; default: those of `workloads`) made by a
    Service selector, a policy manifest (`policies`: their raw objects) or a pod affinity /
    topology spread term of a workload."""
    keys = replica_keys(workloads) if keys is None else keys
    if not keys:
        return frozenset()
    found: set[ReplicaTest] = set()
    for svc in services:
        found.update(ReplicaTest(k, "==", v) for k, v in svc.selector if k in keys)
    for obj in policies:
        found.update(tests_in(obj, keys))
    for w in workloads:
        for r in w.roles:
            for selector in r.template.scheduling.selectors:
                found.update(
                    ReplicaTest(req.key, "==", v)
                    for req in selector.requirements
                    if req.key in keys
                    for v in req.values
                )
    return frozenset(found)


def _runs(indexes: Sequence[int]) -> str:
    runs: list[str] = []
    start = prev = indexes[0]
    for i in [*indexes[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    shown = ",".join(runs[:_PART_RUNS])
    return shown + (",…" if len(runs) > _PART_RUNS else "")


def split_role(role: Role, tests: Sequence[ReplicaTest], version: tuple[int, int]) -> list[Role]:
    """The role as the classes of replicas `tests` tell apart (itself when they tell none apart,
    with the labels its replicas share added where a selector reads them)."""
    labels = [rl for rl in role.replica_labels if rl.since <= version]
    keys = {rl.key for rl in labels}
    tests = sorted({t for t in tests if t.key in keys}, key=lambda t: (t.key, t.op, t.literal))
    if not tests or role.replicas < 1 or role.replicas > MAX_SPLIT_REPLICAS:
        return [role]
    read = [rl for rl in labels if any(t.key == rl.key for t in tests)]
    classes: dict[tuple[bool, ...], list[int]] = {}
    for i in range(role.replicas):
        values = {rl.key: rl.value(i) for rl in read}
        classes.setdefault(tuple(t.holds(values) for t in tests), []).append(i)
    out = []
    for outcome, indexes in classes.items():
        first = indexes[0]
        own = dict(role.template.labels)
        own.update({rl.key: rl.value(first) for rl in labels})
        template = dataclasses.replace(role.template, labels=tuple(sorted(own.items())))
        cls = ReplicaClass(tuple(tests), outcome, first, _runs(indexes)) if len(classes) > 1 else None
        out.append(dataclasses.replace(role, replicas=len(indexes), template=template, replica_class=cls))
    return out


def split_workloads(
    workloads: Sequence[Workload], tests: Iterable[ReplicaTest], version: tuple[int, int]
) -> tuple[list[Workload], list[tuple[str, str]]]:
    """Workloads with every role some test reads split; untouched workloads are returned as they
    are. Notes come as (file of the workload, note)."""
    by_key: dict[str, list[ReplicaTest]] = {}
    for t in tests:
        by_key.setdefault(t.key, []).append(t)
    if not by_key:
        return list(workloads), []
    out: list[Workload] = []
    notes: list[tuple[str, str]] = []
    for w in workloads:
        roles: list[Role] = []
        changed = False
        for r in w.roles:
            wanted = [t for rl in r.replica_labels for t in by_key.get(rl.key, ())]
            if not wanted:
                roles.append(r)
                continue
            if r.replicas > MAX_SPLIT_REPLICAS:
                notes.append(
                    (
                        r.workload.source.file,
                        f"{r}: selectors read per-replica labels, but its {r.replicas} replicas are "
                        f"more than {MAX_SPLIT_REPLICAS}: audited as one role",
                    )
                )
            parts = split_role(r, wanted, version)
            changed = changed or parts != [r]
            roles.extend(parts)
        out.append(dataclasses.replace(w, roles=tuple(roles)) if changed else w)
    return out, notes


def replica_holding(parts: Sequence[Role], index: int) -> Role | None:
    """The sub-role (of one role's `parts`) that replica `index` belongs to."""
    for p in parts:
        if p.replica_class is None:
            return p if index < p.replicas or len(parts) == 1 else None
        if p.replica_class.holds(p.replica_labels_of(index)):
            return p
    return None
