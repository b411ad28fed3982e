"""squat's config file as its users write it: the list under ``device`` or ``devices``.

squat's config.go reads the key ``device`` and registers ``devices`` as its
alias (viper.RegisterAlias), so a squat config file may use either; ours reads
both, and the same list under each gives the same config.
"""

from __future__ import annotations

import pytest

from accel_plugins.backends.generic.config import parse_config
from accel_plugins.errors import ConfigError
from tests.squat_fixtures import squat_config_text


def test_squats_device_key_reads_like_devices() -> None:
    text = squat_config_text()
    assert text.startswith("devices:\n")
    singular = parse_config("device:\n" + text.removeprefix("devices:\n"), "squat.yaml")
    assert singular.devices == parse_config(text).devices
    assert [d.name for d in singular.devices] == ["serial", "video", "fuse", "audio", "capture"]


CASES = [
    pytest.param("{device: [], devices: []}", "has both devices and device", id="both"),
    pytest.param("device: []", "device: must list at least one device", id="empty"),
    pytest.param(
        "device: [{name: a, groups: [{paths: [{path: /dev/a}]}]}, {name: a, groups: []}]",
        r"squat\.yaml: device\[1\]\.groups: must list at least one group",
        id="field-path-names-the-key",
    ),
]


@pytest.mark.parametrize(("text", "message"), CASES)
def test_errors_name_the_key_the_file_uses(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(text, "squat.yaml")
