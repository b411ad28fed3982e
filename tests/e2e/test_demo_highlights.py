"""The demo's highlights: topology-aware allocation beside the naive pick, a hotplug
reaching the kubelet, a GPU's XID and recovery, next steps; plain and coloured."""

from __future__ import annotations

import asyncio
import io
import re

import pytest

from accel_plugins.demo import run_demo

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
