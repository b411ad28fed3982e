"""The emulator's allocation checkpoint, a JSON file in the plugin directory.

Format (``version`` 1)::

    {
      "version": 1,
      "entries": [
        {
          "namespace": "default",
          "pod": "trainer",
          "container": "main",
          "resource": "vendor.example.com/widget",
          "device_ids": ["w0", "w1"],
          "response": "<base64 of the serialized ContainerAllocateResponse>"
        }
      ],
      "checksum": "sha256:<hex>"
    }

``checksum`` is the SHA-256 of ``entries`` serialized as compact JSON with
sorted keys, so a torn or hand-edited file is noticed. The file is replaced
atomically (temp file in the same directory, fsync, rename): a reader sees
the old or the new checkpoint, never half of one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from accel_plugins.api import deviceplugin_v1beta1_pb2 as pb
from accel_plugins.kubelet_emulator.allocation import AllocationRecord
from accel_plugins.kubelet_emulator.errors import CheckpointError
from accel_plugins.kubelet_emulator.model import ContainerResponse
from accel_plugins.util.fsutil import atomic_write_text

CHECKPOINT_VERSION = 1
_TEXT_FIELDS = ("namespace", "pod", "container", "resource")


def _checksum(entries: list[dict[str, Any]]) -> str:
    canonical = json.dumps(entries, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def _entry(record: AllocationRecord) -> dict[str, Any]:
    return {
        "namespace": record.namespace,
        "pod": record.pod,
        "container": record.container,
        "resource": record.resource,
        "device_ids": list(record.device_ids),
        "response": base64.b64encode(record.response.to_proto().SerializeToString()).decode(),
    }


def encode(records: Iterable[AllocationRecord]) -> str:
    """The checkpoint document for ``records``."""
    entries = [_entry(r) for r in records]
    doc = {"version": CHECKPOINT_VERSION, "entries": entries, "checksum": _checksum(entries)}
    return json.dumps(doc, indent=2) + "\n"


def write(path: Path, records: Iterable[AllocationRecord]) -> None:
    """Replace the checkpoint at ``path`` atomically."""
    data = encode(records)
    atomic_write_text(path, data)


def _record(path: Path, index: int, entry: object) -> AllocationRecord:
    where = f"entries[{index}]"
    if not isinstance(entry, dict):
        raise CheckpointError(path, f"{where}: expected an object")
    for name in (*_TEXT_FIELDS, "response"):
        if not isinstance(entry.get(name), str):
            raise CheckpointError(path, f"{where}.{name}: expected a string")
    ids = entry.get("device_ids")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise CheckpointError(path, f"{where}.device_ids: expected a list of strings")
    try:
        raw = base64.b64decode(entry["response"], validate=True)
        message = pb.ContainerAllocateResponse.FromString(raw)
    except (binascii.Error, DecodeError) as e:
        raise CheckpointError(
            path, f"{where}.response: not a base64 ContainerAllocateResponse ({e})"
        ) from None
    return AllocationRecord(
        namespace=entry["namespace"],
        pod=entry["pod"],
        container=entry["container"],
        resource=entry["resource"],
        device_ids=tuple(ids),
        response=ContainerResponse.from_proto(message),
    )


def decode(path: Path, text: str) -> list[AllocationRecord]:
    """Parse a checkpoint document; ``path`` only names it in errors."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise CheckpointError(path, f"not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise CheckpointError(path, "expected a JSON object at the top level")
    if doc.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(
            path, f"version: expected {CHECKPOINT_VERSION}, found {doc.get('version')!r}"
        )
    entries = doc.get("entries")
    if not isinstance(entries, list):
        raise CheckpointError(path, "entries: expected a list")
    if doc.get("checksum") != _checksum(entries):
        raise CheckpointError(path, "checksum: does not match the entries (file corrupt?)")
    return [_record(path, i, entry) for i, entry in enumerate(entries)]


def read(path: Path) -> list[AllocationRecord]:
    """The records in the checkpoint at ``path``; none when the file does not exist."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(path, f"cannot read: {e}") from None
    return decode(path, text)
