"""Checking a jittered backoff: each delay between its base and twice its base, not all at it."""

from __future__ import annotations

from collections.abc import Sequence


def within_jitter(slept: Sequence[float], bases: Sequence[float]) -> bool:
    """``slept`` is ``bases`` stretched by client-go's jitter 1.0 (runtime/backoff.py):
    each in [base, 2 base], and at least one past its base (the jitter is there)."""
    if len(slept) != len(bases):
        return False
    inside = all(b <= s <= 2 * b for s, b in zip(slept, bases, strict=True))
    return inside and (not bases or any(s > b for s, b in zip(slept, bases, strict=True)))
