"""IMEX channels at start, as the process sees them: a required channel that is missing stops it.

NVIDIA's ``internal/imex/imex.go`` (GetChannels) looks for
``/dev/nvidia-caps-imex-channels/channel<N>`` under the dev root and at its own
path; a missing one is an error when ``imex.required`` is set (NVIDIA's plugin
exits 1; a configuration error exits 2 here), else it is skipped with a warning
(tests/unit/backends/nvidia/test_nvidia_container_contract.py). Each row names where the IDs come
from: the flags or the config file, and the error names that source.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import run_cli


@pytest.mark.parametrize(
    ("args", "config", "source"),
    [
        pytest.param(
            ["--imex-channel-ids", "0", "--imex-required"], None, "--imex-channel-ids", id="flags"
        ),
        pytest.param(
            [],
            "version: v1\nimex:\n  channelIDs: [0]\n  required: true\n",
            "{config}: imex.channelIDs",
            id="config-file",
        ),
    ],
)
def test_a_missing_required_imex_channel_exits_2_naming_channel_and_path(
    tmp_path: Path, args: list[str], config: str | None, source: str
) -> None:
    dev_root = tmp_path / "dev-root"
    dev_root.mkdir()
    argv = ["nvidia", "--simulate", "pcie-4gpu", "--nvidia-dev-root", str(dev_root), *args]
    path = tmp_path / "config.yaml"
    if config is not None:
        path.write_text(config)
        argv += ["--config", str(path)]
    argv += ["--plugin-dir", str(tmp_path / "plugins")]
    result = run_cli(*argv)
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"accel-plugins nvidia: configuration error: {source.format(config=path)}: "
    )
    assert "requested IMEX channel channel0 does not exist" in last
    assert f"{dev_root}/dev/nvidia-caps-imex-channels/channel0" in last
    assert not (tmp_path / "plugins").exists() or not list((tmp_path / "plugins").iterdir())
