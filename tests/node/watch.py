"""Await a state of an API object by watching it, not by polling."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightkube import Client


# Every wait of the suite ends on an event; this bounds one that never comes, so that a
# stuck test fails in minutes with what it waited for instead of eating the CI budget.
WAIT_BOUND = 180.0


def watch_until(
    kube: Client,
    resource: Any,
    done: Callable[[Any], bool],
    within: float | None = WAIT_BOUND,
    **selector: Any,
) -> Any:
    """The first object ``done`` accepts among the watch's events (the listing first).

    The watch starts at resourceVersion 0 ("any"): the API server answers it from its
    cache at once, with the current objects first, instead of first waiting for the cache
    to catch up with etcd. A watch that lightkube resumes may still meet "Too large
    resource version" (504) from a cache that lags behind the version it last sent; that
    only means start again.
    AssertionError after ``within`` seconds (None: no bound of its own).
    """
    if within is not None:
        what = f"{resource.__name__} {selector}"
        return _bounded(within, what, lambda: watch_until(kube, resource, done, None, **selector))
    from lightkube import ApiError

    with _own_client(kube) as watcher:
        while True:
            try:
                for _, obj in watcher.watch(resource, resource_version="0", **selector):
                    if done(obj):
                        return obj
            except ApiError as exc:
                if exc.status.code != 504:
                    raise


def await_deleted(kube: Client, resource: Any, name: str, namespace: str | None = None) -> None:
    """Return once the object ``name`` is gone (at once if it is not there)."""
    _bounded(
        WAIT_BOUND,
        f"{resource.__name__} {name} deleted",
        lambda: _await_deleted(kube, resource, name, namespace),
    )


def _await_deleted(kube: Client, resource: Any, name: str, namespace: str | None) -> None:
    from lightkube import ApiError

    selector: dict[str, Any] = {"fields": {"metadata.name": name}}
    if namespace is not None:
        selector["namespace"] = namespace
    with _own_client(kube) as watcher:
        while True:
            try:
                # Watched from the listing's version: a deletion between the two is seen.
                listing = watcher.list(resource, **selector)
                if not list(listing):
                    return
                version = listing.resourceVersion
                for event, _ in watcher.watch(resource, resource_version=version, **selector):
                    if event == "DELETED":
                        return
            except ApiError as exc:
                if exc.status.code != 504:
                    raise


@contextlib.contextmanager
def _own_client(kube: Client) -> Iterator[Client]:
    # Each watch on a client of its own, closed when the wait ends: an abandoned watch
    # must neither hold a connection of ``kube``'s pool nor stay open on the API server.
    from lightkube import Client

    watcher = Client(kube.config, trust_env=False)
    try:
        yield watcher
    finally:
        watcher.close()


def _bounded(seconds: float, what: str, wait: Callable[[], Any]) -> Any:
    # lightkube's watch cannot be interrupted: it runs in a daemon thread that ends with
    # its connection (at the latest when the node's API server stops).
    outcome: list[Any] = []
    failure: list[BaseException] = []
    finished = threading.Event()

    def run() -> None:
        try:
            outcome.append(wait())
        except BaseException as exc:
            failure.append(exc)
        finally:
            finished.set()

    threading.Thread(target=run, daemon=True).start()
    if not finished.wait(seconds):
        raise AssertionError(f"{what}: not within {seconds:.0f} s")
    if failure:
        raise failure[0]
    return outcome[0]
