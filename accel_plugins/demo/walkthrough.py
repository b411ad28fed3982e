"""The walkthrough's own steps, in the order the demo prints them, each over a started node.

What the kubelet saw register, the generic plugin's devices, an allocation for a demo pod
with its CDI specs, the simulated NVIDIA node's shared GPUs and two allocations from it,
and a selection of each plugin's metrics. Each step reads what it shows from the running
plugins and the kubelet emulator rather than restating it, so the demo cannot drift from
what the plugins do. The highlights (topology, hotplug, health) live in ``highlights.py``.
"""

from __future__ import annotations

import asyncio

from accel_plugins.backends.nvidia.facts import gpu_facts
from accel_plugins.demo.node import (
    DEMO_CONFIG,
    NVIDIA_MPS_RESOURCE,
    NVIDIA_PROFILE,
    NVIDIA_REPLICAS,
    NVIDIA_RESOURCE,
    DemoNode,
)
from accel_plugins.demo.output import Printer, cdi_devices, print_allocation, short_id

# (resource, how many) for the demo pod's one container.
DEMO_REQUEST = (("accel-plugins.io/dev-null", 2), ("accel-plugins.io/zero-full", 1))

# The series the walkthrough prints: the rest of a scrape is there, just long.
_SHOWN = (
    "accel_plugins_devices{",
    "accel_plugins_allocations_total{",
    "accel_plugins_pod_attribution_available ",
)
_SHOWN_HELD = ("accel_plugins_device_healthy{", "accel_plugins_gpu_")


def introduce(say: Printer, node: DemoNode) -> None:
    """Say what runs where, and print the built-in config."""
    kubelet = node.kubelet
    say(
        "accel-plugins demo: the generic /dev plugin, a simulated NVIDIA node and an "
        "emulated kubelet, in one process"
    )
    say(f"  working directory   {node.workdir}")
    say(f"  kubelet socket      {kubelet.socket_path}")
    say(f"  pod resources API   {kubelet.pod_resources_socket}")
    say(
        "  built-in config (host paths; this process sees the host's /dev at "
        f"{node.generic_settings.dev_root}):"
    )
    for line in DEMO_CONFIG.splitlines():
        say(f"    {line}")


def show_registrations(say: Printer, node: DemoNode) -> None:
    """One line per plugin registration the kubelet accepted, with its options."""
    say.section("Registration")
    for reg in node.kubelet.registrations:
        opts = reg.options
        say(
            f"  {reg.resource_name:<28} endpoint {reg.endpoint}  "
            f"(API {reg.version}, preferred allocation "
            f"{'yes' if opts.get_preferred_allocation_available else 'no'}, "
            f"pre-start {'yes' if opts.pre_start_required else 'no'})"
        )


def show_devices(say: Printer, node: DemoNode) -> None:
    """The generic plugin's devices as the kubelet sees them: health, NUMA, host paths."""
    say.section("Devices (as the kubelet sees them)")
    for name in node.generic_resources:
        view = node.kubelet.resources[name]
        say(f"  {name}: {view.allocatable} allocatable of {view.capacity}")
        tree = node.generic.tree.get(name, {})
        for device_id, state in sorted(view.devices.items()):
            device = tree.get(device_id)
            paths = ", ".join(n.host_path for n in device.nodes) if device else "?"
            numa = ",".join(map(str, state.numa_nodes)) or "-"
            say(f"    {short_id(device_id)}  {state.health:<9}  numa {numa:<3}  {paths}")


async def allocate_demo_pod(say: Printer, node: DemoNode) -> None:
    """Allocate ``DEMO_REQUEST`` for one container; show the responses and CDI specs."""
    say.section("Allocation for pod default/demo-pod, container app")
    for name, count in DEMO_REQUEST:
        record = await node.kubelet.allocate("demo-pod", "app", name, count)
        print_allocation(say, record, cdi_devices(node.cdi_dir))
    say(f"  CDI specs written to {node.cdi_dir}:")
    for spec_file in sorted(p.name for p in node.cdi_dir.glob("*.json")):
        say(f"    {spec_file}")


def show_gpus(say: Printer, node: DemoNode) -> None:
    """The simulated NVIDIA node: each GPU and its replicas, time-sliced or MPS-shared."""
    say.section(
        f"Simulated NVIDIA node: {NVIDIA_PROFILE}, each GPU shared x{NVIDIA_REPLICAS} "
        f"(accel-plugins nvidia --simulate {NVIDIA_PROFILE})"
    )
    for resource, how in (
        (NVIDIA_RESOURCE, "time-sliced: replicas take turns on the whole GPU"),
        (NVIDIA_MPS_RESOURCE, "MPS: concurrent clients, each with a share of SMs and memory"),
    ):
        view = node.kubelet.resources[resource]
        say(f"  {resource}: {view.allocatable} allocatable of {view.capacity} ({how})")
        per_gpu: dict[tuple[int, str, str], int] = {}
        for device in node.nvidia.tree.get(resource, {}).values():
            facts = gpu_facts(device)
            key = (facts.gpu_index, facts.name, facts.replica_of or device.id)
            per_gpu[key] = per_gpu.get(key, 0) + 1
        for (index, model, uuid), count in sorted(per_gpu.items()):
            say(
                f"    GPU {index}  {model}  {short_id(uuid)}  {count} replicas "
                f"({short_id(uuid)}::0 .. ::{count - 1})"
            )
    for supervisor in node.mps.supervisors:
        say(
            f"  MPS control daemon for {supervisor.resource} "
            "(accel-plugins mps-control-daemon, a fake nvidia-cuda-mps-control here):"
        )
        for command in supervisor.plan.commands():
            say(f"    {command}")


async def allocate_gpus(say: Printer, node: DemoNode) -> None:
    """Allocate two time-sliced GPUs and one MPS replica; show the responses."""
    say("  Allocation for pod default/train, container main (2 time-sliced GPUs):")
    record = await node.kubelet.allocate("train", "main", NVIDIA_RESOURCE, 2)
    print_allocation(say, record, cdi_devices(node.cdi_dir))
    # failRequestsGreaterThanOne, on by default for MPS: one replica per container.
    say("  Allocation for pod default/infer, container main (1 MPS replica):")
    record = await node.kubelet.allocate("infer", "main", NVIDIA_MPS_RESOURCE, 1)
    print_allocation(say, record, cdi_devices(node.cdi_dir))


async def show_metrics(say: Printer, node: DemoNode, host: str) -> None:
    """Start each plugin's metrics server on ``host`` and print a selection of a scrape."""
    say.section("Metrics")
    await node.pods.refresh()  # the pods above, named on the device and GPU series
    for plugin, endpoint in node.metrics.items():
        bound, port = await endpoint.start(host, 0)
        say(
            f"  {plugin} plugin: Prometheus metrics at "
            f"http://{bound}:{port}/metrics (health: /healthz); a selection:"
        )
        for line in await _scrape(bound, port):
            say(f"    {line}")


async def _scrape(host: str, port: int) -> list[str]:
    """GET /metrics once; keep the ``_SHOWN`` series, and ``_SHOWN_HELD`` where a pod holds one."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: demo\r\n\r\n")
    await writer.drain()
    body = (await reader.read()).decode()
    writer.close()
    await writer.wait_closed()
    return [
        line
        for line in body.splitlines()
        if line.startswith(_SHOWN)
        or (line.startswith(_SHOWN_HELD) and 'pod="' in line and 'pod=""' not in line)
    ]
