"""JUnit XML for CI dashboards: one test case per rule × workload, failures for findings.

`file` attributes are relative to the repository root when one is given (as SARIF's URIs are),
so test reporters can annotate the files of the checkout."""

from __future__ import annotations

from typing import TYPE_CHECKING
from xml.etree import ElementTree as ET

from auditor.reports import Audited

if TYPE_CHECKING:
    from auditor.reports.sarif import SourceRoot


def render(result: Audited, root: SourceRoot | None = None) -> str:
    def file_of(name: str) -> str:
        found = root.path(name) if root is not None else None
        return found[0] if found is not None else name

    suite = ET.Element(
        "testsuite",
        name="placement-auditor",
        tests=str(max(1, len(result.findings))),
        failures=str(len(result.findings)),
        errors=str(len(result.errors)),
    )
    if not result.findings:
        ET.SubElement(suite, "testcase", classname="placement-auditor", name="no findings")
    for f in result.findings:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f.rule,
            name=f"{f.workload.kind} {f.workload.namespace}/{f.workload.name} [{f.fingerprint[:8]}]",
            file=file_of(f.workload.file),
            line=str(f.workload.line),
        )
        failure = ET.SubElement(case, "failure", type=f.severity, message=f"{f.rule} ({f.certainty})")
        failure.text = f.message
    for e in result.errors:
        case = ET.SubElement(suite, "testcase", classname="input", name=f"{e.file}:{e.line}")
        err = ET.SubElement(case, "error", message=e.message)
        err.text = str(e)
    suites = ET.Element("testsuites")
    suites.append(suite)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"
