"""CDI test helpers: the CDI project's own JSON schema, and a fake NVIDIA driver root.

The schema is the one Debian ships in
``golang-github-container-orchestrated-devices-container-device-interface-dev``
(``schema/schema.json`` and ``schema/defs.json``; ``.ci/run`` installs it). Without
it the validating tests skip, except in CI (``CI`` set), where they fail: every
spec the tests generate is to be checked there. ``CDI_SCHEMA_DIR`` points elsewhere.

Besides the schema, :func:`assert_valid_spec` checks what the CDI library's
parser (``pkg/parser/parser.go``) checks and the loose schema does not: the
kind's vendor and class, and each device name's characters.
"""

from __future__ import annotations

import glob
import importlib
import json
import os
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.backends.nvidia.cdi import ldcache

SCHEMA_GLOBS = (
    "/usr/share/gocode/src/*/container-device-interface/schema",
    "/usr/share/gocode/src/*/*/container-device-interface/schema",
)
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")
_CLASS = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_VENDOR = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$")


def schema_dir() -> Path | None:
    if os.environ.get("CDI_SCHEMA_DIR"):
        return Path(os.environ["CDI_SCHEMA_DIR"])
    for pattern in SCHEMA_GLOBS:
        for found in sorted(glob.glob(pattern)):
            if (Path(found) / "schema.json").is_file():
                return Path(found)
    return None


@cache
def _validator() -> Any:
    directory = schema_dir()
    if directory is None:
        reason = (
            "the CDI JSON schema is not installed (apt-get install "
            "golang-github-container-orchestrated-devices-container-device-interface-dev)"
        )
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    # Imported by name: jsonschema ships no type information (no stubs needed for one call).
    jsonschema = importlib.import_module("jsonschema")
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT7

    def load(name: str) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads((directory / name).read_text())
        return loaded

    base = directory.resolve().as_uri() + "/"
    schema = load("schema.json") | {"$id": base + "schema.json"}
    defs = load("defs.json") | {"$id": base + "defs.json"}
    registry: Registry[Any] = Registry().with_resources(
        [
            (base + "schema.json", Resource.from_contents(schema, default_specification=DRAFT7)),
            (base + "defs.json", Resource.from_contents(defs, default_specification=DRAFT7)),
        ]
    )
    return jsonschema.Draft7Validator(schema, registry=registry)


def assert_valid_spec(spec: dict[str, Any]) -> None:
    """The CDI schema's verdict, plus the parser's rules for the kind and device names."""
    _validator().validate(spec)
    vendor, _, cls = spec["kind"].partition("/")
    assert _VENDOR.match(vendor), f"vendor {vendor!r}"
    assert _CLASS.match(cls), f"class {cls!r}"
    assert len(cls) <= 63, f"class {cls!r}"
    assert spec["devices"], "a CDI spec needs at least one device"
    names = [d["name"] for d in spec["devices"]]
    assert len(names) == len(set(names)), f"duplicate device names in {names}"
    for name in names:
        assert _NAME.match(name), f"device name {name!r}"
    for edits in [spec.get("containerEdits", {}), *(d["containerEdits"] for d in spec["devices"])]:
        for hook in edits.get("hooks", []):
            assert hook["path"].startswith("/"), hook
        for env in edits.get("env", []):
            assert "=" in env, env


def assert_valid_spec_file(path: Path) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(path.read_text())
    assert_valid_spec(spec)
    return spec


VERSION = "550.54.15"
LIBDIR = "/usr/lib/x86_64-linux-gnu"


def fake_driver_root(root: Path, *, version: str = VERSION, in_cache: bool = True) -> Path:
    """A driver root laid out as the driver's installer leaves it.

    Libraries in ``LIBDIR`` (with the soname and ``.so`` links the installer
    makes, a VDPAU library and the legacy NVVM one), listed in the root's linker
    cache unless ``in_cache`` is false; ``nvidia-smi`` and ``nvidia-persistenced``;
    the persistenced socket under ``/run`` and the fabric manager's under
    ``/var/run``; the GSP firmware; and files that must not be picked up (another
    driver version's library, an unrelated library).
    """
    libdir = root / LIBDIR.lstrip("/")
    (libdir / "vdpau").mkdir(parents=True, exist_ok=True)
    cached: list[tuple[str, str]] = []
    for stem in ("libnvidia-ml", "libcuda", "libnvidia-ptxjitcompiler"):
        (libdir / f"{stem}.so.{version}").write_bytes(b"\x7fELF")
        (libdir / f"{stem}.so.1").symlink_to(f"{stem}.so.{version}")
        cached.append((f"{stem}.so.1", f"{LIBDIR}/{stem}.so.1"))
    (libdir / "libcuda.so").symlink_to("libcuda.so.1")
    (libdir / f"libGLX_nvidia.so.{version}").write_bytes(b"\x7fELF")
    (libdir / "libGLX_nvidia.so.0").symlink_to(f"libGLX_nvidia.so.{version}")
    (libdir / "vdpau" / f"libvdpau_nvidia.so.{version}").write_bytes(b"\x7fELF")
    (libdir / "libnvidia-nvvm70.so.4").write_bytes(b"\x7fELF")
    (libdir / "libnvidia-ml.so.470.1").write_bytes(b"\x7fELF")  # an older driver's leftover
    (libdir / "libz.so.1").write_bytes(b"\x7fELF")
    cached.append(("libz.so.1", f"{LIBDIR}/libz.so.1"))
    if in_cache:
        (root / "etc").mkdir(parents=True, exist_ok=True)
        (root / "etc" / "ld.so.cache").write_bytes(ldcache.build(cached))
    for program in ("nvidia-smi", "nvidia-persistenced"):
        (root / "usr" / "bin").mkdir(parents=True, exist_ok=True)
        (root / "usr" / "bin" / program).write_text("#!/bin/sh\n")
        (root / "usr" / "bin" / program).chmod(0o755)
    for socket in ("run/nvidia-persistenced/socket", "var/run/nvidia-fabricmanager/socket"):
        (root / socket).parent.mkdir(parents=True, exist_ok=True)
        (root / socket).write_text("")
    firmware = root / "lib" / "firmware" / "nvidia" / version
    firmware.mkdir(parents=True, exist_ok=True)
    for name in ("gsp_ga10x.bin", "gsp_tu10x.bin"):
        (firmware / name).write_bytes(b"\0")
    return root
