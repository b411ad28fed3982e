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


def await_deleted(kube: Client, resource: Any, name: str, namespace: str | None = None) -> None:
    """Return once the object ``name`` is gone (at once if it is not there)."""
    from lightkube import ApiError

    selector: dict[str, Any] = {"fields": {"metadata.name": name}}
    if namespace is not None:
        selector["namespace"] = namespace
    while True:
        try:
            if not list(kube.list(resource, **selector)):
                return
            for event, _ in kube.watch(resource, **selector):
                if event == "DELETED":
                    return
        except ApiError as exc:
            if exc.status.code != 504:
                raise
