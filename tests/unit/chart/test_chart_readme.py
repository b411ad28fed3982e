"""charts/accel-plugins/README.md: its values tables are what hack/gen-chart-readme makes now.

The generator reads values.schema.json and values.yaml; a key added to the
schema without regenerating the README fails here (CI runs pytest).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.chart import CHART, ROOT

SCRIPT = ROOT / "hack" / "gen-chart-readme"


def generate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60
    )


def test_committed_readme_is_what_the_generator_writes() -> None:
    result = generate("--stdout")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (CHART / "README.md").read_text(), "run hack/gen-chart-readme"


def test_every_schema_key_has_a_row() -> None:
    text = (CHART / "README.md").read_text()
    for key in ("devices", "generic.devices", "nvidia.tolerations", "common.pluginDir"):
        assert f"| `{key}` |" in text
    for entry in ("device", "group", "path", "usb", "udev"):
        assert f"#### `{entry}`" in text


def test_check_mode_fails_on_a_stale_readme(tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    assert generate("--check", "--chart", str(chart)).returncode == 0
    readme = chart / "README.md"
    readme.write_text(readme.read_text().replace("| `devices` |", "| `devicez` |"))
    stale = generate("--check", "--chart", str(chart))
    assert stale.returncode == 1
    assert "stale" in stale.stderr
