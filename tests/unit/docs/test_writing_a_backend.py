"""docs/writing-a-backend.md shows the example's code as it is: the backend (about 40
lines) and every other example, each a region of a test file the example package runs."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.repo import ROOT as REPO_ROOT

REPO = REPO_ROOT
GUIDE = REPO / "docs" / "writing-a-backend.md"
BACKEND = REPO / "examples" / "fpga-backend" / "accel_fpga" / "backend.py"


def test_the_guides_complete_backend_is_the_examples() -> None:
    section = GUIDE.read_text().split("## A complete backend", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, "no python block under 'A complete backend'"
    assert match.group(1) == BACKEND.read_text()


def test_the_backend_is_about_forty_lines() -> None:
    code = [line for line in BACKEND.read_text().splitlines() if line.strip()]
    assert len(code) <= 45


EXAMPLE = re.compile(r"<!-- example: (\S+), (\S+) -->\n```python\n(.*?)```", re.DOTALL)


def regions(path: Path) -> dict[str, str]:
    """``# guide: NAME`` ... ``# end`` regions of an example file."""
    text = path.read_text()
    found = re.finditer(r"^# guide: (\S+)\n(.*?)^# end$", text, re.DOTALL | re.MULTILINE)
    return {m.group(1): m.group(2).strip("\n") + "\n" for m in found}


def test_every_example_in_the_guide_is_a_region_of_a_tested_file() -> None:
    shown = EXAMPLE.findall(GUIDE.read_text())
    assert len(shown) >= 7
    for file, name, code in shown:
        assert file.startswith("examples/fpga-backend/tests/"), file  # run by .ci/run
        assert code == regions(REPO / file)[name], f"{file}: {name}"


def test_every_region_is_shown() -> None:
    shown = {(file, name) for file, name, _ in EXAMPLE.findall(GUIDE.read_text())}
    file = "examples/fpga-backend/tests/test_guide.py"
    assert {(file, name) for name in regions(REPO / file)} == shown


def test_the_guide_is_linked_from_the_readme() -> None:
    assert "(docs/writing-a-backend.md)" in (REPO / "README.md").read_text()
