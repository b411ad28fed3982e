"""How NVIDIA's plugin reads the values of its config file v1, so we read them alike.

NVIDIA's plugin (``api/config/v1/config.go``) turns the YAML into JSON with
sigs.k8s.io/yaml and decodes that with Go's encoding/json into its structs.
What that means for a file, and what :class:`GoReader` does the same way:

- A struct's keys match ignoring case, the exact spelling first
  (``MigStrategy`` sets ``migStrategy``); keys a struct does not define are
  ignored. The decoders NVIDIA wrote itself (``sharing.timeSlicing``,
  ``sharing.mps``, their ``resources`` entries, ``resources.gpus``/``mig``
  entries) look their keys up exactly.
- A string field takes a number or a boolean as its text (sigs.k8s.io/yaml
  converts them), nothing else.
- An integer field takes any integral number: YAML ``2.0`` reaches Go as
  JSON ``2``.
- null leaves a field unset.

Unknown keys load, as in NVIDIA's plugin, but never silently: each one is
logged with the file, the key's path and the closest known key ("did you mean
migStrategy?"); ``strict`` makes it the error. A key matched only ignoring case
is read as NVIDIA reads it, with a warning naming the spelling to write.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Collection, Mapping, Sequence

from accel_plugins.errors import ConfigError
from accel_plugins.util.configfields import at, plain_kind

log = logging.getLogger(__name__)

# k8s.io/apimachinery IsDNS1123Subdomain, which NVIDIA's NewResourceName applies to the name part.
_DNS_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
DNS_SUBDOMAIN_MAX = 253
RESOURCE_PREFIX = "nvidia.com"
MAX_RESOURCE_NAME = 63
"""NVIDIA's MaxResourceNameLength, of the whole ``nvidia.com/<name>`` (consts.go)."""

_HEX = re.compile(r"^[0-9a-fA-F]+$")
# Go's time.ParseDuration: a sign, then one or more <decimal><unit>; a bare "0" too.
_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def closest(key: str, known: Collection[str]) -> str | None:
    """The known key ``key`` was most likely meant to be, or None."""
    lowered = {k.lower(): k for k in known}
    import difflib  # only for a misspelt key's suggestion

    match = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[match[0]] if match else None


def is_uuid(text: str) -> bool:
    """google/uuid's Parse: 8-4-4-4-12 hex, in braces, after ``urn:uuid:``, or 32 hex digits."""
    if len(text) == 36 + 9 and text[:9].lower() == "urn:uuid:":
        text = text[9:]
    elif len(text) == 36 + 2 and text[0] == "{" and text[-1] == "}":
        text = text[1:-1]
    if len(text) == 32:
        return bool(_HEX.match(text))
    if len(text) != 36 or [text[i] for i in (8, 13, 18, 23)] != ["-"] * 4:
        return False
    return bool(_HEX.match(text.replace("-", "")))


def is_uint(text: str) -> bool:
    """Go's strconv.ParseUint(text, 10, 0): decimal digits only, no sign, within 64 bits."""
    return text.isascii() and text.isdigit() and int(text) < 2**64


def is_gpu_uuid(text: str) -> bool:
    return text.startswith("GPU-") and is_uuid(text[4:])


def is_mig_uuid(text: str) -> bool:
    """``MIG-<uuid>``, or the older ``MIG-GPU-<uuid>/<gi>/<ci>``."""
    if not text.startswith("MIG-"):
        return False
    rest = text[4:]
    if is_uuid(rest):
        return True
    parts = rest.split("/", 2)
    return len(parts) == 3 and is_gpu_uuid(parts[0]) and all(is_uint(p) for p in parts[1:])


def is_mig_index(text: str) -> bool:
    parts = text.split(":", 1)
    return len(parts) == 2 and all(is_uint(p) for p in parts)


def resource_name(name: str) -> tuple[str, str | None]:
    """NVIDIA's NewResourceName: ``gpu`` is ``nvidia.com/gpu``; (name, reason it is invalid)."""
    full = name if name.startswith(f"{RESOURCE_PREFIX}/") else f"{RESOURCE_PREFIX}/{name}"
    if len(full) > MAX_RESOURCE_NAME:
        return full, f"{full!r} is longer than {MAX_RESOURCE_NAME} characters"
    part = full.split("/", 1)[1]
    if len(part) > DNS_SUBDOMAIN_MAX or not _DNS_SUBDOMAIN.match(part):
        return full, (
            f"{full!r} is not a valid resource name: after nvidia.com/, lower-case letters, "
            "digits, '-' and '.', starting and ending with a letter or digit"
        )
    return full, None


def parse_duration(text: str) -> float | None:
    """Seconds in a Go duration (``90s``, ``1h30m``, ``infinite``); None when it is not one."""
    if text == "infinite":
        return math.inf
    sign = -1.0 if text.startswith("-") else 1.0
    body = text[1:] if text[:1] in "+-" else text
    if body == "0":
        return 0.0
    if not body:
        return None
    total, pos = 0.0, 0
    for match in _DURATION_PART.finditer(body):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    return sign * total if pos == len(body) and pos > 0 else None


class GoReader:
    """Reads a decoded YAML document the way NVIDIA's Go structs take it; errors name the field."""

    def __init__(self, source: str, *, strict: bool = False) -> None:
        self.source = source
        self.strict = strict
        self.ignored: list[str] = []
        """Field paths of the keys let through unread, in reading order."""

    def fail(self, where: str, reason: str) -> ConfigError:
        return ConfigError(self.source, where, reason)

    def warn(self, where: str, message: str) -> None:
        log.warning("%s: %s: %s", self.source, where, message)

    # -- mappings --

    def struct(
        self, value: object, where: str, known: Sequence[str], *, fold: bool = True
    ) -> dict[str, object]:
        """A mapping's known keys by their canonical names; null is an empty mapping.

        ``fold``: keys match ignoring case too, as encoding/json does for
        structs; NVIDIA's own decoders (``fold=False``) match exactly.
        """
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(where, f"expected a mapping, got {plain_kind(value)}")
        out: dict[str, object] = {}
        folded: dict[str, str] = {}
        for raw, item in value.items():
            key = str(raw).lower() if isinstance(raw, bool) else str(raw)
            path = at(where, key)
            if key in known:
                out[key] = item
                continue
            canonical = next((k for k in known if k.lower() == key.lower()), None) if fold else None
            if canonical is not None:
                if self.strict:
                    raise self.fail(
                        path, f"write {canonical} (--strict-config wants NVIDIA's spelling)"
                    )
                self.warn(
                    path,
                    f"read as {canonical}, as NVIDIA's plugin reads it (Go matches keys ignoring "
                    f"case); write {canonical}",
                )
                folded[canonical] = key
                continue
            self.unknown(path, key, known)
        for canonical, key in folded.items():
            out.setdefault(canonical, value[key])
        return out

    def unknown(self, path: str, key: str, known: Collection[str]) -> None:
        guess = closest(key, known)
        hint = f"did you mean {guess}?" if guess else f"known keys: {', '.join(known)}"
        if self.strict:
            raise self.fail(
                path,
                f"unknown key; {hint} (--strict-config refuses keys NVIDIA's v1 does not define)",
            )
        self.ignored.append(path)
        self.warn(path, f"unknown key, ignored as NVIDIA's plugin ignores it; {hint}")

    # -- scalars; each returns None for null (the field stays unset) --

    def string(self, value: object, where: str) -> str | None:
        """A Go string field: text, or a number or boolean as its text."""
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int):
            return str(value)
        if isinstance(value, float):
            return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)
        raise self.fail(where, f"expected a string, got {plain_kind(value)}")

    def boolean(self, value: object, where: str) -> bool | None:
        if value is None or isinstance(value, bool):
            return value
        raise self.fail(where, f"expected true or false, got {plain_kind(value)}")

    def integer(self, value: object, where: str) -> int | None:
        """A Go int field: any integral number (``2.0`` is 2), not a boolean or a string."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(where, f"expected a whole number, got {plain_kind(value)}")
        if isinstance(value, float) and not value.is_integer():
            raise self.fail(where, f"expected a whole number, got {value}")
        return int(value)

    def duration(self, value: object, where: str) -> float | None:
        """NVIDIA's Duration: nanoseconds as a number, a Go duration string, or ``infinite``."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise self.fail(
                where, f"expected a duration (90s, 1h, infinite), got {plain_kind(value)}"
            )
        if isinstance(value, str):
            seconds = parse_duration(value)
            if seconds is None:
                raise self.fail(where, f"{value!r} is not a duration (90s, 1h30m, 500ms, infinite)")
            return seconds
        return float(int(value)) * 1e-9

    def resource(self, value: object, where: str) -> str:
        """A ResourceName: a string NVIDIA's NewResourceName accepts, qualified."""
        if not isinstance(value, str):
            raise self.fail(where, f"expected a resource name, got {plain_kind(value)}")
        name, problem = resource_name(value)
        if problem:
            raise self.fail(where, problem)
        return name
