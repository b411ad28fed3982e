"""docs/writing-a-backend.md shows the example's backend as it is, and stays about 40 lines."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
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


def test_the_guide_is_linked_from_the_readme() -> None:
    assert "(docs/writing-a-backend.md)" in (REPO / "README.md").read_text()
