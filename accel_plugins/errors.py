"""The project's exception hierarchy: callers catch these, never bare Exception."""

from __future__ import annotations


class AccelPluginsError(Exception):
    """Base of every error this project raises on purpose."""


class ConfigError(AccelPluginsError):
    """A configuration file, flag or environment variable is invalid.

    The message names the source (file or flag), the field path and the reason,
    so the CLI can print it as is and exit non-zero.
    """

    def __init__(self, source: str, field: str, reason: str) -> None:
        self.source = source
        self.field = field
        self.reason = reason
        where = f"{source}: {field}" if field else source
        super().__init__(f"{where}: {reason}")


class AllocationError(AccelPluginsError):
    """A request names devices that cannot be handed out (bad input, not a bug)."""


# gRPC status code names, so backends can choose one without importing grpc.
STATUS_CODES = frozenset(
    {
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    }
)


class HookError(AccelPluginsError):
    """A backend hook refuses a call with a gRPC status of its choosing.

    ``code`` is the status name (``"FAILED_PRECONDITION"``, ``"UNAVAILABLE"``,
    ...); the kubelet receives it with this message. Any other exception from
    a hook becomes INTERNAL.
    """

    def __init__(self, message: str, code: str = "FAILED_PRECONDITION") -> None:
        if code not in STATUS_CODES or code == "OK":
            raise ValueError(f"HookError code {code!r} is not a gRPC error status name")
        super().__init__(message)
        self.code = code


class InvalidSnapshotError(ConfigError):
    """A backend published a resource name or device ID the kubelet cannot take.

    A programming or configuration error of the backend, not a hardware state:
    the process stops (exit 2) instead of serving something half right.
    """

    def __init__(self, field: str, reason: str) -> None:
        super().__init__("backend snapshot", field, reason)


class BackendError(AccelPluginsError):
    """A backend failed to read hardware state; devices go unhealthy, the process lives."""


class RegistrationError(AccelPluginsError):
    """The kubelet refused or could not be reached for a Register call."""
