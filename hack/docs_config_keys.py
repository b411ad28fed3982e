"""The config-key reference pages: each backend's keys, as its own parser knows them.

The keys are not listed here: each mapping of a config file is probed with a key
the format lacks, and the parser's refusal names the keys it knows at that path
(the generic format always refuses unknown keys; NVIDIA's does under
``strict=True``). What each key means is written below; a key the parser knows
and this table lacks, or the other way round, stops the generator, so the page
cannot fall behind the code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import yaml

from accel_plugins.errors import ConfigError

PROBE = "zzUnknownKey"

Probe = tuple[str, str, object]
"""(path shown on the page, path the parser names, a document with PROBE at that path)"""


def known_keys(parse: Callable[[object], object], document: object, path: str) -> list[str]:
    """The keys the parser names when ``document`` holds PROBE at ``path``."""
    try:
        parse(document)
    except ConfigError as error:
        text = str(error)
    else:
        raise SystemExit(f"{path}: the parser took the unknown key {PROBE!r}")
    prefix = f"{path}.{PROBE}" if path else PROBE
    if f"{prefix}:" not in text:
        raise SystemExit(f"{path}: the parser refused something else: {text}")
    match = re.search(r"(?:expected one of|known keys): ([^()]*?)(?:\)|$| \()", text)
    if match is None:
        raise SystemExit(f"{path}: no key list in {text!r}")
    return [key.strip() for key in match.group(1).split(",")]


def table(
    parse: Callable[[object], object],
    probes: list[Probe],
    meaning: Mapping[str, str],
) -> list[str]:
    lines: list[str] = []
    described: set[str] = set()
    for shown, path, document in probes:
        keys = known_keys(parse, document, path)
        lines += [f"## `{shown or '(top level)'}`", "", "| key | meaning |", "| --- | --- |"]
        for key in keys:
            full = f"{shown}.{key}" if shown else key
            if full not in meaning:
                raise SystemExit(f"{full}: a key the parser knows; describe it in {__file__}")
            described.add(full)
            lines.append(f"| `{key}` | {meaning[full]} |")
        lines.append("")
    missing = sorted(set(meaning) - described)
    if missing:
        raise SystemExit(f"described but unknown to the parser: {', '.join(missing)}")
    return lines


def _generic_parse(document: object) -> object:
    from accel_plugins.backends.generic.config import parse_config

    return parse_config(yaml.safe_dump(document))


def _generic_device(group: dict[str, object], extra: bool = False) -> dict[str, object]:
    device: dict[str, object] = {"name": "d", "groups": [group]}
    if extra:
        device[PROBE] = 1
    return {"devices": [device]}


_PATH: dict[str, object] = {"path": "/dev/null"}

GENERIC_PROBES: list[Probe] = [
    ("", "", {PROBE: 1, "devices": []}),
    ("devices[]", "devices[0]", _generic_device({"paths": [_PATH]}, extra=True)),
    ("devices[].groups[]", "devices[0].groups[0]", _generic_device({PROBE: 1, "paths": [_PATH]})),
    (
        "devices[].groups[].paths[]",
        "devices[0].groups[0].paths[0]",
        _generic_device({"paths": [{**_PATH, PROBE: 1}]}),
    ),
    (
        "devices[].groups[].usb[]",
        "devices[0].groups[0].usb[0]",
        _generic_device({"usb": [{"vendor": "1209", "product": "0001", PROBE: 1}]}),
    ),
    (
        "devices[].groups[].udev[]",
        "devices[0].groups[0].udev[0]",
        _generic_device({"udev": [{"subsystem": "tty", PROBE: 1}]}),
    ),
]

GENERIC_MEANING = {
    "devices": "the resources to offer, one entry each (squat's `devices`)",
    "device": "squat's own spelling of `devices`; give one of the two",
    "domain": "resource domain: `<domain>/<name>`; default `accel-plugins.io` (`squat.ai` keeps "
    "squat's names); `--domain` wins",
    "devices[].name": "the resource's name under the domain; unique",
    "devices[].groups": "the groups of this resource; each group found on the node is one device "
    "(`count` of them)",
    "devices[].groups[].paths": "host paths (globs allowed) that together make one device",
    "devices[].groups[].usb": "USB devices matched by vendor and product ID (quoted hex strings)",
    "devices[].groups[].udev": "udev matchers: each device udev reports that matches is one device",
    "devices[].groups[].count": "how many containers may hold the group at once (replicas; "
    "default 1, at most 10,000)",
    "devices[].groups[].paths[].path": "absolute host path or glob, under `/dev` unless "
    "`allowHostPathOutsideDev`; a directory is handed over whole",
    "devices[].groups[].paths[].mountPath": "the path in the container (default: `path`); one "
    "ending in `/` takes the matched file's name",
    "devices[].groups[].paths[].permissions": "cgroup access, `r`, `w`, `m` (default `mrw`)",
    "devices[].groups[].paths[].readOnly": "mount read-only (`type: Mount`)",
    "devices[].groups[].paths[].type": "`Device` (a device node, the default) or `Mount` "
    "(a bind mount)",
    "devices[].groups[].paths[].limit": "at most this many of the glob's matches in one group",
    "devices[].groups[].paths[].optional": "the group exists without this path",
    "devices[].groups[].paths[].allowMountPathOutsideDev": "allow a `mountPath` outside `/dev` "
    "in the container",
    "devices[].groups[].paths[].allowHostPathOutsideDev": "allow a `path` outside `/dev` on "
    "the host",
    "devices[].groups[].usb[].vendor": 'USB vendor ID, a quoted hex string (`"1209"`)',
    "devices[].groups[].usb[].product": "USB product ID, a quoted hex string",
    "devices[].groups[].usb[].serial": "match only this serial number",
    "devices[].groups[].udev[].subsystem": "udev subsystem (`tty`, `sound`, ...)",
    "devices[].groups[].udev[].kernel": "kernel name glob (`ttyACM*`)",
    "devices[].groups[].udev[].properties": "udev properties that must match (`ID_VENDOR_ID`, "
    "... from `/run/udev/data`)",
    "devices[].groups[].udev[].attributes": "sysfs attributes of the device or an ancestor that "
    "must match",
    "devices[].groups[].udev[].permissions": "cgroup access of the matched nodes (default `mrw`)",
    "devices[].groups[].udev[].mountPath": "the path in the container (default: the node's own)",
    "devices[].groups[].udev[].optional": "a group that matches nothing is no error",
}


def _nvidia_parse(document: object) -> object:
    from accel_plugins.backends.nvidia.config.config import parse_config

    return parse_config(document, "f", strict=True)


def _v1(**parts: object) -> dict[str, object]:
    return {"version": "v1", **parts}


_REPLICA = {"name": "nvidia.com/gpu", "replicas": 2}

NVIDIA_PROBES: list[Probe] = [
    ("", "", _v1(**{PROBE: 1})),
    ("flags", "flags", _v1(flags={PROBE: 1})),
    ("flags.plugin", "flags.plugin", _v1(flags={"plugin": {PROBE: 1}})),
    ("flags.gfd", "flags.gfd", _v1(flags={"gfd": {PROBE: 1}})),
    ("resources", "resources", _v1(resources={PROBE: 1})),
    (
        "resources.gpus[]",
        "resources.gpus[0]",
        _v1(resources={"gpus": [{"pattern": "*", "name": "gpu", PROBE: 1}]}),
    ),
    ("sharing", "sharing", _v1(sharing={PROBE: 1})),
    (
        "sharing.timeSlicing",
        "sharing.timeSlicing",
        _v1(sharing={"timeSlicing": {PROBE: 1, "resources": [_REPLICA]}}),
    ),
    (
        "sharing.timeSlicing.resources[]",
        "sharing.timeSlicing.resources[0]",
        _v1(sharing={"timeSlicing": {"resources": [{**_REPLICA, PROBE: 1}]}}),
    ),
    ("sharing.mps", "sharing.mps", _v1(sharing={"mps": {PROBE: 1, "resources": [_REPLICA]}})),
    ("imex", "imex", _v1(imex={PROBE: 1})),
]

_SHARED = {
    "renameByDefault": "offer the shared replicas as `<name>.shared` unless an entry renames them",
    "failRequestsGreaterThanOne": "refuse a container asking for more than one replica",
    "resources": "which resources are shared and how many replicas each GPU offers",
}

NVIDIA_MEANING = {
    "version": "`v1`, the only version",
    "flags": "the plugin's settings; each also a flag and an environment variable, which win",
    "resources": "NVIDIA's custom resource names; parsed, checked and ignored with a warning, "
    "as NVIDIA's plugin does",
    "sharing": "time-slicing or MPS (disjoint GPUs)",
    "imex": "IMEX channels every container with a GPU gets",
    "flags.migStrategy": "`none`, `single` or `mixed` (`--mig-strategy`)",
    "flags.failOnInitError": "exit 1 when NVML cannot start (default true)",
    "flags.mpsRoot": "host directory of the MPS control daemon's files; needed by `sharing.mps`",
    "flags.nvidiaDriverRoot": "where the driver lives on the host (default `/`)",
    "flags.nvidiaDevRoot": "where the GPU device nodes live on the host (default: the driver root)",
    "flags.gdrcopyEnabled": "`NVIDIA_GDRCOPY=enabled` in every container",
    "flags.gdsEnabled": "`NVIDIA_GDS=enabled` in every container",
    "flags.mofedEnabled": "`NVIDIA_MOFED=enabled` in every container",
    "flags.useNodeFeatureAPI": "GFD's; parsed and checked",
    "flags.deviceDiscoveryStrategy": "`auto` or `nvml` (`tegra` is refused)",
    "flags.plugin": "the device plugin's own settings",
    "flags.gfd": "gpu-feature-discovery's settings; parsed and checked",
    "flags.plugin.passDeviceSpecs": "also hand the device nodes to the kubelet",
    "flags.plugin.deviceListStrategy": "`envvar`, `volume-mounts`, `cdi-annotations`, "
    "`cdi-cri`, one or a list",
    "flags.plugin.deviceIDStrategy": "`uuid` or `index`",
    "flags.plugin.cdiAnnotationPrefix": "prefix of the CDI annotation key (`cdi.k8s.io/`)",
    "flags.plugin.nvidiaCTKPath": "the program the CDI specs' hooks run (`/usr/bin/nvidia-ctk`)",
    "flags.plugin.containerDriverRoot": "where the host's driver root is mounted in the plugin's "
    "container (`/driver-root`)",
    "flags.plugin.sharedDevicesAllocationPolicy": "`distributed` or `packed`: how a request's "
    "time-sliced replicas are chosen",
    "flags.gfd.oneshot": "GFD's; parsed and checked",
    "flags.gfd.noTimestamp": "GFD's; parsed and checked",
    "flags.gfd.sleepInterval": "GFD's; parsed and checked",
    "flags.gfd.outputFile": "GFD's; parsed and checked",
    "flags.gfd.machineTypeFile": "GFD's; parsed and checked",
    "resources.gpus": "patterns naming whole GPUs' resources",
    "resources.mig": "patterns naming MIG devices' resources",
    "resources.gpus[].pattern": "a product-name glob",
    "resources.gpus[].name": "the resource name for GPUs it matches",
    "sharing.timeSlicing": "time-sliced replicas (`<id>::<n>`)",
    "sharing.mps": "MPS replicas, served by `accel-plugins mps-control-daemon`",
    **{f"sharing.timeSlicing.{key}": text for key, text in _SHARED.items()},
    "sharing.timeSlicing.replicaPolicy": "our older name of `sharedDevicesAllocationPolicy`: "
    "`spread` or `packed`",
    **{f"sharing.mps.{key}": text for key, text in _SHARED.items()},
    "sharing.timeSlicing.resources[].name": "the resource to share (`gpu` is `nvidia.com/gpu`)",
    "sharing.timeSlicing.resources[].rename": "offer the replicas under this name (honoured here; "
    "NVIDIA's plugin ignores it)",
    "sharing.timeSlicing.resources[].devices": "`all`, a count, or GPU indices, MIG indices or "
    "UUIDs (honoured here; NVIDIA's plugin ignores it)",
    "sharing.timeSlicing.resources[].replicas": "replicas per GPU: 2 to 10,000 (MPS: 2 to 48)",
    "imex.channelIDs": "`[]` or `[0]`",
    "imex.required": "a requested channel missing at start is an error (exit 2)",
}


def generic_page(note: str) -> str:
    head = [
        note,
        "",
        "# generic configuration",
        "",
        "Every key of the file given to `accel-plugins generic --config` (squat's format plus",
        "`udev` matchers), as the backend's parser knows it. What the plugin does with it:",
        "[/dev hardware](../generic.md); squat's format side by side:",
        "[Migrating from squat's plugin](../migrate-from-squat.md). `accel-plugins generic",
        "--config FILE --check-config` shows what each entry matches on a node.",
        "",
    ]
    return "\n".join(head + table(_generic_parse, GENERIC_PROBES, GENERIC_MEANING)).rstrip() + "\n"


def nvidia_page(note: str) -> str:
    head = [
        note,
        "",
        "# NVIDIA configuration",
        "",
        "Every key of NVIDIA's config file v1 as `accel-plugins nvidia --config` reads it;",
        "`--strict-config` refuses any other. `sharing.mps.resources[]` takes the keys of",
        "`sharing.timeSlicing.resources[]`. What each does: [NVIDIA GPUs](../nvidia.md),",
        "[MPS sharing](../mps.md), [CDI specs](../cdi.md).",
        "",
    ]
    return "\n".join(head + table(_nvidia_parse, NVIDIA_PROBES, NVIDIA_MEANING)).rstrip() + "\n"
