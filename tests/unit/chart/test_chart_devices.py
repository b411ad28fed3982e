"""The chart's generic device list: squat's key ``devices``, the device-entry schema, tolerations.

squat's shipped DaemonSet (manifests/generic-device-plugin.yaml, commit 179b1fe)
passes five ``--device`` documents; its config file holds the same entries under
``devices`` (config.go: viper alias of ``device``). That list goes into our
values unchanged (ci/squat-devices-values.yaml) and reaches the plugin's config
file, where our parser reads it. squat's manifest tolerates every NoSchedule and
NoExecute taint; our default, one toleration with operator Exists, tolerates
every taint of any effect.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
import yaml

from accel_plugins.backends.generic.config import parse_config
from tests.support.chart import CHART, ci_values, daemonset, helm_sdk, of_kind, render
from tests.support.squat import squat_config_text, squat_devices

CONFIG_MAP = "rel-accel-plugins-generic"
FUSE = {"name": "fuse", "groups": [{"count": 10, "paths": [{"path": "/dev/fuse"}]}]}


def generic_config(values: dict[str, Any]) -> str:
    text: str = of_kind(render(values), "ConfigMap")[CONFIG_MAP]["data"]["config.yaml"]
    return text


def test_ci_values_hold_squats_daemonset_devices_unchanged() -> None:
    assert ci_values("squat-devices")["devices"] == squat_devices()


def test_squats_devices_key_becomes_the_plugins_config() -> None:
    text = generic_config(ci_values("squat-devices"))
    assert parse_config(text) == parse_config(squat_config_text())
    ds = daemonset(render(ci_values("squat-devices")), "generic")
    assert "--domain=squat.ai" in ds["spec"]["template"]["spec"]["containers"][0]["args"]


def test_both_keys_form_one_list_ours_first() -> None:
    values = {"generic": {"enabled": True, "devices": [FUSE]}, "devices": squat_devices()[:1]}
    devices = yaml.safe_load(generic_config(values))["devices"]
    assert [d["name"] for d in devices] == ["fuse", "serial"]


def test_changing_the_top_level_list_changes_the_config_not_the_pods() -> None:
    # The running plugin reloads its config file live (the ConfigMap volume updates): no
    # checksum annotation rolls the DaemonSet, so a bad edit never restarts a pod into it.
    def rendered(devices: list[dict[str, Any]]) -> tuple[str, Any]:
        values = {"generic": {"enabled": True}, "devices": devices}
        return generic_config(values), daemonset(render(values), "generic")["spec"]["template"]

    before, after = rendered([FUSE]), rendered([FUSE, *squat_devices()[:1]])
    assert before[0] != after[0]
    assert before[1] == after[1]


REFUSED_RENDERS = [
    pytest.param({"devices": [FUSE]}, "generic.enabled is false", id="generic-disabled"),
    pytest.param(
        {"generic": {"enabled": True, "devices": [FUSE]}, "devices": [FUSE]},
        'device name "fuse" is listed twice',
        id="name-twice",
    ),
    pytest.param(
        {"generic": {"enabled": True, "existingConfigMap": "mine"}, "devices": [FUSE]},
        "devices and generic.existingConfigMap are exclusive",
        id="with-existing-configmap",
    ),
]


@pytest.mark.parametrize(("values", "message"), REFUSED_RENDERS)
def test_contradictions_fail_the_render(values: dict[str, Any], message: str) -> None:
    helm = helm_sdk()
    with pytest.raises(helm.HelmError, match=message):
        render(values)


def entry(group: dict[str, Any]) -> dict[str, Any]:
    return {"name": "d", "groups": [group]}


# (device entry, None when the schema accepts it, else a fragment of Helm's message)
SCHEMA_CASES = [
    pytest.param(FUSE, None, id="squat-count"),
    pytest.param(
        entry(
            {
                "paths": [
                    {
                        "path": "/dev/ttyUSB*",
                        "mountPath": "/dev/serial/",
                        "permissions": "rw",
                        "type": "Device",
                        "limit": 2,
                        "optional": True,
                    },
                    {"path": "/srv/fw", "type": "Mount", "readOnly": True, "mountPath": "/fw"},
                ]
            }
        ),
        None,
        id="every-path-field",
    ),
    pytest.param(
        entry({"usb": [{"vendor": "1a86", "product": "7523", "serial": "A9"}]}), None, id="usb"
    ),
    pytest.param(
        entry({"udev": [{"subsystem": "sound", "kernel": "pcmC*", "mountPath": "/dev/snd/"}]}),
        None,
        id="udev",
    ),
    pytest.param({"name": "d"}, "missing property 'groups'", id="no-groups"),
    pytest.param({"name": "d", "groups": []}, "minItems", id="empty-groups"),
    pytest.param(
        entry({"paths": [{"path": "/dev/a"}], "usb": [{"vendor": "1", "product": "2"}]}),
        "oneOf",
        id="paths-and-usb",
    ),
    pytest.param(entry({"count": 2}), "oneOf", id="neither"),
    pytest.param(entry({"paths": [{"path": "dev/a"}]}), "does not match pattern", id="relative"),
    pytest.param(
        entry({"paths": [{"path": "/dev/a", "permissions": "rwx"}]}), "pattern", id="perm"
    ),
    pytest.param(
        entry({"paths": [{"path": "/dev/a", "type": "Socket"}]}), "must be one of", id="type"
    ),
    pytest.param(entry({"paths": [{"path": "/dev/a", "limit": -1}]}), "minimum", id="limit"),
    pytest.param(entry({"paths": [{"path": "/dev/a", "mountpath": "/x"}]}), "mountpath", id="typo"),
    pytest.param(entry({"usb": [{"vendor": 1234, "product": "1"}]}), "want string", id="usb-int"),
    pytest.param(entry({"usb": [{"vendor": "12345", "product": "1"}]}), "pattern", id="usb-long"),
    pytest.param(entry({"udev": [{"optional": True}]}), "anyOf", id="udev-matches-nothing"),
    pytest.param({"name": "-x", "groups": [FUSE["groups"][0]]}, "pattern", id="bad-name"),
]


@pytest.mark.parametrize("key", ["devices", "generic.devices"])
@pytest.mark.parametrize(("device", "problem"), SCHEMA_CASES)
def test_schema_of_device_entries(key: str, device: dict[str, Any], problem: str | None) -> None:
    helm = helm_sdk()
    values: dict[str, Any] = {"generic": {"enabled": True}}
    if key == "devices":
        values["devices"] = [device]
    else:
        values["generic"]["devices"] = [device]
    with helm.Chart.load(CHART) as chart:
        if problem is None:
            chart.validate_schema(values)
            return
        with pytest.raises(helm.HelmError, match=problem):
            chart.validate_schema(values)


def test_every_entry_the_schema_accepts_is_one_our_parser_reads() -> None:
    accepted = [cast(dict[str, Any], p.values[0]) for p in SCHEMA_CASES if p.values[1] is None]
    named = [{**d, "name": f"d{i}"} for i, d in enumerate(accepted)]
    assert len(parse_config(yaml.safe_dump({"devices": named})).devices) == len(accepted)


@pytest.mark.parametrize("backend", ["nvidia", "generic"])
def test_default_tolerations_admit_every_taint(backend: str) -> None:
    values = {"generic": {"enabled": True, "devices": [FUSE]}}
    spec = daemonset(render(values), backend)["spec"]["template"]["spec"]
    # An empty key with operator Exists matches every key, value and effect
    # (core/v1 Toleration), NoExecute included: squat's two cover NoSchedule and NoExecute.
    assert spec["tolerations"] == [{"operator": "Exists"}]


def test_tolerations_can_be_narrowed() -> None:
    narrow = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    spec = daemonset(render({"nvidia": {"tolerations": narrow}}), "nvidia")["spec"]["template"]
    assert spec["spec"]["tolerations"] == narrow
