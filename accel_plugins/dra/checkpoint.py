"""Prepared claims on disk, so a restarted plugin answers as before.

The kubelet may call NodePrepareResources again for a claim it already had
prepared (its own restart, a retry) and calls NodeUnprepareResources for
claims prepared by an earlier run of the plugin; both must give the same
answer as if the plugin had never stopped. The file is replaced atomically
on every change; one that cannot be read is set aside (``.corrupt``), logged,
and the plugin starts empty: a claim prepared again is written again, and
unpreparing an unknown claim still removes its spec by name.
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
from accel_plugins.fsutil import atomic_write_text

log = logging.getLogger(__name__)

VERSION = 1


@dataclass(frozen=True)
class PreparedDevice:
    """One device of a prepared claim, as NodePrepareResources returns it."""

    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]


@dataclass(frozen=True)
class PreparedClaim:
    """A prepared claim: its devices and its CDI spec file (None when it needs none)."""

    ref: ClaimRef
    devices: tuple[PreparedDevice, ...]
    spec_file: str | None


def _claim_json(claim: PreparedClaim) -> dict[str, Any]:
    return {
        "namespace": claim.ref.namespace,
        "name": claim.ref.name,
        "specFile": claim.spec_file,
        "devices": [
            {
                "requests": list(d.requests),
                "pool": d.pool,
                "device": d.device,
                "cdiDeviceIDs": list(d.cdi_ids),
            }
            for d in claim.devices
        ],
    }


def _claim_from_json(uid: str, data: Mapping[str, Any]) -> PreparedClaim:
    return PreparedClaim(
        ClaimRef(uid=uid, namespace=str(data["namespace"]), name=str(data["name"])),
        tuple(
            PreparedDevice(
                requests=tuple(str(r) for r in d["requests"]),
                pool=str(d["pool"]),
                device=str(d["device"]),
                cdi_ids=tuple(str(c) for c in d["cdiDeviceIDs"]),
            )
            for d in data["devices"]
        ),
        None if data.get("specFile") is None else str(data["specFile"]),
    )


def dumps(driver: str, claims: Mapping[str, PreparedClaim]) -> str:
    body = {
        "version": VERSION,
        "driver": driver,
        "claims": {uid: _claim_json(claims[uid]) for uid in sorted(claims)},
    }
    return json.dumps(body, indent=2, sort_keys=True) + "\n"


def loads(text: str) -> dict[str, PreparedClaim]:
    """Parse a checkpoint; ValueError (KeyError, TypeError) for a file we did not write."""
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise ValueError(f"not a version {VERSION} checkpoint")
    claims = data["claims"]
    if not isinstance(claims, dict):
        raise ValueError("claims is not an object")
    return {str(uid): _claim_from_json(str(uid), entry) for uid, entry in claims.items()}


class Checkpoint:
    """The checkpoint file of one driver (``<kubelet-plugins-dir>/<driver>/checkpoint.json``)."""

    def __init__(self, path: Path, driver: str) -> None:
        self.path = path
        self.driver = driver

    def load(self) -> dict[str, PreparedClaim]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            # Saving will fail the same way, and say so in every claim's error.
            log.error("checkpoint %s cannot be read (%s); no prepared claims kept", self.path, exc)
            return {}
        try:
            return loads(text)
        except (ValueError, KeyError, TypeError) as exc:
            aside = self.path.with_name(self.path.name + ".corrupt")
            log.error(
                "checkpoint %s cannot be read (%s); moved to %s, starting with no prepared claims",
                self.path,
                exc,
                aside,
            )
            os.replace(self.path, aside)
            return {}

    def save(self, claims: Mapping[str, PreparedClaim]) -> None:
        """Replace the file atomically; OSError propagates (the caller fails the claims)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, dumps(self.driver, claims), mode=0o600)
