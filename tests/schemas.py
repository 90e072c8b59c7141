"""The official schemas our outputs must satisfy, vendored under tests/data/ (see its README):
SARIF 2.1.0 (OASIS), and the PolicyReport CRDs (wgpolicyk8s.io v1alpha2, openreports.io v1alpha1).

`sarif_problems` also checks, offline, the rules of the SARIF validator (Microsoft's SARIF
multitool, `sarif validate`, which GitHub's upload documentation points to) that can be decided
from the file alone; each problem names its rule id."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import yaml

DATA = Path(__file__).parent / "data"
SARIF_SCHEMA = DATA / "sarif" / "sarif-schema-2.1.0.json"
CRDS = {
    ("wgpolicyk8s.io", "PolicyReport"): DATA / "policyreport/wgpolicyk8s/wgpolicyk8s.io_policyreports.yaml",
    ("wgpolicyk8s.io", "ClusterPolicyReport"): DATA
    / "policyreport/wgpolicyk8s/wgpolicyk8s.io_clusterpolicyreports.yaml",
    ("openreports.io", "Report"): DATA / "policyreport/openreports/openreports.io_reports.yaml",
    ("openreports.io", "ClusterReport"): DATA / "policyreport/openreports/openreports.io_clusterreports.yaml",
}


@cache
def sarif_validator() -> jsonschema.Draft4Validator:
    schema = json.loads(SARIF_SCHEMA.read_text())
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def schema_errors(doc: Any) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in sorted(sarif_validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    ]


_URI_CHARS = re.compile(r"^[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*$")


def _is_absolute(uri: str) -> bool:
    parts = urlsplit(uri)
    return bool(parts.scheme) and (parts.scheme != "file" or parts.path.startswith("/"))


def _artifact_locations(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}/{key}"
            if key == "artifactLocation" and isinstance(value, dict):
                found.append((here, value))
            found.extend(_artifact_locations(value, here))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.extend(_artifact_locations(value, f"{path}/{i}"))
    return found


def _messages(node: Any, path: str = "") -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}/{key}"
            texts = key in ("message", "shortDescription", "fullDescription") and isinstance(value, dict)
            if texts and isinstance(value.get("text"), str):
                found.append((here, value["text"]))
            found.extend(_messages(value, here))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.extend(_messages(value, f"{path}/{i}"))
    return found


def sarif_problems(doc: dict[str, Any]) -> list[str]:
    """Schema errors, then the offline validator rules (SARIF1001, 1002, 1004, 1005, 1007, 1009,
    1010, 1011, 2001, 2005, 2012) and GitHub code scanning's own requirements."""
    problems = [f"schema: {e}" for e in schema_errors(doc)]
    schema_id = json.loads(SARIF_SCHEMA.read_text())["id"]
    if doc.get("$schema") != schema_id:
        problems.append(f"SARIF1011 ReferenceFinalSchema: $schema is {doc.get('$schema')!r}")
    for run in doc.get("runs", []):
        driver = run["tool"]["driver"]
        rules = driver.get("rules", [])
        ids = [rule["id"] for rule in rules]
        if len(ids) != len(set(ids)):
            problems.append("SARIF1001 RuleIdentifiersMustBeValid: duplicate rule ids")
        for key in ("version", "informationUri"):
            if key not in driver:
                problems.append(f"SARIF2005 ProvideToolProperties: driver has no {key}")
        for rule in rules:
            for key in ("name", "fullDescription", "helpUri", "help"):
                if key not in rule:
                    problems.append(f"SARIF2012 ProvideRuleProperties: rule {rule['id']} has no {key}")
            if "helpUri" in rule and not _is_absolute(rule["helpUri"]):
                problems.append(f"SARIF1005 UriMustBeAbsolute: helpUri {rule['helpUri']!r}")
            sev = rule.get("properties", {}).get("security-severity")
            if sev is None or not 0.0 <= float(sev) <= 10.0:
                problems.append(f"GitHub: rule {rule['id']} security-severity {sev!r} is not 0-10")
        if "informationUri" in driver and not _is_absolute(driver["informationUri"]):
            problems.append("SARIF1005 UriMustBeAbsolute: informationUri")
        bases = run.get("originalUriBaseIds", {})
        for name, base in bases.items():
            uri = base.get("uri")
            if uri is not None and (
                not _is_absolute(uri) or not uri.endswith("/") or "?" in uri or "#" in uri
            ):
                problems.append(
                    f"SARIF1004 ExpressUriBaseIdsCorrectly: originalUriBaseIds.{name}.uri {uri!r} "
                    "must be absolute, end with '/', and have no query or fragment"
                )
        for where, loc in _artifact_locations(run):
            uri = loc.get("uri", "")
            if not _URI_CHARS.match(uri) or " " in uri or "\\" in uri:
                problems.append(f"SARIF1002 UrisMustBeValid: {where} {uri!r}")
            if "uriBaseId" in loc:
                if _is_absolute(uri) or uri.startswith("/"):
                    problems.append(
                        f"SARIF1004 ExpressUriBaseIdsCorrectly: {where} has a uriBaseId and an absolute uri {uri!r}"
                    )
                if loc["uriBaseId"] not in bases:
                    problems.append(
                        f"SARIF1004 ExpressUriBaseIdsCorrectly: {where} uriBaseId {loc['uriBaseId']} is not declared"
                    )
            elif not _is_absolute(uri):
                problems.append(f"GitHub/SARIF1004: {where} relative uri {uri!r} without a uriBaseId")
        for i, result in enumerate(run.get("results", [])):
            rid = result.get("ruleId")
            index = result.get("ruleIndex")
            if rid is None:
                problems.append(f"SARIF1010 RuleIdMustBeConsistent: results/{i} has no ruleId")
            if index is not None and (index >= len(rules) or rules[index]["id"] != rid):
                problems.append(f"SARIF1009 IndexPropertiesMustBeConsistent: results/{i} ruleIndex {index}")
            if rid not in ids:
                problems.append(f"GitHub: results/{i} ruleId {rid!r} is not in tool.driver.rules")
            for loc in result.get("locations", []):
                region = loc.get("physicalLocation", {}).get("region", {})
                if region and region.get("startLine", 1) < 1:
                    problems.append(f"SARIF1007 RegionPropertiesMustBeConsistent: results/{i} startLine")
            if "partialFingerprints" not in result:
                problems.append(f"GitHub: results/{i} has no partialFingerprints")
        for where, text in _messages(run):
            if not text.rstrip().endswith((".", "!", "?")):
                problems.append(f"SARIF2001 TerminateMessagesWithPeriod: {where} {text[-40:]!r}")
    return problems


@cache
def crd_schema(group: str, kind: str, version: str) -> dict[str, Any]:
    crd = yaml.safe_load(CRDS[(group, kind)].read_text())
    assert crd["spec"]["names"]["kind"] == kind
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    assert served["served"], f"{group}/{version} {kind} is not served by the CRD"
    return served["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def policyreport_problems(doc: dict[str, Any]) -> list[str]:
    group, _, version = doc["apiVersion"].partition("/")
    schema = crd_schema(group, doc["kind"], version)
    return [
        f"{doc['kind']} {'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in jsonschema.Draft4Validator(schema).iter_errors(doc)
    ]
