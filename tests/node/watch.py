"""Await a state of an API object by watching it, not by polling."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightkube import Client


def watch_until(kube: Client, resource: Any, done: Callable[[Any], bool], **selector: Any) -> Any:
    """The first object ``done`` accepts among the watch's events (the listing first).

    A watch that lightkube resumes may meet "Too large resource version" (504) from an API
    server whose cache lags behind the version it last sent; that only means start again.
    No deadline of its own: the suite's per-test timeout (conftest) bounds a stuck wait.
    """
    from lightkube import ApiError

    while True:
        try:
            for _, obj in kube.watch(resource, **selector):
                if done(obj):
                    return obj
        except ApiError as exc:
            if exc.status.code != 504:
                raise
