"""The NVIDIA backend: discovery + MIG strategy + sharing -> trees, health -> new trees."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel_plugins.backends.nvidia.config.settings import NvidiaSettings
from accel_plugins.backends.nvidia.discovery import Gpu, Node, discover
from accel_plugins.backends.nvidia.errors import NvmlError, NvmlInitError
from accel_plugins.backends.nvidia.facts import gpu_facts, known_gpu
from accel_plugins.backends.nvidia.health import EVENT_WAIT_MS, HealthMonitor, XidPolicy
from accel_plugins.backends.nvidia.nvml import Nvml, session
from accel_plugins.backends.nvidia.resources import MigStrategyError, build_resources
from accel_plugins.backends.nvidia.sharing import apply_sharing, is_replica, unmatched
from accel_plugins.errors import AllocationError, BackendError, HookError
from accel_plugins.plugin.allocation import check_preferred_request, spans_numa_nodes
from accel_plugins.plugin.backend import Backend, Holders, Publish
from accel_plugins.plugin.device import ContainerAllocation, Device, DeviceTree, Health, tree
from accel_plugins.plugin.health_reason import HealthReason, ReasonKind

if TYPE_CHECKING:
    # Only a feature switched on (CDI, MPS, NFD labels, DRA) or a first Allocate /
    # GetPreferredAllocation needs these: imported where used, they stay off the
    # path from exec to registration (issue 17's start-up budget).
    from prometheus_client.metrics_core import Metric

    from accel_plugins.backends.nvidia.allocation.pair_score import LinkMatrix
    from accel_plugins.backends.nvidia.cdi.cdi_spec import NvidiaCdi
    from accel_plugins.backends.nvidia.labels.node_labels import LabelFacts
    from accel_plugins.backends.nvidia.mps.mps_readiness import MpsReadiness
    from accel_plugins.backends.nvidia.telemetry import GpuTelemetry
    from accel_plugins.plugin.dra_attributes import DraDeviceInfo
    from accel_plugins.plugin.dra_config import ClaimParameters
    from accel_plugins.plugin.dra_shares import Share

log = logging.getLogger(__name__)

MPS_DOWN = HealthReason(ReasonKind.OTHER, "the MPS control daemon is not ready")
# Its life lock is free: no mps-control-daemon runs at all (killed, or never started).
MPS_GONE = HealthReason(ReasonKind.OTHER, "no MPS control daemon is running")


class NvidiaBackend:
    """Publishes NVIDIA resources and builds NVIDIA's container contract on Allocate.

    NVML is initialised for the life of :meth:`run` and shut down when it
    ends. ``mig_minors`` is the MIG capability table (read from the driver's
    ``/proc`` file when None and device specs are passed). ``cdi`` writes the CDI
    specs (CDI device-list strategies) once the devices are known, and removes
    them when :meth:`run` ends.
    """

    def __init__(
        self,
        nvml: Nvml,
        settings: NvidiaSettings,
        *,
        mig_minors: Mapping[str, int] | None = None,
        wait_ms: int = EVENT_WAIT_MS,
        cdi: NvidiaCdi | None = None,
    ) -> None:
        self.nvml = nvml
        self.settings = settings
        self._mig_minors = mig_minors
        self.cdi = cdi
        self._wait_ms = wait_ms
        self._resources: dict[str, list[Device]] = {}
        self._monitor: HealthMonitor | None = None
        self._links: LinkMatrix | None = None
        self._link_gpus: Sequence[Gpu] = ()  # what _links is built from, on first use
        self._mps_resources: frozenset[str] = frozenset()
        self._mps: MpsReadiness | None = None
        self._telemetry: GpuTelemetry | None = None  # made on the first scrape
        self._label_facts: LabelFacts | None = None
        self._label_node: Node | None = None  # read on the first DRA description
        self._checked: tuple[Node, dict[str, list[Device]]] | None = None  # by check()
        self.sys_root = Path("/sys")

    @property
    def monitor(self) -> HealthMonitor | None:
        """The running health monitor (None before the first tree or when not running)."""
        return self._monitor

    def build(self, node: Node) -> dict[str, list[Device]]:
        """Resources for ``node`` under the MIG strategy and time-slicing config.

        The node's link matrix, for :meth:`preferred_allocation`, is built on the
        first call after (once per device set), not on the way to registration.
        """
        self._links, self._link_gpus = None, node.gpus
        minors = self._mig_minors
        if minors is None and self.settings.allocate.pass_device_specs:
            from accel_plugins.backends.nvidia.container_contract import read_mig_minors

            minors = read_mig_minors()
        base = build_resources(
            node,
            self.settings.mig_strategy,
            dev_root=self.settings.dev_root,
            device_specs=self.settings.allocate.pass_device_specs,
            mig_minors=minors,
        )
        shared = apply_sharing(
            base,
            self.settings.time_slicing,
            self.settings.mps,
            source=self.settings.source or "config",
        )
        self._mps_resources = shared.mps
        return shared.resources

    @property
    def mps_resources(self) -> frozenset[str]:
        """The resources whose replicas are MPS-shared (after :meth:`build`)."""
        return self._mps_resources

    def check(self) -> Node:
        """Init NVML, discover and build once, then shut down: raises what ``run`` would.

        The first ``run`` starts from this discovery instead of repeating it
        (per-GPU and per-pair NVML queries) on the way to the first tree.
        """
        with session(self.nvml):
            node = discover(self.nvml)
        self._checked = (node, self.build(node))
        base = build_resources(node, self.settings.mig_strategy)
        sections = [self.settings.time_slicing, *([self.settings.mps] if self.settings.mps else [])]
        for entry in (e for section in sections for e in unmatched(base, section)):
            log.warning(
                "%s: %s.name: %s matches no device on this node (its resources: %s)",
                self.settings.source or "config",
                entry.where,
                entry.name,
                ", ".join(sorted(base)) or "none",
            )
        return node

    def snapshot(self) -> DeviceTree:
        """The tree as it would be published now, health included."""
        faults = self._monitor.faults if self._monitor else {}

        # A faulty MIG device makes its whole GPU unusable: the GPU takes its reason.
        child_faults = {
            parent: fault
            for unit, fault in faults.items()
            if self._monitor is not None and (parent := self._monitor.parent_of(unit))
        }

        def checked(device: Device) -> Device:
            facts = gpu_facts(device)
            fault = faults.get(facts.uuid) or (
                faults.get(facts.parent_uuid) if facts.parent_uuid else None
            )
            if fault is None and facts.kind == "gpu":
                fault = child_faults.get(facts.uuid)
            if fault is None:
                return device.with_health(Health.HEALTHY)
            return device.with_health(Health.UNHEALTHY, fault.reason)

        def mps_down(name: str) -> bool:
            # MPS replicas stay listed while their control daemon is down, Unhealthy.
            return name in self._mps_resources and not (self._mps and self._mps.is_ready(name))

        mps_reason = MPS_DOWN if self._mps and self._mps.daemon_running else MPS_GONE
        return tree(
            {
                name: [
                    d.with_health(Health.UNHEALTHY, mps_reason) if mps_down(name) else checked(d)
                    for d in devices
                ]
                for name, devices in self._resources.items()
            }
        )

    async def run(self, publish: Publish) -> None:
        initialised = False
        try:
            # One trip to a worker thread for both: each trip is a loop round on
            # the way to the first tree (issue 17).
            started: list[bool] = []
            checked, self._checked = self._checked, None
            try:
                node = await asyncio.to_thread(
                    self._init_and_discover, started, checked[0] if checked else None
                )
            finally:
                initialised = bool(started)
            self._resources = checked[1] if checked else self.build(node)
            # Driver versions are for DRA attributes only: read when first described,
            # not on every start on the way to the first tree.
            self._label_node, self._label_facts = node, None
            if self.cdi is not None:
                await asyncio.to_thread(self._write_cdi, node)
            if self._mps_resources:
                from accel_plugins.backends.nvidia.mps.mps_readiness import MpsReadiness
                from accel_plugins.backends.nvidia.mps.mps_root import MpsRoot

                self._mps = MpsReadiness(
                    MpsRoot(Path(self.settings.mps_root)),
                    self._mps_resources,
                    on_change=lambda: publish(self.snapshot()),
                )
            publish(self.snapshot())
            self._monitor = HealthMonitor(
                self.nvml,
                node.gpus,
                XidPolicy.from_env(
                    self.settings.disable_healthchecks, self.settings.enable_healthchecks
                ),
                on_change=lambda: publish(self.snapshot()),
                recovery_seconds=self.settings.health_recovery_seconds,
                wait_ms=self._wait_ms,
            )
            if self._mps is None:
                await self._monitor.run()
            else:
                await _both(self._monitor.run(), self._mps.run())
        finally:
            if self.cdi is not None and not self.cdi.kept_after_exit:
                self.cdi.remove()
            try:
                if initialised:
                    await asyncio.shield(asyncio.to_thread(self.nvml.shutdown))
            except NvmlError as exc:
                log.warning("NVML shutdown failed: %s", exc)

    def _init_and_discover(self, started: list[bool], checked: Node | None) -> Node:
        """NVML init, then discovery unless ``check`` just did it (worker thread).

        ``started`` records a done init.
        """
        self.nvml.init()
        started.append(True)
        return checked if checked is not None else discover(self.nvml)

    def _read_label_facts(self, node: Node) -> LabelFacts | None:
        """Driver/CUDA versions and compute capabilities, for DRA attributes (best effort)."""
        from accel_plugins.backends.nvidia.labels.label_facts import LabelNvml, read_label_facts

        if not isinstance(self.nvml, LabelNvml):
            return None
        try:
            return read_label_facts(self.nvml, node)
        except NvmlError as exc:
            log.info("no driver versions for DRA attributes: %s", exc)
            return None

    def dra_device_name(self, resource: str, device: Device) -> str | None:
        """DraNamer: a whole GPU is ``gpu-<minor>``, as NVIDIA's DRA driver names it
        (k8s-dra-driver-gpu ``GpuInfo.CanonicalName``), so claims and status read alike.
        MIG devices and replicas keep the framework's name from their ID: NVIDIA names a
        MIG device by its GPU instance profile and placement, which discovery does not read."""
        facts = known_gpu(device)
        if facts is not None and facts.is_whole_gpu:
            return f"gpu-{facts.minor}"
        from accel_plugins.plugin.dra_names import dra_device_name

        return dra_device_name(device.id)

    def dra_shared_unit(self, resource: str, device: Device) -> str | None:
        """DraSharedUnits: a replica's shared device, named as that device would be (a
        whole GPU ``gpu-<minor>``), where consumable capacity publishes it once."""
        facts = known_gpu(device)
        if facts is None or facts.replica_of is None:
            return None
        if facts.kind == "gpu":
            return f"gpu-{facts.minor}"
        from accel_plugins.plugin.dra_names import dra_device_name

        return dra_device_name(facts.replica_of)

    def dra_share_env(
        self, resource: str, devices: Sequence[Device], share: Share
    ) -> Mapping[str, str]:
        """DraShareLimits: an MPS share's part of the GPU as MPS client limits
        (dra_sharing.py); time-sliced shares cannot be held to a part."""
        from accel_plugins.backends.nvidia.dra_sharing import share_env

        mps = resource in self._mps_resources and self.settings.mps is not None
        return share_env(devices, share) if mps else {}

    def dra_taint_key(self, resource: str, device: Device) -> str | None:
        """DraTaintKeyer: ``gpu.nvidia.com/xid`` for an XID error, so a claim may tolerate
        XIDs alone; the driver's default key for any other reason."""
        if device.reason is not None and device.reason.kind == "xid":
            return "gpu.nvidia.com/xid"
        return None

    def dra_device(self, resource: str, device: Device) -> DraDeviceInfo:
        """DraDescriber: NVIDIA's DRA attribute names (dra_attributes.py)."""
        from accel_plugins.backends.nvidia.dra_attributes import describe as describe_dra

        if self._label_node is not None:
            self._label_facts = self._read_label_facts(self._label_node)
            self._label_node = None
        return describe_dra(device, self._label_facts, self.sys_root)

    def _write_cdi(self, node: Node) -> None:
        """Specs before the devices are published: the kubelet may hand out a CDI name at once."""
        assert self.cdi is not None
        minors = self._mig_minors
        if minors is None:
            from accel_plugins.backends.nvidia.container_contract import read_mig_minors

            minors = read_mig_minors() if any(g.mig_enabled for g in node.gpus) else {}
        try:
            paths = self.cdi.write(node, minors)
        except OSError as exc:
            raise BackendError(
                f"cannot write the CDI specs in {self.cdi.options.spec_dir}: {exc}"
            ) from exc
        log.info("CDI specs: %s", ", ".join(str(p) for p in paths) or "none")

    @property
    def keeps_cdi_specs(self) -> bool:
        """CdiSpecKeeper: with a CDI device-list strategy, answers name our specs' devices."""
        return self.cdi is not None

    def ensure_cdi_specs(self, resource: str) -> None:
        """CdiSpecKeeper: write again the specs a reboot or a hand removed from disk."""
        if self.cdi is None:
            return
        try:
            self.cdi.restore()
        except OSError as exc:
            raise HookError(
                f"cannot write the CDI specs in {self.cdi.options.spec_dir}: {exc}", "INTERNAL"
            ) from exc

    def collect_metrics(self, holders: Holders) -> list[Metric]:
        """Per-GPU series for /metrics, read from NVML now (a MetricsProvider; telemetry.py)."""
        if self._telemetry is None:
            from accel_plugins.backends.nvidia.telemetry import GpuTelemetry

            self._telemetry = GpuTelemetry(self.nvml)
        return self._telemetry.collect(self._monitor, self._resources, holders)

    def allocate(self, resource: str, devices: Sequence[Device]) -> ContainerAllocation:
        mps = resource in self._mps_resources and self.settings.mps is not None
        sharing = self.settings.mps if mps and self.settings.mps else self.settings.time_slicing
        if (
            sharing.fail_requests_greater_than_one
            and len(devices) > 1
            and any(is_replica(d) for d in devices)
        ):
            raise AllocationError(
                f"request for {len(devices)} devices of {resource} is too large: "
                "shared resources allow at most 1 per container (failRequestsGreaterThanOne)"
            )
        from accel_plugins.backends.nvidia.container_contract import container_allocation

        allocation = container_allocation(devices, self.settings.allocate)
        if mps:
            from accel_plugins.backends.nvidia.mps.mps_root import with_mps

            return with_mps(allocation, resource, Path(self.settings.mps_root))
        return allocation

    def allocate_configured(
        self, resource: str, devices: Sequence[Device], configs: Sequence[ClaimParameters]
    ) -> ContainerAllocation:
        """DraConfigAllocator: a claim's ``GpuConfig`` sharing over :meth:`allocate`'s answer
        (dra_sharing.py)."""
        from accel_plugins.backends.nvidia.dra_sharing import configured

        answer = self.allocate(resource, devices)
        mps = resource in self._mps_resources and self.settings.mps is not None
        return configured(answer, resource, devices, configs, mps_resource=mps)

    def has_preference(self, resource: str, devices: Collection[Device]) -> bool:
        """Something to choose once the devices sit on two physical GPUs or more.

        Replicas and MIG devices of one GPU are interchangeable to the policies.
        """
        gpus: set[int] = set()
        for device in devices:
            facts = known_gpu(device)
            if facts is None:
                return spans_numa_nodes(devices)
            gpus.add(facts.gpu_index)
            if len(gpus) > 1:
                return True
        return False

    def warm(self) -> None:
        """Warmer: Allocate's modules (DRA's Prepare allocates through them too)."""
        from accel_plugins.backends.nvidia import container_contract  # noqa: F401

    def warm_preferences(self) -> None:
        """PreferenceWarmer: GetPreferredAllocation's modules and the link matrix (NVML's
        link queries for every GPU pair), loaded before the first call; never in DRA mode."""
        from accel_plugins.backends.nvidia.allocation import best_effort_search  # noqa: F401
        from accel_plugins.backends.nvidia.allocation.pair_score import LinkMatrix
        from accel_plugins.backends.nvidia.allocation.preferred_allocation import (  # noqa: F401
            preferred_devices,
        )

        gpus = self._link_gpus
        if self._links is None and gpus:
            links = LinkMatrix.from_gpus(gpus)
            if self._link_gpus is gpus:  # not rebuilt meanwhile
                self._links = links

    def preferred_allocation(
        self,
        resource: str,
        available: Sequence[Device],
        must_include: Sequence[Device],
        size: int,
    ) -> Sequence[str]:
        """Topology-aware choice: see :mod:`.allocation.preferred_allocation`."""
        from accel_plugins.backends.nvidia.allocation.preferred_allocation import preferred_devices

        check_preferred_request(resource, available, must_include, size)
        links = self._links
        if links is None:  # two first calls at once both build it: same result
            from accel_plugins.backends.nvidia.allocation.pair_score import LinkMatrix

            links = self._links = LinkMatrix.from_gpus(self._link_gpus)
        return preferred_devices(
            links,
            available,
            must_include,
            size,
            replica_policy=self.settings.replica_policy,
        )


async def _both(first: Coroutine[Any, Any, None], second: Coroutine[Any, Any, None]) -> None:
    """Run two loops; the first to fail (or end) cancels the other."""
    tasks = [asyncio.ensure_future(first), asyncio.ensure_future(second)]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class IdleBackend:
    """What runs when NVML fails and --fail-on-init-error is false: no devices, forever."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    async def run(self, publish: Publish) -> None:
        log.error("NVIDIA backend idle with no devices: %s", self.reason)
        publish({})
        await asyncio.Event().wait()


def create_backend(
    nvml: Nvml,
    settings: NvidiaSettings,
    *,
    mig_minors: Mapping[str, int] | None = None,
    wait_ms: int = EVENT_WAIT_MS,
    cdi: NvidiaCdi | None = None,
) -> Backend:
    """A checked NvidiaBackend, or an IdleBackend when NVML fails and that is allowed.

    Raises NvmlInitError/NvmlError/MigStrategyError when ``fail_on_init_error``
    is set, and ConfigError (a sharing entry naming a missing device) always.
    """
    backend = NvidiaBackend(nvml, settings, mig_minors=mig_minors, wait_ms=wait_ms, cdi=cdi)
    try:
        backend.check()
    except (NvmlInitError, NvmlError, MigStrategyError) as exc:
        if settings.fail_on_init_error:
            raise
        return IdleBackend(str(exc))
    return backend
