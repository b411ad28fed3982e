"""Kubernetes resource quantities (``2``, ``"500m"``, ``"1Gi"``), for the emulator's pod specs
and a DRA claim's opaque parameters alike."""

from __future__ import annotations

import re
from fractions import Fraction

_QUANTITY_RE = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(value: object) -> Fraction:
    """A Kubernetes resource quantity (``2``, ``"500m"``, ``"1Gi"``, ``"1e3"``) as a Fraction.

    Raises ValueError for anything else (booleans included: YAML's ``true``
    is no quantity).
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a quantity")
    match = _QUANTITY_RE.fullmatch(value.strip())
    if match is None:
        raise ValueError(
            f"{value!r} is not a quantity (quantities must match the regular expression "
            r"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$')"
        )
    number = Fraction(match["number"])
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        return number * Fraction(1024) ** _BINARY[suffix]
    exponent = _DECIMAL[suffix] if suffix in _DECIMAL else int(suffix[1:])
    return number * Fraction(10) ** exponent


def binary_si(value: int) -> str:
    """A whole count in the canonical binary form the API server writes for a quantity made
    in binary units (apimachinery's ``NewQuantity(v, BinarySI)``): the largest power of 1024
    that divides it exactly (``85899345920`` -> ``80Gi``), plain below 1024 or when none
    does (``1536`` -> ``1536``), as NVIDIA's DRA driver writes its capacities."""
    if value < 1024 and value > -1024:
        return str(value)
    for suffix, power in sorted(_BINARY.items(), key=lambda item: -item[1]):
        unit = 1024**power
        if value % unit == 0:
            return f"{value // unit}{suffix}"
    return str(value)
