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


class BackendError(AccelPluginsError):
    """A backend failed to read hardware state; devices go unhealthy, the process lives."""


class RegistrationError(AccelPluginsError):
    """The kubelet refused or could not be reached for a Register call."""
