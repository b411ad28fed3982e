"""``accel-plugins kubelet --admit``: admit pod manifests on the running emulator.

The manifests are read before the emulator starts (a bad one is a ConfigError
naming file, field and reason); once their resources registered, each pod is
admitted and its outcome printed, and pods with resource claims get them
prepared from an API server (``--kubeconfig``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path

from accel_plugins.errors import ConfigError
from accel_plugins.kubelet_emulator.admission_outcome import render_admission
from accel_plugins.kubelet_emulator.cdi import DEFAULT_SPEC_DIRS
from accel_plugins.kubelet_emulator.claims import ClaimPreparer, ClaimReader, render_claims
from accel_plugins.kubelet_emulator.emulator import Kubelet
from accel_plugins.kubelet_emulator.pod_admitter import PodAdmitter
from accel_plugins.kubelet_emulator.podspec import PodSpec, load_pods
from accel_plugins.kubelet_emulator.topology import MAX_NUMA_NODES, NONE, POLICIES


async def wait_for_resources(
    kubelet: Kubelet, resources: Iterable[str], timeout: float
) -> list[str]:
    """Wait until every resource is registered, connected and has sent its device list;
    return those still missing when ``timeout`` ran out."""
    wanted = sorted(set(resources))

    def missing(k: Kubelet) -> list[str]:
        views = k.resources
        return [
            r for r in wanted if r not in views or not views[r].connected or views[r].updates < 1
        ]

    with contextlib.suppress(TimeoutError):
        await kubelet.wait_for(lambda k: not missing(k), timeout, what="the pods' resources")
    return missing(kubelet)


async def admit_pods(
    kubelet: Kubelet,
    pods: Sequence[PodSpec],
    *,
    policy: str = NONE,
    numa_nodes: Sequence[int] | None = None,
    timeout: float = 30.0,
    echo: Callable[[str], None] = print,
    claims: ClaimPreparer | None = None,
) -> int:
    """On a running emulator: wait for the pods' resources, admit each pod and ``echo`` the
    outcome; 0 when every pod was admitted and started, 1 otherwise.

    ``claims`` prepares the resource claims of each admitted pod that has any.

    Pods in the checkpoint that are not among ``pods`` are released first: as for the
    kubelet, only active pods hold devices.
    """
    resources = sorted({r for pod in pods for r in pod.resources})
    missing = await wait_for_resources(kubelet, resources, timeout)
    if missing:
        echo(f"timed out after {timeout:g}s waiting for {', '.join(missing)} to register")
    active = {(pod.namespace, pod.name) for pod in pods}
    for namespace, name in sorted({(r.namespace, r.pod) for r in kubelet.allocations} - active):
        kubelet.release(name, namespace=namespace)
    admitter = PodAdmitter(kubelet, policy=policy, numa_nodes=numa_nodes)
    ok = True
    for pod in pods:
        outcome = await admitter.admit(pod)
        echo(render_admission(outcome))
        ok = ok and outcome.started
        if outcome.admitted and pod.resource_claims and claims is not None:
            # The kubelet prepares a pod's claims after admission, before its containers.
            prepared = await claims.prepare(pod)
            echo(render_claims(prepared, claims))
            ok = ok and prepared.prepared
    if kubelet.allocations:
        echo(f"checkpoint: {kubelet.checkpoint_path} ({len(kubelet.allocations)} allocations)")
    return 0 if ok else 1


def parse_numa_nodes(text: str) -> list[int]:
    """``0,1`` or ``0-3`` (or both: ``0-1,4``) as a sorted list; ValueError when malformed."""
    nodes: set[int] = set()
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        try:
            low = int(first)
            high = int(last) if dash else low
        except ValueError:
            raise ValueError(f"{text!r} is not a list of NUMA nodes (e.g. 0,1 or 0-3)") from None
        if low < 0 or high < low:
            raise ValueError(f"{part.strip()!r}: NUMA nodes are numbers from 0 up")
        nodes.update(range(low, high + 1))
    return sorted(nodes)


def admitting(
    paths: Sequence[Path],
    *,
    policy: str = NONE,
    numa_nodes: str | None = None,
    timeout: float = 30.0,
    once: bool = False,
    echo: Callable[[str], None] = print,
    kubeconfig: str | None = None,
    cdi_spec_dirs: Sequence[Path] = DEFAULT_SPEC_DIRS,
) -> Callable[[Kubelet], Awaitable[int | None]]:
    """``accel-plugins kubelet --admit``: read the pod manifests now (ConfigError naming file,
    field and reason), and return what the running emulator does with them (its ``then``):
    admit them, then stop with the exit status when ``once``, else keep serving.

    Pods with resource claims need an API server: ``kubeconfig`` (else ``$KUBECONFIG``) is
    read now too. Their claims are unprepared at the end of ``once``, or when the emulator
    stops (its pods go with it).
    """
    nodes: list[int] | None = None
    if numa_nodes is not None:
        try:
            nodes = parse_numa_nodes(numa_nodes)
        except ValueError as e:
            raise ConfigError("--numa-nodes", "", str(e)) from None
        if policy != NONE and len(nodes) > MAX_NUMA_NODES:
            raise ConfigError(
                "--numa-nodes",
                "",
                f"the Topology Manager supports at most {MAX_NUMA_NODES} NUMA nodes",
            )
    if policy not in POLICIES:
        raise ConfigError("--topology-policy", "", f"choose one of {', '.join(POLICIES)}")
    pods: list[PodSpec] = []
    seen: dict[str, str] = {}
    for path in paths:
        for pod in load_pods(path):
            if pod.key in seen:
                raise ConfigError(
                    pod.source, "metadata.name", f"pod {pod.key} is also in {seen[pod.key]}"
                )
            seen[pod.key] = pod.source
            pods.append(pod)

    claimed = [pod for pod in pods if pod.resource_claims]
    make_reader = _claim_reader(claimed, kubeconfig) if claimed else None

    async def then(kubelet: Kubelet) -> int | None:
        if make_reader is None:
            code = await admit_pods(
                kubelet, pods, policy=policy, numa_nodes=nodes, timeout=timeout, echo=echo
            )
            return code if once else None
        reader = make_reader()
        preparer = ClaimPreparer(
            kubelet, reader, cdi_spec_dirs=cdi_spec_dirs, driver_timeout=timeout
        )
        try:
            code = await admit_pods(
                kubelet,
                pods,
                policy=policy,
                numa_nodes=nodes,
                timeout=timeout,
                echo=echo,
                claims=preparer,
            )
            if not once:
                await asyncio.Future()  # the pods run until the emulator stops
        finally:
            failed = await _unprepare(preparer, claimed, echo)
            await reader.close()
        return code or failed

    return then


async def _unprepare(
    preparer: ClaimPreparer, pods: Sequence[PodSpec], echo: Callable[[str], None]
) -> int:
    failed = 0
    for pod in pods:
        if not preparer.holds(pod):
            continue  # nothing prepared for it (rejected, or its claims failed their checks)
        errors = await preparer.unprepare(pod)
        for error in errors:
            echo(f"pod {pod.key}: unprepare dynamic resources: {error}")
        failed = failed or (1 if errors else 0)
        if not errors:
            echo(f"pod {pod.key}: resource claims unprepared")
    return failed


def _claim_reader(pods: Sequence[PodSpec], kubeconfig: str | None) -> Callable[[], ClaimReader]:
    """How to read the pods' claims from the API server; ConfigError (exit 2) without one.

    lightkube (the ``[dra]`` extra) is imported here, only for pods with claims.
    """
    path = kubeconfig or os.environ.get("KUBECONFIG") or ""
    names = ", ".join(pod.key for pod in pods)
    if not path:
        raise ConfigError(
            "--kubeconfig",
            "",
            f"pod {names} has resource claims: the emulator reads them from an API server; "
            "give --kubeconfig or set KUBECONFIG",
        )
    try:
        from accel_plugins.kubelet_emulator.claim_api import reader_factory
    except ImportError as e:
        raise ConfigError(
            "--kubeconfig", "", f"resource claims need the [dra] extra (lightkube): {e}"
        ) from None
    return reader_factory(path)
