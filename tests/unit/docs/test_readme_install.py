"""The README's install lines are CI's: the apt packages, the test command, the hack checks.

``.ci/run`` is what CI executes on a clean machine; a package it installs that
the README's apt line lacks is one a reader's test run would miss, and a test
command that differs (KUBEBUILDER_ASSETS unset) gives other skips than CI's.
The squat migration page's values are the chart's ci/squat-devices-values.yaml,
so the squat config it shows is the one CI renders and runs.
"""

from __future__ import annotations

import re
import shlex
import textwrap
import tomllib

import yaml

from tests.support.chart import ROOT, ci_values
from tests.support.squat import DAEMONSET_CONTAINER_ARGS, squat_devices

README = (ROOT / "README.md").read_text()
CI_RUN = (ROOT / ".ci" / "run").read_text()
TESTING = (ROOT / "docs" / "testing.md").read_text()
SQUAT = (ROOT / "docs" / "migrate-from-squat.md").read_text()
TEST_COMMAND = (
    "python3 -m venv .venv && . .venv/bin/activate && pip install -q -e '.[dev]'"
    " && KUBEBUILDER_ASSETS=$(../shared/k8s/unpack /tmp/k8s-assets) python -m pytest -q"
)


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
    assert apt_packages(TESTING) == ci


def test_readme_test_command_is_cis_verbatim() -> None:
    assert f"\n{TEST_COMMAND}\n" in CI_RUN
    assert f"\n{TEST_COMMAND}\n" in README
    assert f"\n{TEST_COMMAND}\n" in TESTING


def code_blocks(text: str) -> list[str]:
    return re.findall(r"```\w*\n(.*?)```", text, re.DOTALL)


def test_readme_starts_with_the_two_commands_demo_then_tests() -> None:
    demo, tests = code_blocks(README)[:2]
    assert demo.strip().endswith("accel-plugins demo")
    assert demo.strip().startswith("python3 -m venv .venv")
    assert tests.strip().endswith(TEST_COMMAND)


def test_readme_is_a_front_door() -> None:
    """About 300 lines at most: the rest lives in docs/."""
    assert len(README.splitlines()) <= 300


def test_readme_image_tags_are_the_package_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    tags = re.findall(r"accel-plugins-(?:nvidia|generic):([\w.]+)", README)
    assert tags
    assert set(tags) == {version}


def test_development_section_names_every_hack_check_ci_runs() -> None:
    development = TESTING[TESTING.index("## Development") :]
    static_checks = (ROOT / "hack" / "static-checks").read_text()
    assert "hack/static-checks" in CI_RUN
    for line in static_checks.splitlines():
        if line.strip().startswith("mypy hack/"):
            for path in line.split()[1:]:
                assert path in development, path
    checks = ("hack/check-chart", "hack/gen-chart-readme", "hadolint Dockerfile", "hack/gen-docs")
    for check in checks:
        assert check in static_checks
        assert check in development


def test_migration_section_shows_squats_shipped_config_unchanged() -> None:
    section = SQUAT
    block = section[section.index("```yaml\n") + len("```yaml\n") : section.index("```\n")]
    values = yaml.safe_load(block)
    assert values == ci_values("squat-devices")
    assert values["devices"] == squat_devices()
    assert values["generic"] == {"enabled": True, "domain": "squat.ai"}


def test_migration_section_runs_squats_daemonset_args_unchanged() -> None:
    """The container the page shows takes the manifest's args verbatim (their first part)."""
    section = SQUAT
    start = section.index("```yaml\n      containers:") + len("```yaml\n")
    block = section[start : section.index("```\n", start)]
    (container,) = yaml.safe_load(textwrap.dedent(block))["containers"]
    assert container["command"] == ["accel-plugins", "generic"]
    shown = tuple(container["args"])
    assert len(shown) >= 4
    assert shown == DAEMONSET_CONTAINER_ARGS[: len(shown)]


def test_readme_names_every_package_the_node_suite_installs() -> None:
    joined = CI_RUN.replace("\\\n", " ")
    node_line = re.findall(r"apt-get install ([^\n>]*)", joined)[1]
    packages = [w for w in shlex.split(node_line) if not w.startswith("-")]
    assert "runc" in packages
    node_paragraph = README[README.index("The real-node suite") :].split("```")[0]
    named = {word.strip("`;,") for word in node_paragraph.split()}
    missing = [p for p in packages if p not in named]
    assert not missing, f"the README's real-node paragraph lacks {missing}"
