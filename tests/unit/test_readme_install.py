"""The README's install lines are CI's: the apt packages, the test command, the hack checks.

``.ci/run`` is what CI executes on a clean machine; a package it installs that
the README's apt line lacks is one a reader's test run would miss. The
migration section's values are the chart's ci/squat-devices-values.yaml, so
the squat config the README shows is the one CI renders and runs.
"""

from __future__ import annotations

import re
import shlex
import textwrap

import yaml

from tests.chart_support import ROOT, ci_values
from tests.squat_fixtures import DAEMONSET_CONTAINER_ARGS, squat_devices

README = (ROOT / "README.md").read_text()
CI_RUN = (ROOT / ".ci" / "run").read_text()


def apt_packages(text: str) -> list[str]:
    """Packages of the first ``apt-get install`` command (continued lines joined)."""
    joined = text.replace("\\\n", " ")
    match = re.search(r"apt-get install ([^\n>]*)", joined)
    assert match, "no apt-get install line"
    return [w for w in shlex.split(match.group(1)) if not w.startswith("-")]


def test_readme_apt_line_names_every_package_ci_installs() -> None:
    ci = apt_packages(CI_RUN)
    assert ci, "the .ci/run apt line lists packages"
    assert apt_packages(README) == ci


def test_readme_test_command_is_cis_verbatim() -> None:
    command = (
        "python3 -m venv .venv && . .venv/bin/activate"
        " && pip install -q -e '.[dev]' && python -m pytest -q"
    )
    assert command in README
    assert command in CI_RUN


def test_development_section_names_every_hack_check_ci_runs() -> None:
    development = README[README.index("## Development") :]
    for line in CI_RUN.splitlines():
        if line.startswith("mypy hack/"):
            for path in line.split()[1:]:
                assert path in development, path
    for check in ("hack/check-chart", "hack/gen-chart-readme", "hadolint Dockerfile"):
        assert check in CI_RUN
        assert check in development


def test_migration_section_shows_squats_shipped_config_unchanged() -> None:
    section = README[README.index("## Migrating from squat's generic-device-plugin") :]
    block = section[section.index("```yaml\n") + len("```yaml\n") : section.index("```\n")]
    values = yaml.safe_load(block)
    assert values == ci_values("squat-devices")
    assert values["devices"] == squat_devices()
    assert values["generic"] == {"enabled": True, "domain": "squat.ai"}


def test_migration_section_runs_squats_daemonset_args_unchanged() -> None:
    """The container the README shows takes the manifest's args verbatim (their first part)."""
    section = README[README.index("## Migrating from squat's generic-device-plugin") :]
    start = section.index("```yaml\n      containers:") + len("```yaml\n")
    block = section[start : section.index("```\n", start)]
    (container,) = yaml.safe_load(textwrap.dedent(block))["containers"]
    assert container["command"] == ["accel-plugins", "generic"]
    shown = tuple(container["args"])
    assert len(shown) >= 4
    assert shown == DAEMONSET_CONTAINER_ARGS[: len(shown)]
