"""junit.xml for CI dashboards: one testcase per route-suite test, findings as properties.

Written by the controller from outcomes that travelled through xdist, so per-test
properties (check family, finding titles, severities) survive parallel runs.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict
from typing import Any


def render_junit(report: dict[str, Any]) -> str:
    findings_by_test: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for finding in report["findings"]:
        findings_by_test[finding["test_id"]].append(finding)
    tests = report["tests"]
    counts = report["counts"]
    suite = ET.Element("testsuite", {
        "name": "spec-route-suite", "tests": str(len(tests)),
        "failures": str(counts.get("failed", 0)), "errors": str(counts.get("error", 0)),
        "skipped": str(counts.get("skipped", 0) + counts.get("xfailed", 0)),
        "time": f"{report['duration_s']:.2f}",
    })
    suite_props = ET.SubElement(suite, "properties")
    for name, value in (("run_id", report["run_id"]), ("verdict", report["verdict"]),
                        ("complete", str(report["complete"]).lower())):
        ET.SubElement(suite_props, "property", {"name": name, "value": value})
    for test in tests:
        module, _, name = test["nodeid"].partition("::")
        case = ET.SubElement(suite, "testcase", {
            "classname": module.removesuffix(".py").replace("/", "."), "name": name,
            "time": f"{test['duration_s']:.3f}"})
        props = ET.SubElement(case, "properties")
        ET.SubElement(props, "property", {"name": "check", "value": test["check"]})
        for index, finding in enumerate(findings_by_test.get(test["nodeid"], [])):
            ET.SubElement(props, "property", {"name": f"finding.{index}.severity", "value": finding["severity"]})
            ET.SubElement(props, "property", {"name": f"finding.{index}.title", "value": finding["title"]})
        outcome = test["outcome"]
        if outcome == "failed":
            ET.SubElement(case, "failure", {"message": test["reason"][:500]}).text = test["reason"]
        elif outcome == "error":
            ET.SubElement(case, "error", {"message": test["reason"][:500]}).text = test["reason"]
        elif outcome in ("skipped", "xfailed"):
            ET.SubElement(case, "skipped", {"message": test["reason"][:500] or outcome})
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
