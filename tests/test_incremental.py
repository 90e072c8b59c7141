"""Incremental scans (auditor/sources/incremental.py): after any change to a tree, a scan through
the snapshot reports byte for byte what a cold scan reports, and audits again only what the change
reaches (a workload or policy edit: its namespace's unit and those that read it; the cluster part:
everything)."""

from __future__ import annotations

import os
import random
import re
import shutil
from collections.abc import Callable
from datetime import date
from pathlib import Path

import pytest

from auditor.audit.scan import scan
from auditor.cache import DocumentCache
from auditor.cli import main
from auditor.reports import json_report
from auditor.resources import examples_dir
from auditor.rules.packs import PolicyPack, load_packs
from auditor.settings.config import Settings, load_settings
from auditor.sources import units
from auditor.sources.incremental import ScanStats, TreeAuditor
from auditor.sources.manifests import load_inventory
from tests.support import age_tree, disk_now_ns

TODAY = date(2026, 6, 1)


class Tree:
    """A tree scanned cold and through one cache, the two reports compared each time."""

    def __init__(
        self, root: Path, cache: Path, settings: Settings | None = None, packs: tuple[Path, ...] = ()
    ) -> None:
        self.root, self.cache = root, cache
        self.settings = settings or Settings()
        self.packs = packs
        self.pack: PolicyPack = load_packs(list(packs))

    def cold(self) -> str:
        inv = load_inventory([self.root], self.settings)
        return json_report.render(scan(inv, self.pack, TODAY))

    def check(self, what: str = "") -> ScanStats:
        tree = TreeAuditor(DocumentCache(self.cache), self.settings, self.pack, self.packs)
        result = tree.scan([self.root], TODAY)
        assert result is not None, f"{what}: the tree was not scanned through its snapshot"
        got = json_report.render(result)
        expected = self.cold()
        assert got == expected, f"{what}: the scan through the snapshot differs from a cold scan"
        return tree.stats

    def files(self, pattern: str) -> list[Path]:
        return sorted(p for p in self.root.rglob("*.yaml") if re.search(pattern, p.read_text()))


def edit(path: Path, change: Callable[[str], str]) -> None:
    text = path.read_text()
    new = change(text)
    assert new != text, f"{path}: the edit changed nothing"
    path.write_text(new)


def first_sub(pattern: str, replacement: str | Callable[[re.Match[str]], str]) -> Callable[[str], str]:
    return lambda text: re.sub(pattern, replacement, text, count=1)


def fewer_replicas(match: re.Match[str]) -> str:
    n = int(match.group(1))
    return f"replicas: {n - 1 if n > 1 else 2}"


def test_each_kind_of_change_gives_the_cold_report(repo: Path, tmp_path: Path) -> None:
    tree = Tree(repo, tmp_path / "cache")
    first = tree.check("first scan")
    assert first.mode == "full" and first.units > 10
    assert tree.check("nothing changed").mode == "unchanged"
    total = first.units

    job = tree.files(r"kind: PyTorchJob")[0]
    edit(job, first_sub(r"replicas: (\d+)", fewer_replicas))
    stats = tree.check("a workload's replicas")
    assert stats.mode == "incremental" and 0 < stats.units_audited < total / 2

    service = tree.files(r"kind: Service\n")[0]
    edit(service, first_sub(r"(selector:\n\s+app: )(\S+)", r"\1nobody"))
    assert tree.check("a Service selects nothing").mode == "incremental"

    policy = tree.files(r"kind: NetworkPolicy")[-1]
    namespace = re.search(r"namespace: (\S+)", policy.read_text())
    assert namespace is not None
    deny = policy.parent / "deny-everything.yaml"
    deny.write_text(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n"
        f"metadata: {{name: deny-everything, namespace: {namespace.group(1)}}}\n"
        "spec: {podSelector: {}, policyTypes: [Ingress, Egress]}\n"
    )
    assert tree.check("a policy denying a namespace is added").mode == "incremental"
    deny.rename(deny.with_name("renamed.yaml"))
    assert tree.check("a file is renamed").mode == "incremental"
    deny.with_name("renamed.yaml").unlink()
    assert tree.check("a file is removed").mode == "incremental"

    deployment = tree.files(r"kind: Deployment")[3]
    edit(deployment, first_sub(r"(\n\s+labels:\n\s+app: )(\S+)", r"\1relabelled"))
    assert tree.check("a workload's pod labels").mode == "incremental"

    copy = job.with_name("copy-" + job.name)
    copy.write_text(re.sub(r"(\nmetadata:\n\s+name: )(\S+)", r"\1copied-job", job.read_text(), count=1))
    assert tree.check("a workload is added").mode == "incremental"

    moved = tree.files(r"kind: Deployment")[5]
    here = re.search(r"namespace: (\S+)", moved.read_text())
    there = re.search(r"namespace: (\S+)", tree.files(r"kind: PyTorchJob")[-1].read_text())
    assert here and there and here.group(1) != there.group(1)
    edit(moved, lambda t: t.replace(f"namespace: {here.group(1)}", f"namespace: {there.group(1)}"))
    assert tree.check("a workload moves to another namespace").mode == "incremental"

    other = repo / "clusters" / "new-team" / "new-ns" / "app.yaml"
    other.parent.mkdir(parents=True)
    other.write_text(re.sub(r"namespace: \S+", "namespace: brand-new", job.read_text()))
    assert tree.check("a new namespace's first file").mode == "incremental"

    node = tree.files(r"kind: Node\n")[0]
    edit(node, first_sub(r"topology.kubernetes.io/zone: (\S+)", "topology.kubernetes.io/zone: us-east-1z"))
    assert tree.check("a node moves zone").mode == "full"

    namespaces = repo / "clusters" / "platform" / "namespaces.yaml"
    edit(namespaces, lambda t: t + "\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: extra}\n")
    assert tree.check("a namespace is added (the cluster part)").mode == "full"
    assert tree.check("nothing changed since").mode == "unchanged"


def test_references_across_namespaces(repo: Path, tmp_path: Path) -> None:
    """A workload naming another namespace's Service gets an edge there: editing that namespace's
    policies re-audits the workload's namespace too, and the target lists who reaches it."""
    tree = Tree(repo, tmp_path / "cache")
    tree.check("first scan")
    services = tree.files(r"kind: Service\n")
    target = services[0]
    text = target.read_text()
    name = re.search(r"\nmetadata:\n\s+name: (\S+)", text)
    namespace = re.search(r"namespace: (\S+)", text)
    assert name and namespace
    client = next(
        p
        for p in tree.files(r"kind: Deployment")
        if f"namespace: {namespace.group(1)}" not in p.read_text() and "env:" in p.read_text()
    )
    host = f"http://{name.group(1)}.{namespace.group(1)}.svc.cluster.local:8080"
    edit(client, first_sub(r"(\n(\s+)env:\n)", rf"\1\2- name: TARGET_URL\n\2  value: {host}\n"))
    stats = tree.check("a workload names another namespace's Service")
    assert stats.mode == "incremental"
    deny = target.parent / "deny-ingress.yaml"
    deny.write_text(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n"
        f"metadata: {{name: deny-ingress, namespace: {namespace.group(1)}}}\n"
        "spec: {podSelector: {}, policyTypes: [Ingress]}\n"
    )
    report = tree.cold()
    assert "deny-ingress" in report  # the client's edge is denied now: its finding names the policy
    assert tree.check("the target's namespace denies ingress").mode == "incremental"


def test_what_the_whole_tree_contributes(repo: Path, tmp_path: Path) -> None:
    """Per-replica comparisons and the CNI the policy kinds imply are facts of the whole tree:
    when one changes, every unit is audited again."""
    tree = Tree(repo, tmp_path / "cache")
    tree.check("first scan")
    statefulset = tree.files(r"kind: StatefulSet")[0]
    name = re.search(r"\nmetadata:\n\s+name: (\S+)", statefulset.read_text())
    namespace = re.search(r"namespace: (\S+)", statefulset.read_text())
    assert name and namespace
    (statefulset.parent / "first-replica.yaml").write_text(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n"
        f"metadata: {{name: first-replica, namespace: {namespace.group(1)}}}\n"
        "spec:\n  podSelector:\n    matchLabels:\n"
        f"      statefulset.kubernetes.io/pod-name: {name.group(1)}-0\n"
        "  policyTypes: [Ingress]\n"
    )
    stats = tree.check("a policy selects one replica")
    assert stats.mode == "full" and "per-replica" in stats.why_full


def test_cni_inferred_from_policy_kinds(tmp_path: Path) -> None:
    """Without cilium-config, the first CiliumNetworkPolicy anywhere makes the CNI Cilium: the
    Calico and Cilium policies of every unit change meaning."""
    root = tmp_path / "tree"
    shutil.copytree(examples_dir() / "seed-lab", root)
    for path in root.rglob("*.yaml"):
        if "CiliumNetworkPolicy" in path.read_text():
            path.unlink()
    (root / "calico.yaml").write_text(
        "apiVersion: projectcalico.org/v3\nkind: NetworkPolicy\n"
        "metadata: {name: calico-deny, namespace: ml-demo}\nspec: {selector: all(), types: [Ingress]}\n"
    )
    tree = Tree(root, tmp_path / "cache")
    tree.check("first scan")
    (root / "cilium.yaml").write_text(
        "apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\n"
        "metadata: {name: any, namespace: other-team}\nspec: {endpointSelector: {}}\n"
    )
    stats = tree.check("a first Cilium policy in another namespace")
    assert stats.mode == "full"


def test_errors_make_the_audit_partial_and_unrecorded(repo: Path, tmp_path: Path) -> None:
    tree = Tree(repo, tmp_path / "cache")
    tree.check("first scan")
    job = tree.files(r"kind: PyTorchJob")[1]
    good = job.read_text()
    job.write_text(good + "\n  broken: [unclosed\n")
    assert tree.check("a file that cannot be parsed").mode == "full"
    assert tree.check("still broken").mode == "full"  # a partial audit is never recorded
    job.write_text(good)
    # The snapshot before the break was kept: the mended tree is the one it recorded.
    assert tree.check("mended").mode == "unchanged"


def test_notes_errors_and_waivers_of_units(repo: Path, tmp_path: Path) -> None:
    """Notes and object errors belong to the file that caused them, annotation waivers to their
    workload: they survive other units' re-audits, in file order."""
    tree = Tree(repo, tmp_path / "cache")
    tree.check("first scan")
    deployment = tree.files(r"kind: Deployment")[0]
    namespace = re.search(r"namespace: (\S+)", deployment.read_text())
    assert namespace
    # Calico policies are not enforced under Cilium (a note); a bad selector is an error entry.
    (deployment.parent / "calico.yaml").write_text(
        "apiVersion: projectcalico.org/v3\nkind: NetworkPolicy\n"
        f"metadata: {{name: calico-one, namespace: {namespace.group(1)}}}\nspec: {{selector: all()}}\n"
        "---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n"
        f"metadata: {{name: bad-selector, namespace: {namespace.group(1)}}}\n"
        "spec: {podSelector: {matchExpressions: [{key: app, operator: Nope}]}}\n"
    )
    assert tree.check("a note and an error").mode == "incremental"
    report = tree.cold()
    assert "not enforced" in report and "Nope" in report
    job = tree.files(r"kind: PyTorchJob")[2]
    waiver = (
        "    placement-auditor.io/waive: cross-zone-traffic,role-unschedulable\n"
        "    placement-auditor.io/waive-reason: accepted\n"
        "    placement-auditor.io/waive-expires: '2026-12-31'\n"
    )
    if "\n  annotations:\n" in job.read_text():
        edit(job, lambda t: t.replace("\n  annotations:\n", "\n  annotations:\n" + waiver, 1))
    else:
        edit(job, lambda t: t.replace("\nmetadata:\n", "\nmetadata:\n  annotations:\n" + waiver, 1))
    assert tree.check("an annotation waiver").mode == "incremental"
    assert '"waiver": {' in tree.cold()
    other = tree.files(r"kind: PyTorchJob")[0]
    edit(other, first_sub(r"replicas: (\d+)", fewer_replicas))
    assert tree.check("another unit changes").mode == "incremental"


def test_custom_rules_see_edges_into_a_workload(repo: Path, tmp_path: Path) -> None:
    """A custom rule's `role.split` covers paths into the role: with custom rules, a unit depends
    on the units whose workloads reach it."""
    pack = tmp_path / "pack.yaml"
    pack.write_text(
        "apiVersion: placement-auditor.io/v1\nkind: PolicyPack\nmetadata: {name: split-roles}\n"
        "spec:\n  customRules:\n    - id: split-role\n      title: A role on a split path\n"
        "      severity: low\n      symptoms: [slowdown]\n"
        "      condition: role.split != ''\n      message: a path of this role crosses zones\n"
    )
    tree = Tree(repo, tmp_path / "cache", packs=(pack,))
    tree.check("first scan")
    client = tree.files(r"otel-collector\.monitoring")[0]
    edit(client, lambda t: t.replace("otel-collector.monitoring", "otel-collector.elsewhere", 1))
    assert tree.check("a workload stops reaching another namespace").mode == "incremental"


def test_random_edits(repo: Path, tmp_path: Path) -> None:
    """Edits picked at random over the tree's files (values, labels, replica counts, deletions,
    copies): the report through the snapshot is the cold one after each."""
    rng = random.Random(20261204)
    tree = Tree(repo, tmp_path / "cache")
    tree.check("first scan")
    mutations: list[tuple[str, str, str]] = [
        (r"replicas: (\d+)", "replicas: {n}", "replicas"),
        (r"(\n\s+app: )(\S+)", r"\g<1>{word}", "a label"),
        (r"(port: )(\d+)", r"\g<1>{port}", "a port"),
        (r"(topology.kubernetes.io/zone: )(\S+)", r"\g<1>us-east-1{zone}", "a zone"),
        (r"(value: )(\S+)", r"\g<1>{word}.{namespace}:8080", "an env value"),
    ]
    namespaces = sorted(
        {m for p in repo.rglob("*.yaml") for m in re.findall(r"namespace: (\S+)", p.read_text())}
    )
    step = attempts = 0
    while step < 24 and attempts < 500:
        attempts += 1
        files = sorted(repo.rglob("*.yaml"))
        path = rng.choice(files)
        choice = rng.random()
        if choice < 0.1:
            path.unlink()
            what = f"removed {path.name}"
        elif choice < 0.2:
            (path.parent / f"copy-{step}-{path.name}").write_text(path.read_text())
            what = f"copied {path.name}"
        else:
            pattern, template, name = rng.choice(mutations)
            text = path.read_text()
            spots = list(re.finditer(pattern, text))
            if not spots:
                continue
            spot = rng.choice(spots)
            value = template.format(
                n=rng.randint(1, 9),
                word=rng.choice(["api", "worker", "trainer", "x"]),
                port=rng.choice([80, 8080, 9999]),
                zone=rng.choice("abc"),
                namespace=rng.choice(namespaces),
            )
            path.write_text(text[: spot.start()] + re.sub(pattern, value, spot.group(0)) + text[spot.end() :])
            what = f"{name} in {path.name}"
        tree.check(f"step {step}: {what}")
        step += 1


def test_the_cli_reports_alike_in_every_format(repo: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    main(["scan", str(repo), "--cache-dir", str(cache), "--format", "json", "--output", str(tmp_path / "a")])
    job = Tree(repo, cache).files(r"kind: PyTorchJob")[0]
    edit(job, first_sub(r"replicas: (\d+)", fewer_replicas))
    for fmt in ("json", "table", "sarif", "junit", "csv", "markdown"):
        outs = []
        for flags in (["--cache-dir", str(cache)], ["--no-cache"]):
            out = tmp_path / f"{fmt}-{flags[0]}"
            code = main(
                ["scan", str(repo), "--format", fmt, "--output", str(out), "--fail-on", "high", *flags]
            )
            outs.append((code, out.read_text()))
        assert outs[0] == outs[1], fmt


def test_settings_and_code_key_the_snapshot(repo: Path, tmp_path: Path) -> None:
    tree = Tree(repo, tmp_path / "cache")
    tree.check("first scan")
    config = tmp_path / "config.yaml"
    config.write_text("network:\n  ephemeral_ports: 40000-45000\n")
    other = Tree(repo, tmp_path / "cache", load_settings(config))
    assert other.check("other settings").mode == "full"
    assert tree.check("the first settings again").mode == "unchanged"


def test_units_of_files_and_what_they_read() -> None:
    reads = {
        "a": units.Reads(frozenset({"b"}), frozenset()),
        "b": units.Reads(frozenset(), frozenset({"c"})),
        "c": units.Reads(),
        "d": units.Reads(frozenset(), frozenset({units.EVERY})),
    }
    everything = {"a", "b", "c", "d", units.CLUSTER}
    assert units.dependencies("a", reads, everything, None) == {"a", "b", "c"}
    assert units.dependencies("c", reads, everything, None) == {"c"}
    assert units.dependencies("d", reads, everything, None) == everything
    assert units.dependencies("b", reads, everything, units.readers_of(reads)) == {"a", "b", "c"}


def test_damaged_evicted_and_hostile_entries_cost_a_fuller_audit_never_a_wrong_one(
    repo: Path, tmp_path: Path
) -> None:
    import os
    import pickle

    cache = tmp_path / "cache"
    tree = Tree(repo, cache)
    tree.check("first scan")
    entries = sorted(cache.glob("??/*"), key=lambda p: p.stat().st_size)
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {marker}",))

    # The smallest entries are fragments: one removed (evicted), one torn.
    entries[0].unlink()
    entries[1].write_bytes(entries[1].read_bytes()[:50])
    stats = tree.check("a fragment evicted, another torn")
    assert stats.mode == "full" and "evicted" in stats.why_full
    # A snapshot signed with the real secret whose pickle names a global outside the allow-list
    # (only someone holding the secret could write it) is still refused, never run.
    store = DocumentCache(cache)
    assert store.ready()
    biggest = max(cache.glob("??/*"), key=lambda p: p.stat().st_mtime)
    key = biggest.parent.name + biggest.name
    hostile = pickle.dumps((key, Exploit()))
    secret = (cache / "secret").read_bytes()
    biggest.write_bytes(b"PAUDC1\n" + store._mac(secret, key, hostile) + hostile)
    tree.check("a hostile entry")
    assert not marker.exists()


def test_a_policy_pack_directory_keys_the_snapshot(repo: Path, tmp_path: Path) -> None:
    """Packs may be directories: an edit of a file inside one is a new snapshot, never the old one."""
    packs = tmp_path / "packs"
    packs.mkdir()
    rule = packs / "team.yaml"
    text = (
        "apiVersion: placement-auditor.io/v1\nkind: PolicyPack\nmetadata: {name: team}\n"
        "spec:\n  customRules:\n    - id: every-role\n      title: Every role\n"
        "      severity: low\n      symptoms: [cost]\n"
        "      condition: role.replicas > 0\n      message: MESSAGE\n"
    )
    rule.write_text(text.replace("MESSAGE", "first wording"))
    tree = Tree(repo, tmp_path / "cache", packs=(packs,))
    tree.check("first scan")
    assert "first wording" in tree.cold()
    rule.write_text(text.replace("MESSAGE", "second wording"))
    tree = Tree(repo, tmp_path / "cache", packs=(packs,))
    stats = tree.check("the pack's rule reworded")
    assert stats.mode == "full" and "second wording" in tree.cold()


def test_huge_binary_and_hostile_files_give_the_cold_report(repo: Path, tmp_path: Path) -> None:
    """Files the loader refuses (over the size limit, binary, an alias bomb, nesting past the
    limit) are error entries worded as a cold scan words them, and the audit is partial."""
    tree = Tree(repo, tmp_path / "cache")
    tree.check("first scan")
    (repo / "huge.yaml").write_text("a: " + "x" * (17 * 1024 * 1024) + "\n")
    (repo / "binary.yaml").write_bytes(b"kind: Pod\n\0\x01")
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
    )
    (repo / "bomb.yaml").write_text(bomb)
    (repo / "deep.yaml").write_text("a: " + "[" * 200 + "]" * 200 + "\n")
    stats = tree.check("refused files")
    assert stats.mode == "full"
    report = tree.cold()
    assert "huge.yaml" in report and "17825796 bytes" in report and "binary" in report
    assert "max_nodes" in report and "max_depth" in report


def test_files_added_and_removed_where_listings_are_trusted(repo: Path, tmp_path: Path) -> None:
    """With the tree's directories older than the snapshot (their listings reused), a file added
    to one, or removed from one whose mtime is put back, is seen: the report is the cold one."""
    tree = Tree(repo, tmp_path / "cache")
    age_tree(repo)  # the snapshot's stats and listings are trusted
    tree.check("first scan")
    assert tree.check("nothing changed").mode == "unchanged"
    job = tree.files(r"kind: PyTorchJob")[0]
    (job.parent / "added-copy.yaml").write_text(job.read_text().replace("name: ", "name: added-", 1))
    assert tree.check("a file added").mode != "unchanged"
    age_tree(repo)  # the snapshot's stats and listings are trusted
    tree.check("aged again")
    service = tree.files(r"kind: Service\n")[0]
    before = service.parent.stat()
    service.unlink()
    os.utime(service.parent, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert tree.check("a file removed, the directory's mtime put back").mode != "unchanged"


def test_a_few_changed_files_patch_the_snapshot_many_or_a_new_list_rewrite_it(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A re-scan that changed a few files records a small snapshot patching the last one's Files
    entry; a file added, more than PATCH_MAX changed, or the Files entry lost make a new one. The
    report is the cold one after each."""
    from auditor.sources import incremental

    cache = tmp_path / "cache"
    tree = Tree(repo, cache)
    assert tree.check("first scan").records_patched == -1
    jobs = tree.files(r"kind: PyTorchJob")
    edit(jobs[0], first_sub(r"replicas: (\d+)", fewer_replicas))
    stats = tree.check("one job edited")
    assert stats.mode == "incremental" and stats.records_patched >= 1
    edit(jobs[1], first_sub(r"replicas: (\d+)", fewer_replicas))
    # Patches are of the Files entry, not of each other: both edits are in the new one.
    assert tree.check("another job edited").records_patched >= 2
    monkeypatch.setattr(incremental, "PATCH_MAX", 1)
    edit(jobs[2], first_sub(r"replicas: (\d+)", fewer_replicas))
    assert tree.check("three patched, more than PATCH_MAX").records_patched == -1
    monkeypatch.undo()
    (jobs[0].parent / "added-copy.yaml").write_text(jobs[0].read_text().replace("name: ", "name: added-", 1))
    assert tree.check("a file added").records_patched == -1
    assert tree.check("nothing changed").mode == "unchanged"
    # The Files entry lost (evicted): the snapshot is as good as none.
    auditor = TreeAuditor(DocumentCache(cache), tree.settings, tree.pack)
    recorded = auditor._read_snapshot(auditor._key("snapshot", f"{repo}\0{repo.resolve()}"))
    assert recorded is not None and recorded.snapshot.patch == ()
    (cache / recorded.snapshot.files[:2] / recorded.snapshot.files[2:]).unlink()
    stats = tree.check("the Files entry evicted")
    assert stats.mode == "full" and stats.why_full == "no snapshot of these paths"


def test_a_patch_that_does_not_fit_its_records_is_no_snapshot(repo: Path, tmp_path: Path) -> None:
    """A snapshot whose patch names a position outside its Files entry, or another file there,
    is not used (written with the cache's own secret: only a bug could make it)."""
    from auditor.sources import incremental

    cache = tmp_path / "cache"
    tree = Tree(repo, cache)
    tree.check("first scan")
    store = DocumentCache(cache)
    auditor = TreeAuditor(store, tree.settings, tree.pack)
    key = auditor._key("snapshot", f"{repo}\0{repo.resolve()}")
    recorded = auditor._read_snapshot(key)
    assert recorded is not None
    good = recorded.snapshot
    record = recorded.files[0]
    for patch in (
        ((len(recorded.files), record),),
        ((1, record),),
    ):
        assert store.put_value(key, incremental.Snapshot(good.files, patch, {}, good.units, good.whole, 1))
        assert TreeAuditor(store, tree.settings, tree.pack)._read_snapshot(key) is None
        assert tree.check(f"patch {patch[0][0]}").mode == "full"


def test_the_code_stamp_changes_with_any_write_to_a_source_file(tmp_path: Path) -> None:
    """The auditor's code keys every snapshot by its files' stats: a rewrite (even of the same
    size, with the mtime put back), a file added or removed changes it; bytecode does not."""
    from auditor.sources.incremental import tree_stamp

    package = tmp_path / "package"
    (package / "sub" / "__pycache__").mkdir(parents=True)
    module = package / "sub" / "rules.py"
    module.write_text("LIMIT = 1\n")
    (package / "pack.yaml").write_text("rules: []\n")
    first = tree_stamp([package])
    assert tree_stamp([package]) == first
    (package / "sub" / "__pycache__" / "rules.cpython-311.pyc").write_bytes(b"\0" * 16)
    (package / "notes.txt").write_text("not code\n")
    assert tree_stamp([package]) == first
    before = module.stat()
    module.write_text("LIMIT = 2\n")  # same size
    os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns))
    second = tree_stamp([package])
    assert second != first
    (package / "sub" / "extra.py").write_text("")
    third = tree_stamp([package])
    assert third not in (first, second)
    (package / "sub" / "extra.py").unlink()
    assert tree_stamp([package]) not in (first, third)


def test_a_units_documents_are_recorded_the_second_time_they_are_needed(repo: Path, tmp_path: Path) -> None:
    """The first incremental audit of a namespace parses its unchanged files and does not record
    them (READ_ONCE); the second parses them again and records them; the third reads them back
    and parses only the file that changed. Every report is the cold one."""
    from auditor.sources import incremental

    tree = Tree(repo, tmp_path / "cache")
    tree.check("first scan")
    by_dir: dict[Path, list[Path]] = {}
    for job in tree.files(r"kind: PyTorchJob"):
        by_dir.setdefault(job.parent, []).append(job)
    jobs = max(by_dir.values(), key=len)
    assert len(jobs) >= 3

    def unit_docs() -> str:
        auditor = TreeAuditor(DocumentCache(tree.cache), tree.settings, tree.pack)
        recorded = auditor._read_snapshot(auditor._key("snapshot", f"{repo}\0{repo.resolve()}"))
        assert recorded is not None
        display = str(jobs[0])
        unit = next(r.unit for r in recorded.files if r.display == display)
        return recorded.snapshot.units[unit].docs

    assert unit_docs() == ""
    parsed = []
    for n, job in enumerate(jobs[:3]):
        edit(job, first_sub(r"replicas: (\d+)", fewer_replicas))
        stats = tree.check(f"edit {n + 1}")
        assert stats.mode == "incremental"
        parsed.append(stats.files_parsed)
        if n == 0:
            assert unit_docs() == incremental.READ_ONCE
        else:
            assert unit_docs() not in ("", incremental.READ_ONCE)
    # Parsed whole twice (the unit's files: more than one), then only the changed file.
    assert parsed[0] == parsed[1] > 1 and parsed[2] == 1


def test_a_tree_whose_recorded_walk_holds_is_not_walked(repo: Path, tmp_path: Path) -> None:
    """When every directory of the recorded walk keeps its stat, a re-scan takes the recorded
    file list instead of walking (ScanStats.walked False) and still sees every edit made in place,
    one that moves a file to another namespace included; a directory that changed, or a tree with
    a symlink (whose walk is never recorded), is walked. Every report is the cold one."""
    tree = Tree(repo, tmp_path / "cache")
    age_tree(repo)
    assert tree.check("first scan").walked
    stats = tree.check("nothing changed")
    assert stats.mode == "unchanged" and not stats.walked and stats.files_read == 0
    jobs = tree.files(r"kind: PyTorchJob")
    edit(jobs[0], first_sub(r"replicas: (\d+)", fewer_replicas))
    stats = tree.check("a job edited in place")
    assert stats.mode == "incremental" and not stats.walked and stats.files_read == 1
    other = next(j for j in jobs if re.search(r"namespace: (\S+)", j.read_text()))
    edit(other, first_sub(r"namespace: (\S+)", r"namespace: \1-moved"))
    stats = tree.check("a job moved to another namespace")
    assert not stats.walked and stats.mode in ("incremental", "full")
    # Touched, with the content put back: read and hashed again, nothing to audit.
    age_tree(repo)
    tree.check("aged")
    # Touched now by the file system's clock (os.utime's own "now" is the process's clock, which
    # faketime moves: tests/test_any_hour.py), so still too recent to trust at the next scan.
    now = disk_now_ns(tmp_path)
    os.utime(jobs[1], ns=(now, now))
    stats = tree.check("a job touched")
    assert stats.mode == "unchanged" and not stats.walked and stats.files_read == 1
    # A file replaced by a new one (as editors save, and the benchmark edits): its directory's
    # times changed, not its entries: listed again, not walked.
    text = jobs[2].read_text()
    jobs[2].unlink()
    jobs[2].write_text(re.sub(r"replicas: (\d+)", fewer_replicas, text, count=1))
    stats = tree.check("a job replaced")
    # (and the job touched above, whose stat is still too recent to trust: read again)
    assert stats.mode == "incremental" and not stats.walked and stats.files_read == 2
    # A file added, or one removed: its directory's entries changed, the tree is walked.
    (jobs[2].parent / "added-copy.yaml").write_text(jobs[2].read_text().replace("name: ", "name: added-", 1))
    assert tree.check("a file added").walked
    age_tree(repo)
    tree.check("aged again")
    (jobs[2].parent / "added-copy.yaml").unlink()
    assert tree.check("a file removed").walked
    # A directory renamed in place of another of the same name: its entries are compared.
    age_tree(repo)
    tree.check("aged once more")
    moved = jobs[4].parent
    shutil.copytree(moved, moved.with_name(moved.name + ".new"))
    shutil.rmtree(moved)
    moved.with_name(moved.name + ".new").rename(moved)
    stats = tree.check("a directory replaced by a copy")
    assert stats.mode == "unchanged" and not stats.walked
    # A symlink inside the tree: its directory is never recorded, so neither is the walk.
    (repo / "linked").symlink_to(jobs[3].parent, target_is_directory=True)
    age_tree(repo)
    tree.check("a symlinked directory")
    assert tree.check("again, with the symlink").walked


def test_stat_changes_in_c_are_os_stat_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """auditor/_faststat.c finds exactly the paths whose stat differs from the recorded one, or is
    too recent to trust, with their stats as os.stat gives them (symlinks followed, a name that is
    not UTF-8, times before 1970 and after 2262), and None where a path cannot be stat'ed; the
    fallback without it finds the same."""
    from auditor.sources import incremental

    if not incremental.STATS_IN_C:
        # .ci/run sets AUDITOR_REQUIRE_NATIVE where a C compiler and Python's headers are there:
        # then setup.py built it, and it must be tested.
        assert not os.environ.get("AUDITOR_REQUIRE_NATIVE"), "auditor._faststat was not built"
        pytest.skip("auditor._faststat is not built here (no C compiler)")
    files = []
    for i, name in enumerate(["a.yaml", "b c.yaml", "é.yaml", os.fsdecode(b"\xff-not-utf8.yaml")]):
        path = tmp_path / name
        path.write_text("x" * i)
        files.append(str(path))
    (tmp_path / "link.yaml").symlink_to(files[0])
    files.append(str(tmp_path / "link.yaml"))
    os.utime(files[1], ns=(0, -1_500_000_000_123))  # before 1970
    os.utime(files[2], ns=(0, 10**19 + 7))  # after 2262: past a 64-bit count of nanoseconds
    directories = [str(tmp_path), str(tmp_path.parent)]
    never: list[tuple[int, ...]] = [()] * len(files)
    # Every stat older but the one after 2262 (past a 64-bit count of nanoseconds: never trusted,
    # read again on every scan): only those that differ come back, and that one.
    late = 2**63 - 1

    def found() -> list[object]:
        every = incremental.stat_changes(files, never, late)
        assert every is not None
        now = [every[i] for i in range(len(files))]
        stamps = incremental.stat_changes(directories, [()] * 2, late, directories=True)
        assert stamps is not None
        before = [stamps[0], (0, 0, 0, 0)]
        edited = list(now)
        edited[3] = (now[3][0] + 1, *now[3][1:])  # another size
        return [
            now,
            stamps,
            incremental.stat_changes(files, now, late),  # none changed
            incremental.stat_changes(files, edited, late),  # the one edited
            incremental.stat_changes(files, now, now[0][1]),  # the file at `trusted` or later
            incremental.stat_changes(directories, before, late, directories=True),
            incremental.stat_changes([*files, str(tmp_path / "missing")], [*now, ()], late),
        ]

    in_c = found()
    now = in_c[0]
    assert isinstance(now, list) and now[4] == now[0]  # the link's is its target's
    assert now[1][1] == -1_500_000_000_123 and now[2][1] == 10**19 + 7
    assert in_c[2] == {2: now[2]} and in_c[3] == {2: now[2], 3: now[3]}
    assert in_c[5] == {1: in_c[1][1]}  # type: ignore[index]
    assert 0 in in_c[4] and 2 in in_c[4] and 1 not in in_c[4]  # type: ignore[operator]
    assert in_c[6] is None
    monkeypatch.setattr(incremental, "STATS_IN_C", False)
    assert found() == in_c
