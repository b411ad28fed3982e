"""What each check found, as a table a person reads and as JUnit XML for CI."""

from __future__ import annotations

import enum
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass

from accel_plugins.conformance.catalogue import Check, Profile


class Status(enum.Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class Outcome:
    check: Check
    status: Status
    message: str  # what was seen: the fault, the reason to skip, or what passed
    seconds: float


def exit_code(outcomes: Sequence[Outcome]) -> int:
    """0 only when no required check failed (a recommended failure is reported, not fatal)."""
    failed = any(
        o.status is Status.FAILED and o.check.profile is Profile.REQUIRED for o in outcomes
    )
    return 1 if failed else 0


def render_table(driver: str, outcomes: Sequence[Outcome]) -> str:
    """One line per check, then the counts; a failure's message in full under its line."""
    width = max((len(o.check.id) for o in outcomes), default=10)
    lines = [f"DRA conformance of {driver}"]
    for o in outcomes:
        mark = {Status.PASSED: "PASS", Status.FAILED: "FAIL", Status.SKIPPED: "SKIP"}[o.status]
        first, *rest = (o.message or "").splitlines() or [""]
        lines.append(
            f"  {mark}  {o.check.id:<{width}}  {o.check.profile.value:<11}  "
            f"{o.seconds:5.1f}s  {first}"
        )
        lines += [f"        {line}" for line in rest]
    lines.append(summary(outcomes))
    return "\n".join(lines)


def summary(outcomes: Sequence[Outcome]) -> str:
    parts = []
    for profile in Profile:
        mine = [o for o in outcomes if o.check.profile is profile]
        if mine:
            counts = ", ".join(f"{sum(o.status is s for o in mine)} {s.value}" for s in Status)
            parts.append(f"{profile.value}: {counts}")
    verdict = "conformant" if exit_code(outcomes) == 0 else "NOT conformant"
    return f"{verdict} ({'; '.join(parts)})"


def junit_xml(driver: str, outcomes: Sequence[Outcome]) -> str:
    """One <testsuite> per profile, one <testcase> per check, as CI systems read JUnit."""
    root = ET.Element("testsuites", name=f"dra-conformance {driver}")
    for profile in Profile:
        mine = [o for o in outcomes if o.check.profile is profile]
        suite = ET.SubElement(
            root,
            "testsuite",
            name=f"dra-conformance.{profile.value}",
            tests=str(len(mine)),
            failures=str(sum(o.status is Status.FAILED for o in mine)),
            skipped=str(sum(o.status is Status.SKIPPED for o in mine)),
            errors="0",
            time=f"{sum(o.seconds for o in mine):.3f}",
        )
        for o in mine:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"dra-conformance.{profile.value}",
                name=o.check.id,
                time=f"{o.seconds:.3f}",
            )
            ET.SubElement(case, "properties").extend(
                [
                    ET.Element("property", name="rule", value=o.check.rule),
                    ET.Element("property", name="source", value=o.check.source),
                ]
            )
            if o.status is Status.FAILED:
                first = (o.message.splitlines() or [""])[0]
                failure = ET.SubElement(case, "failure", message=first)
                failure.text = f"{o.message}\n\nrule: {o.check.rule}\nsource: {o.check.source}"
            elif o.status is Status.SKIPPED:
                ET.SubElement(case, "skipped", message=o.message)
            else:
                ET.SubElement(case, "system-out").text = o.message
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode")
