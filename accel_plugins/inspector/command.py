"""``accel-plugins inspect``: query any device plugin socket the way the kubelet would.

Only the public v1beta1 DevicePlugin API is used, so this works against any
vendor's plugin. With ``allocate=N`` it also dry-runs an allocation: the
plugin's preferred pick of N healthy devices (or the first N sorted when it
offers no preference) and the Allocate answer for them; with ``pre_start``
it then calls PreStartContainer on those devices when the plugin requires it
(``pre_start_required``), as the kubelet does at container start. The plugin
may do real work in Allocate and PreStartContainer, as for the kubelet.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from accel_plugins.errors import AccelPluginsError
from accel_plugins.inspector.reasons import Reasons, read_reasons
from accel_plugins.kubelet_emulator.allocation import check_preferred, first_sorted
from accel_plugins.kubelet_emulator.client import PluginClient
from accel_plugins.kubelet_emulator.errors import KubeletError, PluginCallError
from accel_plugins.kubelet_emulator.model import ContainerResponse, DeviceState, PluginOptions

# sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
_MAX_SOCKET_PATH = 107


class InspectError(AccelPluginsError):
    """Inspecting a plugin failed; the message is one line, fit for the terminal."""


@dataclass(frozen=True, slots=True)
class PreStart:
    """PreStartContainer after the dry run: called only when the plugin requires it;
    ``error`` is the plugin's status and message when it failed."""

    called: bool
    error: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"called": self.called, "ok": self.error is None, "error": self.error}


@dataclass(frozen=True, slots=True)
class DryRun:
    """The outcome of a dry-run allocation."""

    requested: int
    preferred_by_plugin: bool
    device_ids: tuple[str, ...]
    response: ContainerResponse
    pre_start: PreStart | None = None  # None: not asked for

    def to_dict(self) -> dict[str, object]:
        return {
            "requested": self.requested,
            "preferred_by_plugin": self.preferred_by_plugin,
            "device_ids": list(self.device_ids),
            "response": self.response.to_dict(),
            "pre_start": None if self.pre_start is None else self.pre_start.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class InspectReport:
    """What a plugin socket told us."""

    socket: Path
    options: PluginOptions
    devices: tuple[DeviceState, ...]
    dry_run: DryRun | None = None
    # Where it ran (--node-name, NODE_NAME: set in the chart's pods, where operators run
    # inspect through kubectl exec); reports gathered from many nodes say whose they are.
    node: str = ""
    # Why devices are Unhealthy, from the plugin's /metrics (None: not asked for).
    reasons: Reasons | None = None

    @property
    def total(self) -> int:
        return len(self.devices)

    @property
    def healthy(self) -> int:
        return sum(d.healthy for d in self.devices)

    @property
    def unhealthy(self) -> int:
        return self.total - self.healthy

    @property
    def pre_start_failed(self) -> bool:
        run = self.dry_run
        return run is not None and run.pre_start is not None and run.pre_start.error is not None

    def reason(self, device: DeviceState) -> str | None:
        """The device's reason when known (reasons asked for, the device Unhealthy)."""
        if self.reasons is None or device.healthy:
            return None
        return self.reasons.by_device.get(device.id)

    def to_dict(self) -> dict[str, object]:
        devices: list[dict[str, object]] = [d.to_dict() for d in self.devices]
        if self.reasons is not None:
            for entry, device in zip(devices, self.devices, strict=True):
                entry["reason"] = self.reason(device)
        out: dict[str, object] = {
            "node": self.node or None,
            "socket": str(self.socket),
            "options": self.options.to_dict(),
            "counts": {"total": self.total, "healthy": self.healthy, "unhealthy": self.unhealthy},
            "devices": devices,
            "dry_run": self.dry_run.to_dict() if self.dry_run is not None else None,
        }
        if self.reasons is not None:
            out["reasons"] = self.reasons.to_dict()
        return out


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _check_socket(socket: Path) -> None:
    try:
        mode = os.stat(socket).st_mode
    except FileNotFoundError:
        raise InspectError(f"{socket}: no such file (is the plugin running?)") from None
    except OSError as e:
        raise InspectError(f"{socket}: cannot access: {e.strerror}") from None
    if not stat.S_ISSOCK(mode):
        raise InspectError(f"{socket}: not a unix socket")
    if len(os.fsencode(socket)) > _MAX_SOCKET_PATH:
        raise InspectError(
            f"{socket}: path longer than {_MAX_SOCKET_PATH} bytes, unix sockets cannot be "
            "reached there; run from the socket's directory with a relative path"
        )


def _explain(socket: Path, error: PluginCallError, timeout: float) -> InspectError:
    details = _one_line(error.details)
    if error.code == grpc.StatusCode.UNAVAILABLE:
        if "connection refused" in details.lower():
            return InspectError(f"{socket}: nobody is listening (connection refused)")
        return InspectError(f"{socket}: cannot connect: {details}")
    if error.code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return InspectError(
            f"{socket}: no answer to {error.method} within {timeout:g}s "
            "(is this a device plugin socket?)"
        )
    if error.code == grpc.StatusCode.UNIMPLEMENTED:
        return InspectError(
            f"{socket}: the plugin does not implement {error.method} (not a v1beta1 device plugin?)"
        )
    return InspectError(f"{socket}: {error.method} failed: {error.code.name}: {details}")


async def _dry_run(
    client: PluginClient,
    options: PluginOptions,
    devices: list[DeviceState],
    count: int,
    pre_start: bool = False,
) -> DryRun:
    available = sorted(d.id for d in devices if d.healthy)
    if count > len(available):
        raise InspectError(
            f"{client.socket_path}: cannot dry-run an allocation of {count}: "
            f"only {len(available)} healthy device(s)"
        )
    if options.get_preferred_allocation_available:
        answer = await client.preferred(available, [], count)
        chosen = check_preferred("this plugin", answer, available, count)
    else:
        chosen = first_sorted(available, count)
    [response] = await client.allocate([chosen])
    started = None
    if pre_start:
        started = PreStart(called=options.pre_start_required)
        if options.pre_start_required:
            try:
                await client.pre_start(chosen)
            except PluginCallError as e:
                started = PreStart(True, f"{e.code.name}: {_one_line(e.details)}")
    return DryRun(
        requested=count,
        preferred_by_plugin=options.get_preferred_allocation_available,
        device_ids=tuple(chosen),
        response=response,
        pre_start=started,
    )


async def inspect_plugin(
    socket: Path,
    *,
    allocate: int = 0,
    timeout: float = 5.0,
    pre_start: bool = False,
    node: str = "",
    metrics: tuple[str, int] | None = None,
) -> InspectReport:
    """Ask the plugin at ``socket`` for its options and devices; dry-run ``allocate`` devices,
    then PreStartContainer on them with ``pre_start`` (when the plugin requires it).
    ``node`` is the name of the node this runs on, reported as given. With ``metrics``
    (the plugin's metrics address) the Unhealthy devices' reasons are read from there
    (inspector/reasons.py); a plugin without them is reported as before."""
    socket = Path(socket)
    if allocate < 0:
        raise InspectError(f"--allocate must be 0 or more, got {allocate}")
    if pre_start and not allocate:
        raise InspectError("--pre-start needs --allocate N (the devices to start a container on)")
    _check_socket(socket)
    try:
        async with PluginClient(socket, timeout=timeout) as client:
            options = await client.options()
            devices = await client.first_devices(timeout)
            dry_run = (
                await _dry_run(client, options, devices, allocate, pre_start) if allocate else None
            )
    except PluginCallError as e:
        raise _explain(socket, e, timeout) from None
    except KubeletError as e:
        raise InspectError(_one_line(str(e))) from None
    reasons = (
        await asyncio.to_thread(read_reasons, metrics, socket, timeout)
        if metrics is not None
        else None
    )
    return InspectReport(
        socket=socket,
        options=options,
        devices=tuple(devices),
        dry_run=dry_run,
        node=node,
        reasons=reasons,
    )


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _table(rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _section(title: str, items: list[str]) -> list[str]:
    return [f"  {title}:"] + [f"    {item}" for item in items or ["(none)"]]


def _response_lines(response: ContainerResponse) -> list[str]:
    mounts = [
        f"{m.host_path} -> {m.container_path}{' (read-only)' if m.read_only else ''}"
        for m in response.mounts
    ]
    specs = [
        f"{d.host_path} -> {d.container_path} ({d.permissions or 'no permissions'})"
        for d in response.devices
    ]
    return [
        *_section("envs", [f"{k}={v}" for k, v in sorted(response.envs.items())]),
        *_section("mounts", mounts),
        *_section("device specs", specs),
        *_section("annotations", [f"{k}={v}" for k, v in sorted(response.annotations.items())]),
        *_section("CDI devices", list(response.cdi_devices)),
    ]


def render_text(report: InspectReport) -> str:
    """The report for a terminal."""
    opts = report.options
    lines = [f"node: {report.node}"] if report.node else []
    lines += [
        f"plugin socket: {report.socket}",
        f"options: pre_start_required={_yes(opts.pre_start_required)}, "
        f"get_preferred_allocation_available={_yes(opts.get_preferred_allocation_available)}",
        f"devices: {report.total} total, {report.healthy} healthy, {report.unhealthy} unhealthy",
    ]
    if report.devices:
        rows: list[tuple[str, ...]] = [("ID", "HEALTH", "NUMA")]
        rows += [(d.id, d.health, ",".join(map(str, d.numa_nodes)) or "-") for d in report.devices]
        if report.reasons is not None:
            rows = [(*rows[0], "REASON")] + [
                (*row, report.reason(d) or "-")
                for row, d in zip(rows[1:], report.devices, strict=True)
            ]
        lines += _table(rows)
    if report.reasons is not None and report.reasons.problem:
        lines.append(f"reasons: unavailable from {report.reasons.url}: {report.reasons.problem}")
    run = report.dry_run
    if run is not None:
        how = "preferred by the plugin" if run.preferred_by_plugin else "first healthy, sorted"
        lines.append(f"dry-run allocation of {run.requested} ({how}): {', '.join(run.device_ids)}")
        lines += _response_lines(run.response)
        started = run.pre_start
        if started is not None and not started.called:
            lines.append("PreStartContainer: not called (the plugin does not require it)")
        elif started is not None:
            state = "ok" if started.error is None else f"failed: {started.error}"
            lines.append(f"PreStartContainer({', '.join(run.device_ids)}): {state}")
    return "\n".join(lines)


def render_json(report: InspectReport) -> str:
    """The report as stable, indented JSON."""
    return json.dumps(report.to_dict(), indent=2)
