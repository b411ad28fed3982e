"""Polling what sends no event: API objects another process writes, files it renames."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def until(check: Callable[[], Awaitable[T]], what: str, timeout: float = 30.0) -> T:
    """Poll ``check`` until it returns something truthy; TimeoutError after ``timeout``.

    For state that lives where nothing can be awaited (the API server's objects, another
    process's files); ``what`` says what was awaited when it fails.
    """
    try:
        async with asyncio.timeout(timeout):
            while not (found := await check()):  # noqa: ASYNC110
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise TimeoutError(f"not within {timeout:g}s: {what}") from None
    return found
