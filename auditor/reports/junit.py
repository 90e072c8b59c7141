"""JUnit XML for CI dashboards: one test case per rule × workload, failures for findings."""

from __future__ import annotations

from xml.etree import ElementTree as ET

from auditor.scan import ScanResult


def render(result: ScanResult) -> str:
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
            file=f.workload.file,
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
