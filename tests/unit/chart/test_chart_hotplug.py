"""The generic DaemonSet hotplugs in its pod by default.

Without hostNetwork the pod has a network namespace of its own, where the
kernel's uevents arrive and udevd's do not (lib/kobject_uevent.c; udevd
multicasts in the host's namespace). ``auto`` chooses by what it finds in
that namespace (accel_plugins/backends/generic/eventsource.py, proved under
``unshare --net`` by tests/e2e/test_generic_netns.py), so the chart passes
``auto`` and mounts what the kernel source needs for udev properties: the
host's /run/udev (udevd's database) read-only.
"""

from __future__ import annotations

import pytest

from tests.support.chart import Obj, container, daemonset, mounts, render


def generic(**values: object) -> Obj:
    devices = [{"name": "serial", "groups": [{"paths": [{"path": "/dev/ttyUSB*"}]}]}]
    objects = render({"generic": {"enabled": True, "devices": devices, **values}})
    return daemonset(objects, "generic")


def test_the_default_follows_the_uevents_that_reach_the_pod() -> None:
    ds = generic()
    assert "--udev-source=auto" in container(ds)["args"]
    assert not ds["spec"]["template"]["spec"].get("hostNetwork", False)
    _, read_only, volume = mounts(ds)["/run/udev"]
    assert (read_only, volume["hostPath"]["path"]) == (True, "/run/udev")


@pytest.mark.parametrize("source", ["auto", "udev", "kernel", "off"])
def test_a_chosen_source_is_passed(source: str) -> None:
    assert f"--udev-source={source}" in container(generic(udevSource=source))["args"]
