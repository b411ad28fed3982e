"""NVML failures as this project's exceptions, so callers never see pynvml types."""

from __future__ import annotations

from accel_plugins.errors import BackendError


class NvmlError(BackendError):
    """An NVML call returned an error code.

    ``code`` is NVML's numeric return value and ``call`` the function that
    failed, so logs say exactly which query broke.
    """

    def __init__(self, call: str, code: int, text: str) -> None:
        self.call = call
        self.code = code
        self.text = text
        super().__init__(f"NVML {call} failed: {text} (code {code})")


class NvmlNotSupportedError(NvmlError):
    """The GPU or driver does not implement the query (old GPUs, vGPU, ...)."""


class NvmlNotFoundError(NvmlError):
    """The object asked for does not exist (an empty MIG slot, an unused link)."""


class GpuLostError(NvmlError):
    """The GPU fell off the bus or stopped answering; only that device is affected."""


class NvmlFunctionMissingError(NvmlNotSupportedError):
    """The loaded library predates the call (NVML_ERROR_FUNCTION_NOT_FOUND)."""


class NvmlInvalidArgumentError(NvmlError):
    """NVML_ERROR_INVALID_ARGUMENT, e.g. a link index past the GPU's last link."""


class NvmlTimeoutError(NvmlError):
    """NVML_ERROR_TIMEOUT: an event wait ended with no event."""


class NvmlInitError(BackendError):
    """NVML could not be loaded or initialised; the message says what was tried."""
