"""Pod admission on the emulator against plugin doubles on real unix sockets.

Topology policies refusing and admitting, init containers' devices reused by
app containers, GetPreferredAllocation's parameters, PreStartContainer at
container start, the checkpoint, and each rejection in the kubelet's words.
"""

from __future__ import annotations

import textwrap

import grpc
import pytest

from accel_plugins.kubelet_emulator import Kubelet, PluginOptions, checkpoint
from accel_plugins.kubelet_emulator.admission import PodAdmitter, render_admission
from accel_plugins.kubelet_emulator.podspec import PodSpec, parse_pods
from accel_plugins.kubelet_emulator.topology import BEST_EFFORT, NONE, RESTRICTED, SINGLE_NUMA_NODE
from tests.fixtures.kubelet import RESOURCE, MakePlugin, register, widgets

PRE_START = PluginOptions(pre_start_required=True)
PREFERRED = PluginOptions(get_preferred_allocation_available=True)


def two_nodes(count: int = 4) -> list[object]:
    """w0..w<count-1>, the first half on NUMA node 0, the rest on node 1."""
    half = count // 2
    return [*widgets(half, numa=0), *[w for w in widgets(count, numa=1)[half:]]]


def pod(containers: dict[str, int], init: dict[str, int] | None = None, name: str = "p") -> PodSpec:
    def listed(counts: dict[str, int]) -> str:
        items = [
            f"{{name: {c}, resources: {{limits: {{{RESOURCE}: {n}}}}}}}" if n else f"{{name: {c}}}"
            for c, n in counts.items()
        ]
        return "[" + ", ".join(items) + "]"

    text = f"metadata: {{name: {name}}}\nspec:\n  containers: {listed(containers)}\n"
    if init:
        text += f"  initContainers: {listed(init)}\n"
    [spec] = parse_pods(text, "pod.yaml")
    return spec


POLICY_CASES = {
    # policy, devices taken by another pod first, request, rejection reason, devices got
    "single-numa-node refuses 3 of 2+2": (SINGLE_NUMA_NODE, 0, 3, "TopologyAffinityError", ()),
    # The narrowest mask that could ever hold 3 spans both nodes, so it is preferred.
    "restricted admits 3 of 2+2": (RESTRICTED, 0, 3, "", ("w0", "w1", "w2")),
    "best-effort admits 3 of 2+2": (BEST_EFFORT, 0, 3, "", ("w0", "w1", "w2")),
    "none admits 3 of 2+2": (NONE, 0, 3, "", ("w0", "w1", "w2")),
    "single-numa-node admits 2 on one node": (SINGLE_NUMA_NODE, 0, 2, "", ("w0", "w1")),
    # One device of each node taken: 2 fit only across nodes, where one node could hold them.
    "restricted refuses a forced cross-NUMA 2": (RESTRICTED, 1, 2, "TopologyAffinityError", ()),
    "best-effort admits a forced cross-NUMA 2": (BEST_EFFORT, 1, 2, "", ("w1", "w3")),
}


@pytest.mark.parametrize(
    ("policy", "taken", "count", "reason", "devices"), POLICY_CASES.values(), ids=POLICY_CASES
)
async def test_topology_policies(
    kubelet: Kubelet,
    make_plugin: MakePlugin,
    policy: str,
    taken: int,
    count: int,
    reason: str,
    devices: tuple[str, ...],
) -> None:
    plugin = await make_plugin(two_nodes())
    await register(kubelet, plugin)
    if taken:
        await kubelet.allocate("other", "main", RESOURCE, 2, must_include=["w0", "w2"])
    before = list(kubelet.allocations)

    outcome = await PodAdmitter(kubelet, policy=policy, numa_nodes=[0, 1]).admit(
        pod({"main": count})
    )

    assert outcome.reason == reason
    if reason:
        assert outcome.message == (
            "Pod was rejected: Resources cannot be allocated with Topology locality"
        )
        assert kubelet.allocations == before
        assert len(plugin.allocate_requests) == len(before)
        assert "pod default/p: rejected: TopologyAffinityError:" in render_admission(outcome)
    else:
        [container] = outcome.containers
        assert container.grants[0].device_ids == devices
        assert kubelet.allocations[-1].device_ids == devices


async def test_single_numa_node_affinity_steers_the_choice(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    # Node 0 is half taken: the only single-node hint for 2 devices is node 1.
    plugin = await make_plugin(two_nodes())
    await register(kubelet, plugin)
    await kubelet.allocate("other", "main", RESOURCE, 1)  # w0
    admitter = PodAdmitter(kubelet, policy=SINGLE_NUMA_NODE, numa_nodes=[0, 1])

    outcome = await admitter.admit(pod({"main": 2}))

    [container] = outcome.containers
    hints = container.hints[RESOURCE]
    assert hints is not None
    assert [(sorted(h.affinity or ()), h.preferred) for h in hints] == [
        ([1], True),
        ([0, 1], False),
    ]
    assert container.affinity is not None
    assert container.affinity.affinity == frozenset({1})
    assert container.grants[0].device_ids == ("w2", "w3")


async def test_init_container_devices_are_reused(kubelet: Kubelet, make_plugin: MakePlugin) -> None:
    def keep_must(available: list[str], must: list[str], size: int) -> list[str]:
        return must + [d for d in sorted(available) if d not in must][: size - len(must)]

    plugin = await make_plugin(two_nodes(), options=PREFERRED, preferred=keep_must)
    await register(kubelet, plugin)
    admitter = PodAdmitter(kubelet, policy=BEST_EFFORT, numa_nodes=[0, 1])

    outcome = await admitter.admit(pod({"main": 3, "log": 0}, init={"setup": 2}))

    assert outcome.admitted, outcome.message
    setup, main, log = outcome.containers
    assert setup.grants[0].device_ids == ("w0", "w1")
    # main takes setup's two again, then one more: the plugin chooses it, told to keep both.
    assert main.grants[0].device_ids == ("w0", "w1", "w2")
    assert main.grants[0].choice is not None
    assert main.grants[0].choice.steps[0] == ("reused", ("w0", "w1"))
    assert plugin.preferred_requests[-1] == (["w0", "w1", "w2", "w3"], ["w0", "w1"], 3)
    assert log.grants == ()
    # Allocate once per container; the reused devices are held twice (init and app).
    assert plugin.allocate_requests == [[["w0", "w1"]], [["w0", "w1", "w2"]]]
    assert [(r.container, r.device_ids) for r in kubelet.allocations] == [
        ("setup", ("w0", "w1")),
        ("main", ("w0", "w1", "w2")),
    ]


async def test_app_containers_do_not_share_reused_devices(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    plugin = await make_plugin(widgets(4, numa=None))
    await register(kubelet, plugin)

    outcome = await PodAdmitter(kubelet).admit(pod({"a": 1, "b": 1}, init={"setup": 1}))

    setup, a, b = outcome.containers
    assert (setup.grants[0].device_ids, a.grants[0].device_ids) == (("w0",), ("w0",))
    assert b.grants[0].device_ids == ("w1",)  # w0 stopped being reusable once a took it


async def test_sidecar_init_container_keeps_its_devices(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    plugin = await make_plugin(widgets(2, numa=None))
    await register(kubelet, plugin)
    text = f"""
    metadata: {{name: p}}
    spec:
      initContainers:
        - {{name: proxy, restartPolicy: Always, resources: {{limits: {{{RESOURCE}: 1}}}}}}
      containers:
        - {{name: main, resources: {{limits: {{{RESOURCE}: 1}}}}}}
    """
    [spec] = parse_pods(textwrap.dedent(text), "pod.yaml")

    outcome = await PodAdmitter(kubelet).admit(spec)

    assert [c.grants[0].device_ids for c in outcome.containers] == [("w0",), ("w1",)]


async def test_pre_start_container_is_called_at_container_start_when_required(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    plugin = await make_plugin(widgets(4, numa=None), options=PRE_START)
    await register(kubelet, plugin)

    outcome = await PodAdmitter(kubelet).admit(pod({"main": 1}, init={"setup": 2}))

    assert outcome.started
    # Every Allocate (admission) before any PreStartContainer (start), containers in order.
    allocates = [i for i, c in enumerate(plugin.calls) if c == "Allocate"]
    pre_starts = [i for i, c in enumerate(plugin.calls) if c == "PreStartContainer"]
    assert len(allocates) == len(pre_starts) == 2
    assert max(allocates) < min(pre_starts)
    assert plugin.pre_start_requests == [["w0", "w1"], ["w0"]]
    assert [[p.error for p in c.pre_starts] for c in outcome.containers] == [[None], [None]]
    assert "PreStartContainer example.com/widget (w0): ok" in render_admission(outcome)


async def test_pre_start_container_is_not_called_unless_required(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    plugin = await make_plugin(widgets(2, numa=None))
    await register(kubelet, plugin)

    outcome = await PodAdmitter(kubelet).admit(pod({"main": 1}))

    assert outcome.started
    assert "PreStartContainer" not in plugin.calls
    assert outcome.containers[0].pre_starts == ()


async def test_a_failed_pre_start_leaves_the_pod_admitted_but_not_started(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    plugin = await make_plugin(widgets(2, numa=None), options=PRE_START)
    plugin.errors["PreStartContainer"] = (grpc.StatusCode.FAILED_PRECONDITION, "fan broken")
    await register(kubelet, plugin)

    outcome = await PodAdmitter(kubelet).admit(pod({"main": 1}))

    assert outcome.admitted
    assert not outcome.started
    [call] = outcome.containers[0].pre_starts
    assert call.error is not None
    assert call.error.startswith("device plugin PreStartContainer rpc failed with err: ")
    assert "FAILED_PRECONDITION: fan broken" in call.error
    assert len(kubelet.allocations) == 1


async def test_the_checkpoint_is_written(kubelet: Kubelet, make_plugin: MakePlugin) -> None:
    plugin = await make_plugin(widgets(3, numa=None))
    await register(kubelet, plugin)

    await PodAdmitter(kubelet).admit(pod({"main": 2}, init={"setup": 1}))

    stored = checkpoint.read(kubelet.checkpoint_path)
    assert stored == kubelet.allocations
    assert [(r.pod, r.container, r.device_ids) for r in stored] == [
        ("p", "setup", ("w0",)),
        ("p", "main", ("w0", "w1")),
    ]


async def test_a_pod_admitted_again_keeps_its_devices_without_allocate(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    plugin = await make_plugin(widgets(3, numa=None))
    await register(kubelet, plugin)
    admitter = PodAdmitter(kubelet)
    first = await admitter.admit(pod({"main": 2}))

    again = await admitter.admit(pod({"main": 2}))

    assert again.containers[0].grants[0].device_ids == first.containers[0].grants[0].device_ids
    assert again.containers[0].grants[0].choice is None
    assert len(plugin.allocate_requests) == 1
    assert "already held by the container (no Allocate call)" in render_admission(again)


REJECTIONS = {
    "unknown resource": (
        "metadata: {name: p}\nspec: {containers: [{name: c, resources: "
        "{limits: {example.com/gadget: 2}}}]}",
        "OutOfexample.com/gadget",
        "Pod was rejected: Node didn't have enough resource: example.com/gadget, "
        "requested: 2, used: 0, capacity: 0",
    ),
    "too few devices": (
        "metadata: {name: p}\nspec:\n  initContainers: [{name: i, resources: "
        f"{{limits: {{{RESOURCE}: 1}}}}}}]\n  containers: [{{name: c, resources: "
        f"{{limits: {{{RESOURCE}: 4}}}}}}]",
        "UnexpectedAdmissionError",
        "Pod was rejected: Allocate failed due to requested number of devices unavailable "
        f"for {RESOURCE}. Requested: 3, Available: 2, which is unexpected",
    ),
    "requests differ from limits": (
        "metadata: {name: p}\nspec: {containers: [{name: c, resources: "
        f"{{limits: {{{RESOURCE}: 2}}, requests: {{{RESOURCE}: 1}}}}}}]}}",
        "Invalid",
        'The Pod "p" is invalid: spec.containers[0].resources.requests[example.com/widget]: '
        'Invalid value: "1": must be equal to example.com/widget limit of 2',
    ),
}


@pytest.mark.parametrize(("text", "reason", "message"), REJECTIONS.values(), ids=REJECTIONS)
async def test_rejections_in_the_kubelets_words(
    kubelet: Kubelet, make_plugin: MakePlugin, text: str, reason: str, message: str
) -> None:
    plugin = await make_plugin(widgets(3, numa=None))
    await register(kubelet, plugin)
    [spec] = parse_pods(text, "pod.yaml")

    outcome = await PodAdmitter(kubelet).admit(spec)

    assert (outcome.reason, outcome.message) == (reason, message)
    assert not outcome.admitted
    # Whatever an earlier container got is freed: a rejected pod holds nothing.
    assert kubelet.allocations == []
    assert checkpoint.read(kubelet.checkpoint_path) == []


async def test_a_failing_allocate_rejects_the_pod(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    plugin = await make_plugin(widgets(2, numa=None))
    plugin.errors["Allocate"] = (grpc.StatusCode.INVALID_ARGUMENT, "w0 is on fire")
    await register(kubelet, plugin)

    outcome = await PodAdmitter(kubelet).admit(pod({"main": 1}))

    assert outcome.reason == "UnexpectedAdmissionError"
    assert outcome.message.startswith("Pod was rejected: Allocate failed due to Allocate on ")
    assert "INVALID_ARGUMENT: w0 is on fire, which is unexpected" in outcome.message


async def test_bogus_preferred_ids_are_ignored_and_shown(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    plugin = await make_plugin(
        widgets(3, numa=None), options=PREFERRED, preferred=lambda a, m, n: ["w2", "bogus"]
    )
    await register(kubelet, plugin)

    outcome = await PodAdmitter(kubelet).admit(pod({"main": 2}))

    grant = outcome.containers[0].grants[0]
    assert grant.device_ids == ("w2", "w0")
    text = render_admission(outcome)
    assert "w2: preferred by the plugin" in text
    assert "w0: the kubelet's pick" in text
    assert "ignored, not offered: bogus" in text
