"""The kit's selection of checks, its verdict, and its JUnit XML as CI systems read it."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from accel_plugins.conformance.catalogue import BY_ID, CHECKS, Profile, check_list
from accel_plugins.conformance.report import Outcome, Status, exit_code, junit_xml, render_table
from accel_plugins.conformance.runner import FUNCTIONS, selected


def outcome(check: str, status: Status, message: str = "seen") -> Outcome:
    return Outcome(BY_ID[check], status, message, 0.5)


def test_every_check_has_a_function_a_source_and_known_needs() -> None:
    assert set(FUNCTIONS) == set(BY_ID)
    for check in CHECKS:
        assert check.rule, check.id
        assert check.source, check.id
        assert set(check.needs) <= set(BY_ID), check.id
        # A need comes earlier in the catalogue, so its outcome is known in time.
        assert all(CHECKS.index(BY_ID[n]) < CHECKS.index(check) for n in check.needs), check.id


def test_the_help_lists_every_check_with_its_source() -> None:
    text = check_list()
    for check in CHECKS:
        assert f"  {check.id}" in text
        assert check.source in text


@pytest.mark.parametrize(
    ("only", "skip", "expected"),
    [
        pytest.param(["versions"], [], ["registration", "versions"], id="only-brings-needs"),
        pytest.param(
            ["prepare-idempotent"],
            [],
            ["registration", "versions", "prepare", "prepare-idempotent"],
            id="needs-of-needs",
        ),
        pytest.param(["health"], ["registration"], ["health"], id="skip-wins"),
        pytest.param(
            [],
            ["reboot", "restart"],
            [c.id for c in CHECKS if c.id not in ("reboot", "restart")],
            id="skip-only",
        ),
    ],
)
def test_selection(only: list[str], skip: list[str], expected: list[str]) -> None:
    assert [c.id for c in selected(only, skip)] == expected


@pytest.mark.parametrize(
    ("outcomes", "code"),
    [
        pytest.param([outcome("prepare", Status.PASSED)], 0, id="passed"),
        pytest.param([outcome("prepare", Status.FAILED)], 1, id="required-failed"),
        pytest.param([outcome("one-bad-claim", Status.FAILED)], 0, id="recommended-failed"),
        pytest.param([outcome("restart", Status.SKIPPED)], 0, id="skipped"),
    ],
)
def test_exit_status_counts_required_failures_only(outcomes: list[Outcome], code: int) -> None:
    assert exit_code(outcomes) == code


def test_junit_xml_has_one_case_per_check_with_failures_and_skips() -> None:
    outcomes = [
        outcome("prepare", Status.PASSED),
        outcome("reboot", Status.FAILED, "CDI IDs no spec defines:\nvendor.com/x=y"),
        outcome("shares", Status.SKIPPED, "no shared device"),
    ]
    root = ET.fromstring(junit_xml("example.com", outcomes))
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    required = suites[f"dra-conformance.{Profile.REQUIRED.value}"]
    recommended = suites[f"dra-conformance.{Profile.RECOMMENDED.value}"]
    assert (required.get("tests"), required.get("failures")) == ("1", "0")
    assert (recommended.get("tests"), recommended.get("failures"), recommended.get("skipped")) == (
        "2",
        "1",
        "1",
    )
    failure = root.find(".//testcase[@name='reboot']/failure")
    assert failure is not None
    assert failure.get("message") == "CDI IDs no spec defines:"
    assert "source: " in (failure.text or "")
    assert root.find(".//testcase[@name='shares']/skipped") is not None
    table = render_table("example.com", outcomes)
    assert "FAIL  reboot" in table
    assert "        vendor.com/x=y" in table
    assert table.endswith(
        "conformant (required: 1 passed, 0 failed, 0 skipped; "
        "recommended: 0 passed, 1 failed, 1 skipped)"
    )
