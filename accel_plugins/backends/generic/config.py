"""The generic backend's configuration: squat's format plus ``udev`` matchers.

A file looks like::

    devices:
      - name: serial                  # resource <domain>/serial
        groups:
          - paths:                    # squat: globs, zipped when several
              - path: /dev/ttyUSB*
                mountPath: /dev/      # ends in '/': the node's file name is appended
                permissions: rw       # letters from r, w, m (default mrw)
                type: Device          # or Mount (a bind mount; readOnly applies)
                limit: 1              # how often this path may be reused in the zip
                optional: false       # a path that matches nothing does not block the group
            count: 1                  # how many pods may share each device
          - usb:                      # squat: USB IDs (hex), optional serial
              - {vendor: "1a86", product: "7523", serial: "A9XYZ"}
          - udev:                     # ours: every node these match is one device
              - subsystem: sound
                kernel: "pcmC*"
                properties: {ID_MODEL: "USB*"}
                attributes: {idVendor: "0d8c"}   # of the device or one ancestor
                permissions: rw
                mountPath: /dev/snd/

Every value is checked when the file is read; a problem raises ConfigError
naming the file, the field path (``devices[0].groups[1].paths[0].permissions``)
and the reason, so a bad file stops the plugin before it talks to the kubelet.
Zero for ``count`` or ``limit`` means the default (1), as in squat.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from accel_plugins.backends.generic.names import domain_problem, name_problem
from accel_plugins.errors import ConfigError
from accel_plugins.util import yamlfile
from accel_plugins.util.configfields import PLAIN, Fields, plain_kind

DEFAULT_PERMISSIONS = "mrw"
USB_PERMISSIONS = "rw"
# count and limit multiply devices: a million cost ~15 s of CPU on every rescan and could
# never reach the kubelet (4 MiB ListAndWatch limit, ~70,000 devices); refuse absurd values.
MAX_COUNT = 10_000
# Opt-in for a Device-type path handed to the container outside /dev.
OUTSIDE_DEV_KEY = "allowMountPathOutsideDev"
# Opt-in for a Device-type host path outside /dev (e.g. a driver container's /run/.../dev).
HOST_OUTSIDE_DEV_KEY = "allowHostPathOutsideDev"
# squat's own key for the device list; its config file takes "devices" as an alias (config.go).
SQUAT_DEVICES_KEY = "device"
# squat's flag for one device (repeated); its values replace the file's list (viper: a flag
# that was set wins over the config file).
DEVICE_FLAG = "--device"

_GLOB_CHARS = frozenset("*?[")
_EMPTY: Mapping[str, str] = MappingProxyType({})


class PathType(enum.StrEnum):
    DEVICE = "Device"
    MOUNT = "Mount"


@dataclass(frozen=True, slots=True)
class PathSpec:
    """One squat ``paths`` entry. ``path`` is a host path and may be a glob."""

    path: str
    mount_path: str = ""  # empty: the matched host path
    permissions: str = DEFAULT_PERMISSIONS
    read_only: bool = False
    type: PathType = PathType.DEVICE
    limit: int = 1
    optional: bool = False
    allow_mount_path_outside_dev: bool = False
    allow_host_path_outside_dev: bool = False


@dataclass(frozen=True, slots=True)
class UsbSpec:
    """One squat ``usb`` entry: a USB device by vendor and product (and serial)."""

    vendor: int
    product: int
    serial: str = ""  # empty: any serial


@dataclass(frozen=True, slots=True)
class UdevMatcher:
    """Device nodes udev knows, selected like a udev rule's match keys.

    ``kernel`` and every value are shell globs. All ``attributes`` must hold
    on one device: the node's own device or one of its ancestors (udev's
    ATTRS semantics), so a USB parent's ``idVendor``/``idProduct`` match.
    """

    subsystem: str = ""
    kernel: str = ""
    properties: Mapping[str, str] = field(default_factory=lambda: _EMPTY, hash=False)
    attributes: Mapping[str, str] = field(default_factory=lambda: _EMPTY, hash=False)
    permissions: str = DEFAULT_PERMISSIONS
    mount_path: str = ""  # empty: the host path; else a directory ending in '/'
    optional: bool = False


@dataclass(frozen=True, slots=True)
class Group:
    """A squat group: exactly one of ``paths``, ``usb`` or ``udev`` is set."""

    paths: tuple[PathSpec, ...] = ()
    usb: tuple[UsbSpec, ...] = ()
    udev: tuple[UdevMatcher, ...] = ()
    count: int = 1


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """One resource: ``<domain>/<name>``, offered by the devices its groups find."""

    name: str
    groups: tuple[Group, ...]


@dataclass(frozen=True, slots=True)
class GenericConfig:
    """``domain`` is the file's own (squat's viper reads the key); None when it has none."""

    devices: tuple[DeviceSpec, ...]
    source: str = "<config>"
    domain: str | None = None


# -- reading -------------------------------------------------------------------


def load_config(path: Path | str, *, devices_required: bool = True) -> GenericConfig:
    """Read and validate a config file; raises ConfigError on any problem.

    ``devices_required=False``: ``--device`` flags give the devices, so the file
    may hold only its ``domain`` (its devices, if any, are checked and then replaced).
    """
    return parse_config(
        yamlfile.read_text(path, "the file"), str(path), devices_required=devices_required
    )


def parse_config(
    text: str, source: str = "<config>", *, devices_required: bool = True
) -> GenericConfig:
    data = yamlfile.parse(text, source, strict=True, invalid="invalid YAML")
    return _Reader(source).config(data, devices_required=devices_required)


def parse_device_flags(values: Sequence[str]) -> tuple[DeviceSpec, ...]:
    """squat's ``--device`` values, each one device as YAML or JSON (config.go reads each
    with ghodss/yaml into a DeviceSpec); ConfigError names ``--device[i]``, the field and
    the reason."""
    devices: list[DeviceSpec] = []
    seen: dict[str, int] = {}
    for i, text in enumerate(values):
        source = f"{DEVICE_FLAG}[{i}]"
        data = yamlfile.parse(text, source, strict=True, invalid="invalid YAML")
        if data is None:
            raise ConfigError(source, "", "empty; expected one device (name and groups)")
        spec = _Reader(source, json_usb_ids=True).device(data, "")
        if spec.name in seen:
            reason = f"{spec.name!r} is already used by {DEVICE_FLAG}[{seen[spec.name]}]"
            raise ConfigError(source, "name", reason)
        seen[spec.name] = i
        devices.append(spec)
    return tuple(devices)


class _Reader(Fields):
    """Walks the parsed YAML, remembering the field path for error messages.

    ``json_usb_ids``: read an unquoted USB ID as squat's ``--device`` path does: the
    YAML number becomes JSON text and USBID.UnmarshalJSON parses those digits as hex
    (``vendor: 1209`` is 0x1209). Its config file (mapstructure) has no such rule.
    """

    def __init__(self, source: str, *, json_usb_ids: bool = False) -> None:
        super().__init__(source, wording=PLAIN)
        self.json_usb_ids = json_usb_ids

    def fail(self, where: str, reason: str) -> ConfigError:
        # A device read as a document of its own (a --device value) has fields ".name".
        return super().fail(where.removeprefix("."), reason)

    # -- values of this format --

    def count(self, value: object, where: str) -> int:
        number = self.integer(value, where, maximum=MAX_COUNT)
        if number < 0:
            raise self.fail(where, f"must not be negative, got {number}")
        return number or 1  # squat: 0 (unset in Go) means the default, 1

    def scalar_map(self, value: object, where: str) -> Mapping[str, str]:
        if not isinstance(value, dict):
            raise self.fail(
                where, f"expected a mapping of names to values, got {plain_kind(value)}"
            )
        out: dict[str, str] = {}
        for key, item in value.items():
            if not isinstance(key, str) or not key:
                raise self.fail(where, f"names must be non-empty strings, got {key!r}")
            if isinstance(item, bool) or not isinstance(item, str | int):
                raise self.fail(f"{where}.{key}", f"expected a string, got {plain_kind(item)}")
            out[key] = str(item)
        return MappingProxyType(out)

    def permissions(self, value: object, where: str) -> str:
        text = self.string(value, where)
        if not text:
            raise self.fail(where, "must not be empty (use letters from r, w, m)")
        if not set(text) <= set("rwm"):
            raise self.fail(where, f"{text!r} has letters other than r, w, m")
        return text

    def abs_path(self, value: object, where: str, *, glob: bool) -> str:
        text = self.string(value, where)
        if not text:
            raise self.fail(where, "must not be empty")
        if not text.startswith("/"):
            raise self.fail(where, f"{text!r} is not an absolute path")
        if ".." in text.split("/"):
            raise self.fail(where, f"{text!r} must not contain '..'")
        if not glob and _GLOB_CHARS & set(text):
            raise self.fail(where, f"{text!r} must not contain glob characters (*, ?, [)")
        return text

    # -- the document --

    def config(self, data: object, *, devices_required: bool = True) -> GenericConfig:
        if data is None:
            if not devices_required:
                return GenericConfig((), self.source)
            raise self.fail("", "the file is empty; expected a mapping with a 'devices' list")
        # squat's config file (viper) reads "device" and its alias "devices" alike, and
        # "domain" when no --domain flag (nor DOMAIN variable) is set.
        top = self.mapping(data, "", ("devices", SQUAT_DEVICES_KEY, "domain"))
        if "devices" in top and SQUAT_DEVICES_KEY in top:
            raise self.fail("", "has both devices and device (the same list in squat's format)")
        domain = None
        if "domain" in top:
            domain = self.string(top["domain"], "domain")
            problem = domain_problem(domain)
            if problem:
                raise self.fail("domain", problem)
        key = SQUAT_DEVICES_KEY if SQUAT_DEVICES_KEY in top else "devices"
        if key not in top:
            if not devices_required:
                return GenericConfig((), self.source, domain)
            raise self.fail("devices", "missing (a list of devices to expose)")
        items = self.sequence(top[key], key)
        if not items and devices_required:
            raise self.fail(key, "must list at least one device")
        devices: list[DeviceSpec] = []
        seen: dict[str, int] = {}
        for i, item in enumerate(items):
            where = f"{key}[{i}]"
            spec = self.device(item, where)
            if spec.name in seen:
                raise self.fail(
                    f"{where}.name", f"{spec.name!r} is already used by {key}[{seen[spec.name]}]"
                )
            seen[spec.name] = i
            devices.append(spec)
        return GenericConfig(tuple(devices), self.source, domain)

    def device(self, value: object, where: str) -> DeviceSpec:
        raw = self.mapping(value, where, ("name", "groups"))
        if "name" not in raw:
            raise self.fail(f"{where}.name", "missing")
        name = self.string(raw["name"], f"{where}.name")
        problem = name_problem(name)
        if problem:
            raise self.fail(f"{where}.name", problem)
        if "groups" not in raw:
            raise self.fail(f"{where}.groups", "missing (a list of device groups)")
        groups = self.sequence(raw["groups"], f"{where}.groups")
        if not groups:
            raise self.fail(f"{where}.groups", "must list at least one group")
        return DeviceSpec(
            name, tuple(self.group(g, f"{where}.groups[{j}]") for j, g in enumerate(groups))
        )

    def group(self, value: object, where: str) -> Group:
        raw = self.mapping(value, where, ("paths", "usb", "udev", "count"))
        kinds = [k for k in ("paths", "usb", "udev") if k in raw]
        if not kinds:
            raise self.fail(where, "a group needs one of paths, usb or udev")
        if len(kinds) > 1:
            raise self.fail(
                where, f"a group has one of paths, usb or udev, not {' and '.join(kinds)}"
            )
        kind = kinds[0]
        entries = self.sequence(raw[kind], f"{where}.{kind}")
        if not entries:
            raise self.fail(f"{where}.{kind}", "must not be empty")
        count = self.count(raw.get("count", 1), f"{where}.count")
        at = [f"{where}.{kind}[{k}]" for k in range(len(entries))]
        if kind == "paths":
            paths = tuple(self.path(e, w) for e, w in zip(entries, at, strict=True))
            return Group(paths=paths, count=count)
        if kind == "usb":
            usb = tuple(self.usb(e, w) for e, w in zip(entries, at, strict=True))
            return Group(usb=usb, count=count)
        udev = tuple(self.udev(e, w) for e, w in zip(entries, at, strict=True))
        return Group(udev=udev, count=count)

    def path(self, value: object, where: str) -> PathSpec:
        keys = (
            "path",
            "mountPath",
            "permissions",
            "readOnly",
            "type",
            "limit",
            "optional",
            OUTSIDE_DEV_KEY,
            HOST_OUTSIDE_DEV_KEY,
        )
        raw = self.mapping(value, where, keys)
        if "path" not in raw:
            raise self.fail(f"{where}.path", "missing")
        path = self.abs_path(raw["path"], f"{where}.path", glob=True)
        mount_path = ""
        if "mountPath" in raw:
            mount_path = self.abs_path(raw["mountPath"], f"{where}.mountPath", glob=False)
        kind_text = self.string(raw.get("type", PathType.DEVICE.value), f"{where}.type")
        try:
            kind = PathType(kind_text)
        except ValueError:
            raise self.fail(f"{where}.type", f"{kind_text!r} is not Device or Mount") from None
        outside = self.boolean(raw.get(OUTSIDE_DEV_KEY, False), f"{where}.{OUTSIDE_DEV_KEY}")
        target = mount_path or path
        if kind is PathType.DEVICE and not outside and not _under_dev(target):
            field_name = "mountPath" if mount_path else "path"
            raise self.fail(
                f"{where}.{field_name}",
                f"{target!r} would put a device node outside /dev in the container; "
                f"set {OUTSIDE_DEV_KEY}: true on this path if that is intended",
            )
        host_outside = self.boolean(
            raw.get(HOST_OUTSIDE_DEV_KEY, False), f"{where}.{HOST_OUTSIDE_DEV_KEY}"
        )
        # Without this, `{path: /etc/shadow, mountPath: /dev/x}` handed any host file to
        # the runtime as a device node.
        if kind is PathType.DEVICE and not host_outside and not _under_dev(path):
            raise self.fail(
                f"{where}.path",
                f"{path!r} is a Device path outside /dev on the host; "
                f"set {HOST_OUTSIDE_DEV_KEY}: true on this path if that is intended",
            )
        # A directory is handed over whole (devdir.py): /dev itself would give the
        # container every device node of the host, a privileged container in effect.
        if kind is PathType.DEVICE and path.rstrip("/") == "/dev":
            raise self.fail(
                f"{where}.path",
                "'/dev' as a Device path would hand the container every device node of the "
                "host; name the directory or the nodes it needs",
            )
        return PathSpec(
            path=path,
            mount_path=mount_path,
            permissions=self.permissions(
                raw.get("permissions", DEFAULT_PERMISSIONS), f"{where}.permissions"
            ),
            read_only=self.boolean(raw.get("readOnly", False), f"{where}.readOnly"),
            type=kind,
            limit=self.count(raw.get("limit", 1), f"{where}.limit"),
            optional=self.boolean(raw.get("optional", False), f"{where}.optional"),
            allow_mount_path_outside_dev=outside,
            allow_host_path_outside_dev=host_outside,
        )

    def usb_id(self, value: object, where: str) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and self.json_usb_ids:
            value = str(value)
        if isinstance(value, int) and not isinstance(value, bool):
            # YAML reads `1209` as decimal and `0x0f` as 15: the hex digits are lost.
            raise self.fail(where, f'quote USB IDs so YAML keeps their hex digits ("{value}")')
        text = self.string(value, where)
        digits = text.lower().removeprefix("0x")
        if not 1 <= len(digits) <= 4 or not set(digits) <= set("0123456789abcdef"):
            raise self.fail(where, f'{text!r} is not a USB ID (1 to 4 hex digits, e.g. "1a86")')
        return int(digits, 16)

    def usb(self, value: object, where: str) -> UsbSpec:
        raw = self.mapping(value, where, ("vendor", "product", "serial"))
        for key in ("vendor", "product"):
            if key not in raw:
                raise self.fail(f"{where}.{key}", "missing")
        serial = raw.get("serial", "")
        if isinstance(serial, int) and not isinstance(serial, bool):
            serial = str(serial)
        return UsbSpec(
            vendor=self.usb_id(raw["vendor"], f"{where}.vendor"),
            product=self.usb_id(raw["product"], f"{where}.product"),
            serial=self.string(serial, f"{where}.serial"),
        )

    def udev(self, value: object, where: str) -> UdevMatcher:
        keys = (
            "subsystem",
            "kernel",
            "properties",
            "attributes",
            "permissions",
            "mountPath",
            "optional",
        )
        raw = self.mapping(value, where, keys)
        if not {"subsystem", "kernel", "properties", "attributes"} & set(raw):
            raise self.fail(
                where, "needs at least one of subsystem, kernel, properties or attributes"
            )
        subsystem = self.string(raw.get("subsystem", ""), f"{where}.subsystem")
        kernel = self.string(raw.get("kernel", ""), f"{where}.kernel")
        if "subsystem" in raw and not subsystem:
            raise self.fail(f"{where}.subsystem", "must not be empty")
        if "kernel" in raw and not kernel:
            raise self.fail(f"{where}.kernel", "must not be empty")
        mount_path = ""
        if "mountPath" in raw:
            mount_path = self.abs_path(raw["mountPath"], f"{where}.mountPath", glob=False)
            if not mount_path.endswith("/"):
                raise self.fail(
                    f"{where}.mountPath",
                    f"{mount_path!r} must end in '/': a udev matcher may find several nodes, "
                    "each keeps its file name in that directory",
                )
            if not _under_dev(mount_path):
                raise self.fail(f"{where}.mountPath", f"{mount_path!r} is outside /dev")
        return UdevMatcher(
            subsystem=subsystem,
            kernel=kernel,
            properties=self.scalar_map(raw.get("properties", {}), f"{where}.properties"),
            attributes=self.scalar_map(raw.get("attributes", {}), f"{where}.attributes"),
            permissions=self.permissions(
                raw.get("permissions", DEFAULT_PERMISSIONS), f"{where}.permissions"
            ),
            mount_path=mount_path,
            optional=self.boolean(raw.get("optional", False), f"{where}.optional"),
        )


def _under_dev(path: str) -> bool:
    return path == "/dev" or path.startswith("/dev/")
