"""What the README shows, run: its --check-config line, its chart values, its DRA manifest.

The README's two first commands are CI's (test_readme_install.py) and the demo's
output is checked in tests/e2e/test_demo_highlights.py.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest
import yaml

from tests.support.chart import ROOT, container, daemonset, package_version, render
from tests.unit.chart.test_chart import NEWEST_KUBERNETES

README = (ROOT / "README.md").read_text()


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, re.DOTALL)


def shell_line(starting: str) -> list[str]:
    """The README's shell line starting with ``starting``, without its comment."""
    for block in blocks("sh"):
        for line in block.splitlines():
            if line.startswith(starting):
                return shlex.split(line, comments=True)
    raise AssertionError(f"no README line starts with {starting!r}")


def test_check_config_runs_as_shown_and_names_every_entry() -> None:
    argv = shell_line("accel-plugins generic --config examples/generic/squat.yaml --check-config")
    result = subprocess.run(
        [sys.executable, "-m", "accel_plugins.cli", *argv[1:]],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    # This machine's /dev decides which entries match: 0 when all do, 2 otherwise.
    assert result.returncode in (0, 2), result.stderr
    entries = yaml.safe_load((ROOT / "examples" / "generic" / "squat.yaml").read_text())["devices"]
    for index, entry in enumerate(entries):
        assert f"examples/generic/squat.yaml: devices[{index}] ({entry['name']})" in result.stdout
    unmatched = result.stdout.count("matches nothing on this node")
    assert result.returncode == (2 if unmatched else 0)


def test_the_chart_values_shown_give_images_from_your_registry() -> None:
    devices = yaml.safe_load(blocks("yaml")[0])
    values = {
        "common": {"imageRegistry": "registry.example.com"},
        "generic": {"enabled": True},
        **devices,
    }
    objects = render(values)
    generic = container(daemonset(objects, "generic"))
    tag = package_version()
    assert generic["image"] == f"registry.example.com/accel-plugins/accel-plugins-generic:{tag}"
    nvidia = container(daemonset(objects, "nvidia"))
    assert nvidia["image"] == f"registry.example.com/accel-plugins/accel-plugins-nvidia:{tag}"


def test_the_dra_example_is_valid_kubernetes() -> None:
    validate = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    (manifest,) = [b for b in blocks("yaml") if "ResourceClaimTemplate" in b]
    documents = list(yaml.safe_load_all(manifest))
    assert [d["kind"] for d in documents] == ["ResourceClaimTemplate", "Pod"]
    for document in documents:
        validate.validate(document, NEWEST_KUBERNETES, strict=True)
    claim = documents[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert claim["deviceClassName"] == "gpu.nvidia.com"  # the chart's DeviceClass for GPUs
