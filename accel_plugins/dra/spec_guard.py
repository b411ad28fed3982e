"""Every CDI name a claim's answer gives the kubelet is defined on disk first.

The kubelet hands a prepared claim's CDI names to the runtime, which refuses
the container when no spec defines one. Specs live in /var/run/cdi, a tmpfs a
reboot empties, while the checkpoint naming them survives; anyone may remove
a file too. So before an answer goes out, the claim's own spec is written
again from the checkpoint's record when it is missing or changed, the
backend's specs (CDI device-list strategies) are written again by the
backend, and then the directory is read to check every name; a name still
undefined turns the answer into the claim's error.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Collection
from pathlib import Path

from accel_plugins.dra import claim_cdi
from accel_plugins.dra.checkpoint import PreparedClaim
from accel_plugins.dra.model import ClaimError
from accel_plugins.plugin.backend import CdiSpecKeeper
from accel_plugins.runtime.cdi_defined import DefinedDevices
from accel_plugins.runtime.hooks import HookFailedError, HookRunner

log = logging.getLogger(__name__)


class SpecGuard:
    """Checks and mends the CDI specs of ``driver``'s answers in ``directory``."""

    def __init__(self, driver: str, directory: Path) -> None:
        self.driver = driver
        self.directory = directory
        self._own_prefix = claim_cdi.claim_kind(driver) + "="
        self._defined = DefinedDevices(directory)

    def rewrite_claim_spec(self, claim: PreparedClaim) -> bool:
        """Write the claim's spec again from its record when the file is missing or differs.

        True when written; OSError propagates. A claim without a record (an older
        checkpoint) is left as it is.
        """
        if claim.spec_file is None or claim.spec_text is None:
            return False
        path = self.directory / claim.spec_file
        try:
            if path.read_text(encoding="utf-8") == claim.spec_text:
                return False
        except (FileNotFoundError, UnicodeDecodeError):
            pass
        claim_cdi.write_text(self.directory, claim.spec_file, claim.spec_text)
        return True

    def backend_names(self, cdi_ids: Collection[str]) -> list[str]:
        """The names that are not the claim specs' own (the backend's specs define them)."""
        return [c for c in cdi_ids if not c.startswith(self._own_prefix)]

    async def ensure_backend_specs(
        self, keeper: CdiSpecKeeper | None, resources: Collection[str], timeout: float
    ) -> None:
        """Let the backend write again its specs for ``resources`` (vendor code: off the
        loop, by the runtime's hook rule); ClaimError when it fails."""
        if keeper is None:
            return  # no backend running now: the check below says what is missing
        hooks = HookRunner(timeout)
        for resource in sorted(resources):
            try:
                await hooks.call(
                    "ensure_cdi_specs",
                    resource,
                    functools.partial(keeper.ensure_cdi_specs, resource),
                )
            except HookFailedError as exc:
                raise ClaimError(exc.message, logged=exc.logged) from None

    async def check_defined(self, cdi_ids: Collection[str]) -> None:
        """ClaimError naming every CDI name no spec in the directory defines now."""
        try:
            missing = await asyncio.to_thread(self._defined.missing, tuple(cdi_ids))
        except OSError as exc:
            raise ClaimError(
                f"cannot read the CDI spec directory {self.directory}: {exc}"
            ) from None
        if missing:
            raise ClaimError(
                f"CDI devices {', '.join(missing)} are not defined by any spec in "
                f"{self.directory}; not answering with names the runtime would refuse"
            )
