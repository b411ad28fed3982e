"""One cordon: an operator takes a device out of service, in both modes, across restarts.

A cordoned device is served Unhealthy with a ``cordoned`` reason carrying the
operator's text; everything else (ListAndWatch, Allocate's refusal, the DRA
taint and Prepare's refusal, Node Events, ``/metrics``, ``inspect``) follows
from that one snapshot, as for any other reason. The backend never sees it: the
cordons are laid over each tree it publishes, so an uncordoned device shows
whatever health the backend gives it (Unhealthy for another reason stays so).

Two sources, merged (the file's text wins for a device named in both):

- the state file ``<state-dir>/cordons.json`` that ``accel-plugins cordon`` /
  ``uncordon`` edit on the node; it outlives the plugin, so a cordon survives a
  restart (and a switch of mode). The running plugin watches it with inotify.
- the Node annotation ``accel-plugins.io/cordon: 'DEVICE=REASON,...'``, for use
  without a shell on the node (``accel_plugins.kube.cordon`` watches it).

A device is named by its ID as ListAndWatch shows it, or by its DRA device name.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from accel_plugins.errors import ConfigError
from accel_plugins.plugin.device import Device, DeviceTree, Health
from accel_plugins.plugin.dra_names import DraNamer
from accel_plugins.plugin.health_reason import HealthReason, ReasonKind
from accel_plugins.util.watch import DIR_CHANGES, IN_CLOSE_WRITE, DirEvent, DirWatcher

log = logging.getLogger(__name__)

DEFAULT_STATE_DIR = Path("/var/lib/accel-plugins")
CORDON_FILE = "cordons.json"
LOCK_FILE = ".cordons.lock"
ANNOTATION = "accel-plugins.io/cordon"
FORMAT_VERSION = 1
MAX_REASON = 256  # one line of text, not a document

Namer = Callable[[str, Device], str | None]
"""The DRA device name of a device (None: it has none), so a cordon may use it."""


def cordon_reason(text: str) -> HealthReason:
    return HealthReason(ReasonKind.CORDONED, text)


def check_entry(device: str, reason: str) -> None:
    """ConfigError for a name or reason that the file or the annotation cannot carry."""
    if not device or any(c in device for c in ",= \t\n"):
        raise ConfigError("DEVICE", device, "a device ID or DRA device name, without , = or spaces")
    if "\n" in reason or "," in reason or len(reason) > MAX_REASON:
        raise ConfigError(
            "--reason", reason, f"one line of at most {MAX_REASON} characters, without commas"
        )


def parse_annotation(text: str) -> dict[str, str]:
    """``'gpu-0=bad fan,gpu-1'`` -> {gpu-0: bad fan, gpu-1: ""}; ConfigError when malformed."""
    cordons: dict[str, str] = {}
    for item in text.split(","):
        device, _, reason = item.strip().partition("=")
        device, reason = device.strip(), reason.strip()
        if not device and not reason:
            continue  # a trailing comma
        check_entry(device, reason)
        cordons[device] = reason
    return cordons


def read_file(path: Path) -> dict[str, str]:
    """The cordons in ``path`` ({} when it does not exist); ConfigError when unreadable."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot read the cordon file: {exc}") from exc
    import json  # only once a file exists: json is off the path to registration (issue 17)

    try:
        data = json.loads(text)
        version, cordons = data["version"], data["cordons"]
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(str(path), "", f"not a cordon file: {exc}") from exc
    if version != FORMAT_VERSION or not isinstance(cordons, dict):
        raise ConfigError(str(path), "", f"cordon file version {version!r} is not {FORMAT_VERSION}")
    return {str(k): str(v) for k, v in cordons.items()}


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[Path]:
    """The file, with the directory's lock held: two commands at once lose neither edit."""
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield state_dir / CORDON_FILE
    finally:
        os.close(fd)


def _write(path: Path, cordons: Mapping[str, str]) -> None:
    import json
    import tempfile

    # Renamed into place: the plugin never reads half a file.
    body = json.dumps({"version": FORMAT_VERSION, "cordons": dict(sorted(cordons.items()))})
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".cordons.")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(body + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def cordon(state_dir: Path, device: str, reason: str) -> None:
    """Add (or re-word) a cordon in the state file."""
    check_entry(device, reason)
    with _locked(state_dir) as path:
        _write(path, {**read_file(path), device: reason})


def uncordon(state_dir: Path, device: str) -> bool:
    """Remove a cordon from the state file; False when there was none."""
    with _locked(state_dir) as path:
        cordons = read_file(path)
        if device not in cordons:
            return False
        del cordons[device]
        _write(path, cordons)
        return True


def apply_cordons(
    tree: DeviceTree, cordons: Mapping[str, str], namer: Namer | None = None
) -> DeviceTree:
    """``tree`` with each device named in ``cordons`` (by ID or DRA name) Unhealthy,
    reason ``cordoned``. The same tree when nothing is cordoned."""
    if not cordons:
        return tree

    def text(resource: str, device: Device) -> str | None:
        if device.id in cordons:
            return cordons[device.id]
        name = namer(resource, device) if namer is not None else None
        return cordons.get(name) if name is not None else None

    out: dict[str, dict[str, Device]] = {}
    for resource, devices in tree.items():
        served = dict(devices)
        for device_id, device in devices.items():
            reason = text(resource, device)
            if reason is not None:
                served[device_id] = device.with_health(Health.UNHEALTHY, cordon_reason(reason))
        out[resource] = served
    return out


class Cordons:
    """The node's cordons from both sources; tells its listeners when they change."""

    def __init__(self, state_dir: Path = DEFAULT_STATE_DIR) -> None:
        self.state_dir = state_dir
        self._file: dict[str, str] = {}
        self._annotation: dict[str, str] = {}
        self._listeners: list[Callable[[], None]] = []
        self.reload_file()

    @property
    def path(self) -> Path:
        return self.state_dir / CORDON_FILE

    @property
    def current(self) -> dict[str, str]:
        return {**self._annotation, **self._file}

    def subscribe(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def _set(self, file: dict[str, str], annotation: dict[str, str]) -> None:
        before = self.current
        self._file, self._annotation = file, annotation
        if self.current != before:
            log.info("cordoned devices: %s", _describe(self.current))
            for listener in self._listeners:
                listener()

    def reload_file(self) -> None:
        """Read the state file again; a bad one is logged and the last good cordons kept."""
        try:
            cordons = read_file(self.path)
        except ConfigError as exc:
            log.error("%s; keeping the cordons read before", exc)
            return
        self._set(cordons, self._annotation)

    def set_annotation(self, text: str | None) -> None:
        """The Node's annotation now (None: absent); a malformed one is logged and kept."""
        try:
            cordons = parse_annotation(text or "")
        except ConfigError as exc:
            log.error("Node annotation %s: %s; keeping the cordons read before", ANNOTATION, exc)
            return
        self._set(self._file, cordons)

    def apply(
        self, tree: DeviceTree, backend: object = None, default_namer: Namer | None = None
    ) -> DeviceTree:
        """``tree`` as served: cordoned devices named by ID, or by DRA name (``backend``'s
        when it is a DraNamer, else ``default_namer``'s)."""
        namer = backend.dra_device_name if isinstance(backend, DraNamer) else default_namer
        return apply_cordons(tree, self.current, namer)

    def try_watch(self) -> DirWatcher | None:
        """:meth:`watch`, or None (logged) when the file cannot be watched: the cordons
        read at start still apply, later edits wait for a restart."""
        try:
            return self.watch()
        except OSError as exc:
            log.error("cannot watch the cordon file %s: %s", self.path, exc)
            return None

    def watch(self) -> DirWatcher:
        """Follow the state file with inotify until the watcher is closed (OSError: cannot)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)

        def on_event(event: DirEvent) -> None:
            if event.overflow or event.name == CORDON_FILE:
                self.reload_file()

        watcher = DirWatcher(on_event, mask=DIR_CHANGES | IN_CLOSE_WRITE)
        try:
            watcher.add(self.state_dir)
        except OSError:
            watcher.close()
            raise
        self.reload_file()  # what changed before the watch was in place
        return watcher


def _describe(cordons: Mapping[str, str]) -> str:
    entries = (f"{d} ({r or 'no reason given'})" for d, r in sorted(cordons.items()))
    return ", ".join(entries) or "none"
