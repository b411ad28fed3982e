"""The demo's highlights: topology-aware allocation beside the naive pick, a hotplug
reaching the kubelet, a GPU's XID and recovery, next steps; plain and coloured."""

from __future__ import annotations

import asyncio
import io
import re
from pathlib import Path

import pytest

from accel_plugins.demo.run import run_demo

ANSI = re.compile(r"\033\[[0-9;]*m")
MS = r"\d+\.\d ms"


@pytest.fixture(scope="module")
def plain() -> str:
    """One plain run shared by the checks (a demo run takes under a second)."""
    out = io.StringIO()
    assert asyncio.run(run_demo(once=True, out=out)) == 0
    return out.getvalue()


@pytest.mark.parametrize(
    "expected",
    [
        # pcie-8gpu-nvlink-pairs: GPUs 0 and 1 share an NVLink bridge (12 links) and a
        # PCIe switch: 12 x 100 + 50 (pair_score.py). The first two free IDs (UUID
        # order) are GPUs 2 and 7, on different NUMA nodes: SYS, 10.
        pytest.param(r"accel-plugins   GPUs 0,1  score  1250  0-1 NV12\+PIX", id="ours"),
        pytest.param(r"first free IDs  GPUs 2,7  score    10  2-7 SYS", id="naive"),
        pytest.param(rf"serial: 0 -> 1 allocatable, .* after {MS}", id="hotplug"),
        pytest.param(rf"unplugged: Unhealthy .* after {MS}", id="unplug"),
        pytest.param(rf"XID 48 .* on GPU 7 .*: Unhealthy at the kubelet after {MS}", id="xid"),
        pytest.param(r"Healthy again after \d+\.\d\d s, same ID", id="recovery"),
        pytest.param(r"hack/build-images --registry \S+ --push", id="images"),
        pytest.param(r"helm install accel-plugins charts/accel-plugins", id="install"),
        pytest.param(r"accel-plugins inspect /var/lib/kubelet/device-plugins/", id="inspect"),
    ],
)
def test_the_walkthrough_shows(plain: str, expected: str) -> None:
    assert re.search(expected, plain), plain


def test_plain_output_has_no_escape_codes(plain: str) -> None:
    assert "\033" not in plain
    sections = re.findall(r"^== (.+?) =", plain, re.MULTILINE)
    assert sections[-5:] == [
        "Topology-aware allocation",
        "Hotplug",
        "GPU health: an XID, then recovery",
        "Metrics",
        "Next steps",
    ]


async def test_colour_wraps_the_same_text(plain: str) -> None:
    out = io.StringIO()
    assert await run_demo(once=True, out=out, color=True) == 0
    coloured = out.getvalue()
    assert "\033[1;36m== Topology-aware allocation" in coloured
    assert "\033[1;32maccel-plugins   GPUs 0,1" in coloured

    def shape(text: str) -> list[str]:
        # Times, ports and temp paths differ per run; plugins register in any order.
        return sorted(re.sub(r"\d+(\.\d+)?|/tmp/\S+", "#", line) for line in text.splitlines())

    assert shape(ANSI.sub("", coloured)) == shape(plain)


def test_generic_resources_on_one_numa_node_register_without_a_preference(plain: str) -> None:
    """docs/design.md, "Options come from capabilities": nothing to prefer, nothing advertised."""
    generic = re.findall(r"^  (accel-plugins\.io/\S+) .*preferred allocation (yes|no)", plain, re.M)
    assert generic
    assert {answer for _, answer in generic} == {"no"}
    design = (Path(__file__).resolve().parents[2] / "docs" / "design.md").read_text()
    assert "preferred allocation no" in design
    assert "is always set" not in design


def excerpt_lines() -> list[str]:
    """The demo excerpt docs/getting-started.md shows, section headers and result lines."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "getting-started.md").read_text()
    block = page.split("```\n== Topology-aware allocation", 1)[1].split("```", 1)[0]
    return [line for line in ("== Topology-aware allocation" + block).splitlines() if line.strip()]


# What changes from run to run, as the excerpt shows it and as a pattern.
VARYING = re.compile(r"\d+\.\d+ m?s|accel-demo-…|GPU-[0-9a-f]{8}")
PATTERNS = {"accel-demo-…": r"accel-demo-\S+?", "GPU-": r"GPU-[0-9a-f-]+"}


def as_pattern(line: str) -> str:
    parts, last = [], 0
    for match in VARYING.finditer(line):
        parts.append(re.escape(line[last : match.start()]))
        shown = match.group()
        if shown.endswith("ms"):
            parts.append(r"\d+\.\d+ ms")
        elif shown.endswith("s"):
            parts.append(r"\d+\.\d+ s")
        else:
            parts.append(next(p for key, p in PATTERNS.items() if shown.startswith(key)))
        last = match.end()
    return "".join([*parts, re.escape(line[last:])])


def test_the_getting_started_excerpt_is_what_the_demo_prints(plain: str) -> None:
    """Each line of the excerpt, its timings, paths and IDs read as patterns."""
    for line in excerpt_lines():
        assert re.search(as_pattern(line), plain, re.MULTILINE), line
