"""The one rule for calling backend code, in both modes.

Backend hooks (allocate, preferred allocation, pre-start, a claim's configured
allocate, writing CDI specs) are vendor code we do not control, so every call
follows one rule, whichever kubelet API asked for it: it runs in a worker thread,
off the event loop, within the hook deadline (``--hook-timeout``). An
AllocationError (or a claim's ClaimParametersError, which is one) refuses the
request as the backend worded it; a HookError carries the gRPC status the backend
chose; a missed deadline is DEADLINE_EXCEEDED and anything else INTERNAL. Each
failure but a refusal is logged here, once, in the same words in both modes; the
mode turns the :class:`HookFailedError` into its answer (a gRPC status for a
device plugin, the claim's ``error`` for a DRA driver) and keeps serving.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from accel_plugins.errors import AccelPluginsError, AllocationError, HookError

log = logging.getLogger(__name__)

_T = TypeVar("_T")

# The gRPC status names (grpc.StatusCode members) a failed hook is answered with.
INVALID_ARGUMENT = "INVALID_ARGUMENT"
DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
INTERNAL = "INTERNAL"


class HookFailedError(AccelPluginsError):
    """A backend hook gave no answer: the status and message to answer the caller with.

    ``refused`` tells a refusal of the request (the backend said no) from a
    fault (it failed, or did not answer in time); ``logged`` is false only for an
    AllocationError, the request's own answer, which the mode reports as it reports
    any bad request.
    """

    def __init__(self, code: str, message: str, *, refused: bool, logged: bool = True) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.refused = refused
        self.logged = logged


@dataclass(frozen=True, slots=True)
class HookRunner:
    """Calls backend hooks by the rule above, within ``timeout`` seconds each."""

    timeout: float = 10.0

    async def call(
        self,
        name: str,
        resource: str,
        hook: Callable[[], _T],
        *,
        refused: str = INVALID_ARGUMENT,
    ) -> _T:
        """``hook()`` in a worker thread; HookFailedError when it gives no answer.

        ``name`` names the hook in messages and logs; ``refused`` is the status of
        an AllocationError (device plugins answer some hooks' refusals otherwise).
        """
        try:
            return await asyncio.wait_for(asyncio.to_thread(hook), self.timeout)
        except AllocationError as exc:
            raise HookFailedError(refused, str(exc), refused=True, logged=False) from None
        except HookError as exc:
            log.warning("resource %s: %s hook refused: %s (%s)", resource, name, exc, exc.code)
            raise HookFailedError(exc.code, f"resource {resource}: {exc}", refused=True) from None
        except TimeoutError:
            # The worker thread cannot be stopped; it finishes (or hangs) on its own.
            log.error(
                "resource %s: %s hook did not return within %gs", resource, name, self.timeout
            )
            message = f"resource {resource}: {name} did not answer within {self.timeout:g}s"
            raise HookFailedError(DEADLINE_EXCEEDED, message, refused=False) from None
        except Exception as exc:
            log.exception("resource %s: %s hook failed", resource, name)
            message = f"resource {resource}: {name} failed: {exc!r}"
            raise HookFailedError(INTERNAL, message, refused=False) from None
