"""Prepared claims on disk, so a restarted plugin answers as before.

The kubelet may call NodePrepareResources again for a claim it already had
prepared (its own restart, a retry) and calls NodeUnprepareResources for
claims prepared by an earlier run of the plugin; both must give the same
answer as if the plugin had never stopped. The file is replaced atomically
on every change; one that cannot be read is set aside (``.corrupt``), logged,
and the plugin starts empty: a claim prepared again is written again, and
unpreparing an unknown claim still removes its spec by name.

The file outlives a reboot (it lives in the kubelet's plugins directory) while
the CDI specs do not (/var/run/cdi is a tmpfs). So it records the boot it was
written in (``bootID``, the kernel's random boot_id, as NVIDIA's DRA driver
records ``nodeBootID``) and each claim's spec as written (``cdiSpec``), from
which the spec is written again after a reboot. A device held as one share of
several (``shareID``) or for admin access (``adminAccess``, which the per-node
switch does not count as holding it) says so. These fields are optional:
files written before them still load, and older plugins ignore them.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel_plugins.dra.model import ClaimRef
from accel_plugins.util.fsutil import atomic_write_text

log = logging.getLogger(__name__)

VERSION = 1


@dataclass(frozen=True)
class PreparedDevice:
    """One device of a prepared claim, as NodePrepareResources returns it."""

    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    share_id: str = ""  # which share of a device several claims hold (KEP-5075)
    admin: bool = False  # admin access (KEP-5018): a monitor's, not a holder's


@dataclass(frozen=True)
class PreparedClaim:
    """A prepared claim: its devices, its CDI spec file (None when it needs none),
    that file's text and the claim's pods (None and none in a checkpoint written before
    they were recorded)."""

    ref: ClaimRef
    devices: tuple[PreparedDevice, ...]
    spec_file: str | None
    spec_text: str | None = None
    consumers: tuple[str, ...] = ()  # the pods it was reserved for when prepared

    @property
    def cdi_ids(self) -> tuple[str, ...]:
        """Every CDI name the answer gives the kubelet, once each."""
        return tuple(dict.fromkeys(c for d in self.devices for c in d.cdi_ids))


@dataclass(frozen=True)
class Saved:
    """A checkpoint's content: the boot it was written in (None: not recorded) and its claims."""

    boot_id: str | None
    claims: dict[str, PreparedClaim]


def spec_text(spec_json: Mapping[str, Any]) -> str:
    """A spec's file text from its JSON, as CdiSpec.text() renders it."""
    return json.dumps(spec_json, indent=2, sort_keys=True) + "\n"


def _claim_json(claim: PreparedClaim) -> dict[str, Any]:
    out: dict[str, Any] = {
        "namespace": claim.ref.namespace,
        "name": claim.ref.name,
        "specFile": claim.spec_file,
        "devices": [
            {
                "requests": list(d.requests),
                "pool": d.pool,
                "device": d.device,
                "cdiDeviceIDs": list(d.cdi_ids),
                **({"shareID": d.share_id} if d.share_id else {}),
                **({"adminAccess": True} if d.admin else {}),
            }
            for d in claim.devices
        ],
    }
    if claim.spec_text is not None:
        out["cdiSpec"] = json.loads(claim.spec_text)
    if claim.consumers:
        out["pods"] = list(claim.consumers)
    return out


def _claim_from_json(uid: str, data: Mapping[str, Any]) -> PreparedClaim:
    return PreparedClaim(
        ClaimRef(uid=uid, namespace=str(data["namespace"]), name=str(data["name"])),
        tuple(
            PreparedDevice(
                requests=tuple(str(r) for r in d["requests"]),
                pool=str(d["pool"]),
                device=str(d["device"]),
                cdi_ids=tuple(str(c) for c in d["cdiDeviceIDs"]),
                share_id=str(d.get("shareID") or ""),
                admin=d.get("adminAccess") is True,
            )
            for d in data["devices"]
        ),
        None if data.get("specFile") is None else str(data["specFile"]),
        None if data.get("cdiSpec") is None else spec_text(data["cdiSpec"]),
        tuple(str(p) for p in data.get("pods", ())),
    )


def dumps(driver: str, claims: Mapping[str, PreparedClaim], boot_id: str | None = None) -> str:
    body: dict[str, Any] = {
        "version": VERSION,
        "driver": driver,
        "claims": {uid: _claim_json(claims[uid]) for uid in sorted(claims)},
    }
    if boot_id is not None:
        body["bootID"] = boot_id
    return json.dumps(body, indent=2, sort_keys=True) + "\n"


def loads_saved(text: str) -> Saved:
    """Parse a checkpoint; ValueError (KeyError, TypeError) for a file we did not write."""
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise ValueError(f"not a version {VERSION} checkpoint")
    claims = data["claims"]
    if not isinstance(claims, dict):
        raise ValueError("claims is not an object")
    boot_id = data.get("bootID")
    if boot_id is not None and not isinstance(boot_id, str):
        raise ValueError("bootID is not a string")
    return Saved(
        boot_id or None,
        {str(uid): _claim_from_json(str(uid), entry) for uid, entry in claims.items()},
    )


def loads(text: str) -> dict[str, PreparedClaim]:
    """The claims of a checkpoint (see :func:`loads_saved`)."""
    return loads_saved(text).claims


class Checkpoint:
    """The checkpoint file of one driver (``<kubelet-plugins-dir>/<driver>/checkpoint.json``).

    ``boot_id`` is the boot this process runs in: every save records it.
    """

    def __init__(self, path: Path, driver: str, boot_id: str | None = None) -> None:
        self.path = path
        self.driver = driver
        self.boot_id = boot_id
        self._seen: tuple[int, int, int] | None = None  # the file as last read or written

    def _signature(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def changed(self) -> bool:
        """Whether the file is not the one last read or written here (another instance of
        the driver wrote it: the pods of a rolling update share it)."""
        return self._signature() != self._seen

    def load(self) -> dict[str, PreparedClaim]:
        return self.read().claims

    def read(self) -> Saved:
        """What the file holds; empty when it is missing or unreadable (logged)."""
        empty = Saved(None, {})
        self._seen = self._signature()
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return empty
        except OSError as exc:
            # Saving will fail the same way, and say so in every claim's error.
            log.error("checkpoint %s cannot be read (%s); no prepared claims kept", self.path, exc)
            return empty
        try:
            return loads_saved(text)
        except (ValueError, KeyError, TypeError) as exc:
            aside = self.path.with_name(self.path.name + ".corrupt")
            log.error(
                "checkpoint %s cannot be read (%s); moved to %s, starting with no prepared claims",
                self.path,
                exc,
                aside,
            )
            os.replace(self.path, aside)
            return empty

    def save(self, claims: Mapping[str, PreparedClaim]) -> None:
        """Replace the file atomically; OSError propagates (the caller fails the claims)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, dumps(self.driver, claims, self.boot_id), mode=0o600)
        self._seen = self._signature()


BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


def read_boot_id(path: Path = BOOT_ID_PATH) -> str | None:
    """The kernel's boot ID (a new random UUID at every boot); None when unreadable."""
    try:
        return path.read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("no boot ID from %s (%s): a reboot is noticed by missing specs only", path, exc)
        return None
