"""The per-claim CDI spec: what a prepared claim's containers get, in CDI form.

One spec file per claim, of kind ``k8s.<driver>/claim`` (the vendor prefix
``k8s.`` keeps our claim specs apart from the node-wide specs a backend may
write for the device-plugin path, as NVIDIA's DRA driver does), holding one
CDI device per request of the claim: ``<claim uid>-<request>``. A request, not
a device, is the unit because the device-plugin path builds one answer for
the devices a container gets together (NVIDIA's ``NVIDIA_VISIBLE_DEVICES``
lists them all); one CDI device per DRA device would set such a variable once
per device, the last one winning.

These specs are not kept by :class:`~accel_plugins.plugin.cdi.CdiSpecWriter`:
that writer removes its files when the plugin stops, while a prepared claim's
spec must outlive a plugin restart until the kubelet unprepares the claim.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from accel_plugins.plugin.cdi import CdiMount, ContainerEdits, qualified_name
from accel_plugins.plugin.device import ContainerAllocation
from accel_plugins.util.fsutil import atomic_write_text

CLAIM_CLASS = "claim"
# CDI device names: letters, digits and "_.:-", starting with a letter or digit.
_NOT_CDI_NAME = re.compile(r"[^A-Za-z0-9_.:-]")


def claim_kind(driver: str) -> str:
    """``k8s.gpu.nvidia.com/claim`` for driver ``gpu.nvidia.com``."""
    return f"k8s.{driver}/{CLAIM_CLASS}"


def spec_file_name(driver: str, claim_uid: str) -> str:
    """One file per claim, named like CDI's transient specs (``<vendor>_<class>_<id>``)."""
    return f"k8s.{driver}_{CLAIM_CLASS}_{claim_uid}.json"


def cdi_device_name(claim_uid: str, request: str, share_id: str = "") -> str:
    """``<uid>-<request>``, and ``-<share ID>`` for one share of a shared device (each
    share its own CDI device); a subrequest's ``/`` (``gpu/large``) becomes ``_``."""
    name = f"{claim_uid}-{request}-{share_id}" if share_id else f"{claim_uid}-{request}"
    return _NOT_CDI_NAME.sub("_", name)


def qualified_device(driver: str, claim_uid: str, request: str, share_id: str = "") -> str:
    return qualified_name(claim_kind(driver), cdi_device_name(claim_uid, request, share_id))


def allocation_edits(allocation: ContainerAllocation) -> ContainerEdits:
    """The nodes, mounts and env of a device-plugin answer as CDI edits.

    Annotations have no CDI form and are not carried; CDI names the answer
    already holds are returned to the kubelet beside the claim's own (see
    ``prepare``), since their specs are on the node already.
    """
    return ContainerEdits(
        env=tuple(f"{k}={v}" for k, v in allocation.envs.items()),
        device_nodes=allocation.nodes,
        mounts=tuple(
            CdiMount(m.host_path, m.container_path, ("bind", "ro") if m.read_only else ("bind",))
            for m in allocation.mounts
        ),
    )


def write_text(directory: Path, file_name: str, text: str) -> Path:
    """Write a spec's text (CdiSpec.text()) atomically, so a runtime never reads half a
    spec; returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / file_name
    atomic_write_text(path, text)
    return path


def remove_spec(directory: Path, file_name: str) -> bool:
    """Remove a claim's spec; False when it was not there."""
    with contextlib.suppress(FileNotFoundError):
        (directory / file_name).unlink()
        return True
    return False
