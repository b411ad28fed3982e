"""A toy DRA kubelet plugin: the conformance kit's known-good (and known-bad) driver.

A test fixture, not a product. It is a minimal but correct Dynamic Resource
Allocation driver written directly against the kubelet's gRPC protocols and the
API server, without accel-plugins' DRA framework (only the generated protobuf
modules, the kube client factory and the resource.k8s.io version switch are
reused), so the conformance kit can be checked against a driver it shares no code
with. ``--fault`` breaks exactly one rule, to prove the kit notices:

- ``forget-cdi-after-reboot``: after a boot ID change the CDI specs are not re-written.
- ``prepare-not-idempotent``: a repeated prepare in one process answers new CDI ids.
- ``no-republish``: a deleted ResourceSlice is not published again.
- ``whole-call-fails``: one bad claim fails the whole NodePrepareResources call.
- ``undefined-cdi-ids``: the CDI ids returned name devices no spec defines.
- ``foreign-slices``: a slice is also published for another node.
- ``unserved-version``: v1beta1 is advertised but not served.
- ``relative-endpoint``: GetInfo names its endpoint by a relative path.
- ``incomplete-pool``: the pool's resourceSliceCount counts a slice never published.
- ``answers-other-drivers``: devices of other drivers in the allocation are answered too.
- ``ghost-claims-prepared``: a claim the API server does not have is "prepared", empty.
- ``unknown-unprepare-fails``: unpreparing a claim never prepared is an error.
- ``unprepare-not-idempotent``: unpreparing a claim a second time is an error.
- ``racy-answers``: concurrent calls may get each other's answer (no lock).
- ``forget-claims-on-restart``: a restart loses the checkpoint, and CDI names change.
- ``exclusive-devices``: a device another claim holds is refused, admin access or not.
- ``subrequest-full-name``: a subrequest's device is answered as ``r/s`` only.
- ``no-health-timeout``: the health stream leaves health_check_timeout_seconds unset.
- ``no-share-id``: with ``--shared``, share_id is never answered.

``--shared`` publishes every device with ``allowMultipleAllocations`` (an API server
with DRAConsumableCapacity on keeps it).

Run from the repository root::

    python -m tests.conformance.toy_driver --node NODE --registry DIR --plugin-dir DIR \\
        --cdi-dir DIR --kubeconfig FILE [--driver NAME] [--devices N] [--fault NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any, cast

import grpc
from lightkube import ApiError, AsyncClient
from lightkube.resources import resource_v1

from accel_plugins.api import dra_health_v1_pb2 as health_v1
from accel_plugins.api import dra_health_v1_pb2_grpc as health_v1_grpc
from accel_plugins.api import dra_health_v1alpha1_pb2 as health_v1alpha1
from accel_plugins.api import dra_health_v1alpha1_pb2_grpc as health_v1alpha1_grpc
from accel_plugins.api import dra_v1_pb2 as v1
from accel_plugins.api import dra_v1_pb2_grpc as v1_grpc
from accel_plugins.api import dra_v1beta1_pb2 as v1beta1
from accel_plugins.api import dra_v1beta1_pb2_grpc as v1beta1_grpc
from accel_plugins.api import pluginregistration_v1_pb2 as reg
from accel_plugins.api import pluginregistration_v1_pb2_grpc as reg_grpc
from accel_plugins.dra.kube.api import ApiVersions
from accel_plugins.kube.client import load_config, make_client

log = logging.getLogger("toy-driver")

FAULTS = (
    "none",
    "forget-cdi-after-reboot",
    "prepare-not-idempotent",
    "no-republish",
    "whole-call-fails",
    "undefined-cdi-ids",
    "foreign-slices",
    "unserved-version",
    "relative-endpoint",
    "incomplete-pool",
    "answers-other-drivers",
    "ghost-claims-prepared",
    "unknown-unprepare-fails",
    "unprepare-not-idempotent",
    "racy-answers",
    "forget-claims-on-restart",
    "exclusive-devices",
    "subrequest-full-name",
    "no-health-timeout",
    "no-share-id",
)
CDI_KIND = "conformance.example/toy"
CDI_VERSION = "0.6.0"
HEALTH_TIMEOUT_S = 30
REPUBLISH_EVERY_S = 1.0
_NOT_CDI = re.compile(r"[^A-Za-z0-9_.:-]")  # outside CDI's device-name characters

Ctx = grpc.aio.ServicerContext[Any, Any]
ClaimRef = tuple[str, str, str]  # namespace, name, uid
Answer = list[dict[str, Any]]  # one claim's prepared devices, as checkpointed


class ClaimError(Exception):
    """Why one claim cannot be prepared: it goes in that claim's ``error``."""


def write_json(path: Path, data: Any) -> None:
    """Write atomically: a reader (the runtime, the kit) never sees half a file."""
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(temp, path)


class Toy:
    """The driver's state: checkpointed claims, CDI specs and published slices."""

    def __init__(self, args: argparse.Namespace, client: AsyncClient, boot_id: str) -> None:
        self.driver: str = args.driver
        self.node: str = args.node
        self.fault: str = args.fault
        self.cdi_dir = Path(args.cdi_dir)
        self.checkpoint = Path(args.plugin_dir) / "checkpoint.json"
        self.devices = [f"dev-{i}" for i in range(args.devices)]
        self.shared: bool = args.shared
        self.salt = os.urandom(3).hex() if self.fault == "forget-claims-on-restart" else ""
        self.ever_prepared: set[str] = set()  # claim UIDs prepared in this process
        self.client = client
        self.apis = ApiVersions(client, node=self.node)  # a node identity may list only its own
        self.boot_id = boot_id
        self.claims: dict[str, dict[str, Any]] = {}  # uid -> {namespace, name, devices, spec}
        self.prepared_here: dict[str, int] = {}  # prepares per claim in this process
        self.last_answer: Answer = []  # the racy-answers fault's shared state
        self.lock = asyncio.Lock()  # one call at a time: checkpoint and specs stay in step
        self.stopping = asyncio.Event()

    # --- checkpoint and CDI ---------------------------------------------------------

    def restore(self) -> None:
        """Load the checkpoint; after a reboot the CDI dir may be empty, so write specs again."""
        data: dict[str, Any] = {}
        if self.fault == "forget-claims-on-restart":
            log.warning("fault: the checkpoint is not read")
        elif self.checkpoint.exists():
            data = json.loads(self.checkpoint.read_text())  # a corrupt one must stop us
        self.claims = dict(data.get("claims") or {})
        self.ever_prepared = set(self.claims)
        old = data.get("bootID")
        if old is not None and old != self.boot_id:
            if self.fault == "forget-cdi-after-reboot":
                log.warning(
                    "boot ID changed; fault: CDI specs of %d claims NOT re-written",
                    len(self.claims),
                )
            else:
                for uid, entry in self.claims.items():
                    self.write_spec(uid, entry["spec"])
                log.info("boot ID changed: re-wrote CDI specs of %d claims", len(self.claims))
        self.save()
        log.info(
            "checkpoint %s: %d claims, boot ID %s", self.checkpoint, len(self.claims), self.boot_id
        )

    def save(self) -> None:
        write_json(self.checkpoint, {"bootID": self.boot_id, "claims": self.claims})

    def spec_path(self, uid: str) -> Path:
        return self.cdi_dir / f"toy-{_NOT_CDI.sub('_', uid)}.json"

    def write_spec(self, uid: str, spec: Iterable[list[str]]) -> None:
        """One CDI spec per claim; each (name, device) pair one CDI device."""
        devices = [
            {"name": name, "containerEdits": {"env": [f"TOY_DEVICE={device}"]}}
            for name, device in dict.fromkeys(tuple(pair) for pair in spec)  # each name once
        ]
        if devices:  # CDI requires at least one device in a spec
            write_json(
                self.spec_path(uid),
                {"cdiVersion": CDI_VERSION, "kind": CDI_KIND, "devices": devices},
            )

    # --- NodePrepareResources / NodeUnprepareResources --------------------------------

    async def prepare(self, claims: list[ClaimRef]) -> dict[str, Answer | str]:
        """Claim UID -> its devices, or why it failed; each claim on its own."""
        out: dict[str, Answer | str] = {}
        lock = contextlib.nullcontext() if self.fault == "racy-answers" else self.lock
        async with lock:
            for namespace, name, uid in claims:
                try:
                    answer = out[uid] = await self._prepare_one(namespace, name, uid)
                    ids = [i for d in answer for i in d["cdiIDs"]]
                    log.info("prepared claim %s/%s (%s): %s", namespace, name, uid, ids)
                except ClaimError as exc:
                    out[uid] = str(exc)
                    log.warning("claim %s/%s (%s) not prepared: %s", namespace, name, uid, exc)
                except Exception as exc:  # an unexpected failure is still only this claim's
                    out[uid] = f"preparing failed: {exc!r}"
                    log.warning("claim %s/%s (%s) failed: %r", namespace, name, uid, exc)
        return out

    async def _prepare_one(self, namespace: str, name: str, uid: str) -> Answer:
        entry = self.claims.get(uid)
        self.ever_prepared.add(uid)
        seen = self.prepared_here.get(uid, 0)
        self.prepared_here[uid] = seen + 1
        if entry is not None:
            if self.fault == "prepare-not-idempotent" and seen:
                return self._answer_again(uid, entry, seen)
            return list(entry["devices"])  # idempotent: the kubelet may ask again
        answer: Answer = []
        spec: list[list[str]] = []
        try:
            results = await self._allocated(namespace, name, uid)
        except ClaimError:
            if self.fault == "ghost-claims-prepared":
                return []  # the fault: "prepared", with nothing
            raise
        if self.fault == "exclusive-devices":
            held = {d["device"] for u, c in self.claims.items() if u != uid for d in c["devices"]}
            taken = [r.device for r in results if r.device in held]
            if taken:
                raise ClaimError(f"devices {taken} are held by another claim")
        for result in results:
            cdi_name = _NOT_CDI.sub("_", f"{uid}-{result.device}{self.salt}")
            spec.append([cdi_name, result.device])
            suffix = "-missing" if self.fault == "undefined-cdi-ids" else ""
            answer.append(
                {
                    "request": result.request,
                    "pool": result.pool,
                    "device": result.device,
                    "cdiIDs": [f"{CDI_KIND}={cdi_name}{suffix}"],
                    "shareID": getattr(result, "shareID", None) or "",
                }
            )
        self.write_spec(uid, spec)  # defined on disk before anyone is told its name
        self.claims[uid] = {"namespace": namespace, "name": name, "devices": answer, "spec": spec}
        self.save()  # checkpointed before the answer leaves
        if self.fault == "racy-answers":
            # The fault: the answer goes through shared state across an await.
            self.last_answer = answer
            await asyncio.sleep(0.2)  # long enough that concurrent calls overlap
            return self.last_answer
        return answer

    def _answer_again(self, uid: str, entry: dict[str, Any], seen: int) -> Answer:
        # The fault: new names each time, defined on disk (so only idempotence is broken);
        # not checkpointed, so a restarted driver answers the originals.
        again = f"-again-{seen}"
        self.write_spec(uid, [*entry["spec"], *([n + again, d] for n, d in entry["spec"])])
        return [d | {"cdiIDs": [i + again for i in d["cdiIDs"]]} for d in entry["devices"]]

    async def _allocated(self, namespace: str, name: str, uid: str) -> list[Any]:
        """The claim's allocation results for this driver, read from the API server."""
        where = f"ResourceClaim {namespace}/{name}"
        api = await self.apis.get()
        try:
            found: Any = await self.client.get(api.claim_type, name, namespace=namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                raise ClaimError(f"{where} not found") from exc
            raise ClaimError(f"cannot read {where}: {exc.status.message}") from exc
        got = found.metadata.uid if found.metadata else None
        if got != uid:
            raise ClaimError(f"{where} has UID {got}, not {uid} (deleted and re-created?)")
        allocation = found.status.allocation if found.status else None
        if allocation is None or allocation.devices is None:
            raise ClaimError(f"{where} is not allocated")
        if self.fault == "answers-other-drivers":
            return list(allocation.devices.results or [])  # the fault: no filter by driver
        ours = [r for r in allocation.devices.results or [] if r.driver == self.driver]
        for r in ours:  # never hand out a device this driver did not publish
            if r.pool != self.node or r.device not in self.devices:
                raise ClaimError(f"{where}: device {r.pool}/{r.device} is not on this node")
        return ours

    async def unprepare(self, uids: list[str]) -> dict[str, str]:
        """Claim UID -> error ("" when done); a claim never prepared is done already."""
        out: dict[str, str] = {}
        async with self.lock:
            for uid in uids:
                if self.fault == "unknown-unprepare-fails" and uid not in self.ever_prepared:
                    out[uid] = "fault: no such claim"
                    continue
                if (
                    self.fault == "unprepare-not-idempotent"
                    and uid in self.ever_prepared
                    and uid not in self.claims
                ):
                    out[uid] = "fault: claim already unprepared"
                    continue
                try:
                    self.spec_path(uid).unlink(missing_ok=True)
                    if self.claims.pop(uid, None) is not None:
                        self.save()
                    self.prepared_here.pop(uid, None)  # ever_prepared stays
                    out[uid] = ""
                    log.info("unprepared claim %s", uid)
                except OSError as exc:
                    out[uid] = f"unpreparing failed: {exc}"
                    log.warning("claim %s not unprepared: %s", uid, exc)
        return out

    # --- ResourceSlices ----------------------------------------------------------------

    def desired_slices(self) -> dict[str, resource_v1.ResourceSlice]:
        """Slice name -> slice: ours, and with the fault one for a node that is not ours."""
        nodes = [self.node, f"{self.node}-other"] if self.fault == "foreign-slices" else [self.node]
        count = 2 if self.fault == "incomplete-pool" else 1  # the fault: one never comes
        names = {f"{node}-{self.driver.replace('.', '-')}": node for node in nodes}
        return {name: self._slice(name, node, count) for name, node in names.items()}

    def _slice(self, name: str, node: str, count: int) -> resource_v1.ResourceSlice:
        extra = {"allowMultipleAllocations": True} if self.shared else {}
        doc = {
            "metadata": {"name": name},
            "spec": {
                "driver": self.driver,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": count},
                "devices": [
                    {"name": name, "attributes": {"index": {"int": i}}, **extra}
                    for i, name in enumerate(self.devices)
                ],
            },
        }
        return cast(resource_v1.ResourceSlice, resource_v1.ResourceSlice.from_dict(doc))

    async def _ensure(self, name: str, desired: resource_v1.ResourceSlice, update: bool) -> None:
        """Create the slice when missing; at start also bring an old one up to date."""
        api = await self.apis.get()
        try:
            current = api.from_wire(await self.client.get(api.slice_type, name))
        except ApiError as exc:
            # A node identity is told 403, not 404, about a slice that is not there.
            if exc.status.code not in (403, 404):
                raise
            await self.client.create(api.to_wire(desired))
            log.info("published ResourceSlice %s (%s/%s)", name, api.version, self.driver)
            return
        desired.spec.pool.generation = current.spec.pool.generation
        if not update or current.spec.to_dict() == desired.spec.to_dict():
            return
        assert current.metadata is not None
        assert desired.metadata is not None
        # Pool content changed: a new generation, so nobody mixes old and new devices.
        desired.spec.pool.generation += 1
        desired.metadata.resourceVersion = current.metadata.resourceVersion
        await self.client.replace(api.to_wire(desired))
        log.info("updated ResourceSlice %s (generation %d)", name, desired.spec.pool.generation)

    async def publish(self) -> None:
        """Keep the slices published: check every second, re-create any deleted one."""
        done: set[str] = set()
        while True:
            for name, desired in self.desired_slices().items():
                if self.fault == "no-republish" and name in done:
                    continue  # the fault: published once, never again
                try:
                    await self._ensure(name, desired, name not in done)
                    done.add(name)
                except Exception as exc:  # the API server may be slow or away: try again
                    log.warning("ResourceSlice %s: %r", name, exc)
            await asyncio.sleep(REPUBLISH_EVERY_S)

    # --- health ------------------------------------------------------------------------

    async def health(self, pb: Any) -> AsyncIterator[Any]:
        """One full list (all healthy), then hold the stream open until we stop."""
        now = int(time.time())
        yield pb.NodeWatchResourcesResponse(
            devices=[
                pb.DeviceHealth(
                    device=pb.DeviceIdentifier(pool_name=self.node, device_name=name),
                    health=pb.HEALTHY,
                    last_updated_time=now,
                    health_check_timeout_seconds=(
                        0 if self.fault == "no-health-timeout" else HEALTH_TIMEOUT_S
                    ),
                )
                for name in self.devices
            ]
        )
        await self.stopping.wait()


# --- gRPC services -----------------------------------------------------------------------


def prepare_response(
    pb: Any, results: dict[str, Answer | str], share_ids: bool, fault: str = "none"
) -> Any:
    response = pb.NodePrepareResourcesResponse()
    for uid, result in results.items():
        entry = response.claims[uid]  # present even with no devices: "prepared, nothing"
        if isinstance(result, str):
            entry.error = result
            continue
        for d in result:
            # A subrequest "r/s" is answered as "r", the name a container uses (as
            # kubeletplugin does): the kubelet matches request names exactly.
            request = (
                d["request"] if fault == "subrequest-full-name" else d["request"].partition("/")[0]
            )
            device = pb.Device(
                request_names=[request],
                pool_name=d["pool"],
                device_name=d["device"],
                cdi_device_ids=d["cdiIDs"],
            )
            if share_ids and d["shareID"] and fault != "no-share-id":  # none in v1beta1
                device.share_id = d["shareID"]
            entry.devices.append(device)
    return response


async def prepare_call(toy: Toy, claims: Iterable[Any], context: Ctx) -> dict[str, Answer | str]:
    results = await toy.prepare([(c.namespace, c.name, c.uid) for c in claims])
    errors = [f"{uid}: {r}" for uid, r in results.items() if isinstance(r, str)]
    if toy.fault == "whole-call-fails" and errors:
        log.warning("fault: failing the whole NodePrepareResources call")
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "; ".join(errors))
    return results


class Plugin(v1_grpc.DRAPluginServicer, v1beta1_grpc.DRAPluginServicer):
    """DRAPlugin in the version of ``pb`` (v1 or v1beta1: the same messages but share_id)."""

    def __init__(self, toy: Toy, pb: Any) -> None:
        self.toy = toy
        self.pb = pb

    async def NodePrepareResources(self, request: Any, context: Ctx) -> Any:
        results = await prepare_call(self.toy, request.claims, context)
        return prepare_response(self.pb, results, share_ids=self.pb is v1, fault=self.toy.fault)

    async def NodeUnprepareResources(self, request: Any, context: Ctx) -> Any:
        errors = await self.toy.unprepare([c.uid for c in request.claims])
        response = self.pb.NodeUnprepareResourcesResponse()
        for uid, error in errors.items():
            response.claims[uid].error = error
        return response


class Health(
    health_v1_grpc.DRAResourceHealthServicer, health_v1alpha1_grpc.DRAResourceHealthServicer
):
    """DRAResourceHealth in the version of ``pb`` (v1 or v1alpha1: the same messages)."""

    def __init__(self, toy: Toy, pb: Any) -> None:
        self.toy = toy
        self.pb = pb

    async def NodeWatchResources(self, request: Any, context: Ctx) -> AsyncIterator[Any]:
        async for response in self.toy.health(self.pb):
            yield response


class Registration(reg_grpc.RegistrationServicer):
    def __init__(self, driver: str, endpoint: Path, relative: bool = False) -> None:
        self.driver = driver
        self.endpoint = endpoint
        self.relative = relative

    async def GetInfo(self, request: reg.InfoRequest, context: Ctx) -> reg.PluginInfo:
        log.info("kubelet asked GetInfo")
        return reg.PluginInfo(
            type="DRAPlugin",
            name=self.driver,
            endpoint=self.endpoint.name if self.relative else str(self.endpoint),
            supported_versions=["v1.DRAPlugin", "v1beta1.DRAPlugin"],
        )

    async def NotifyRegistrationStatus(
        self, request: reg.RegistrationStatus, context: Ctx
    ) -> reg.RegistrationStatusResponse:
        if request.plugin_registered:
            log.info("registered with the kubelet")
        else:
            log.error("the kubelet refused the registration: %s", request.error)
        return reg.RegistrationStatusResponse()


async def serve(path: Path, add: Callable[[grpc.aio.Server], None]) -> grpc.aio.Server:
    path.unlink(missing_ok=True)  # a stale socket from an earlier run would block the bind
    server = grpc.aio.server()
    add(server)
    server.add_insecure_port(f"unix://{path}")
    await server.start()
    log.info("serving %s", path)
    return server


# --- main --------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> int:
    boot_id = Path(args.boot_id_file).read_text().strip()
    plugin_dir = Path(args.plugin_dir).absolute()
    registry = Path(args.registry).absolute()
    for directory in (plugin_dir, registry, Path(args.cdi_dir)):
        directory.mkdir(parents=True, exist_ok=True)
    dra_sock = plugin_dir / "dra.sock"
    reg_sock = registry / f"{args.driver}-reg.sock"
    client = make_client(load_config(args.kubeconfig))
    toy = Toy(args, client, boot_id)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, toy.stopping.set)
    toy.restore()

    def add_dra(server: grpc.aio.Server) -> None:
        v1_grpc.add_DRAPluginServicer_to_server(Plugin(toy, v1), server)
        if toy.fault != "unserved-version":
            v1beta1_grpc.add_DRAPluginServicer_to_server(Plugin(toy, v1beta1), server)
        health_v1_grpc.add_DRAResourceHealthServicer_to_server(Health(toy, health_v1), server)
        health_v1alpha1_grpc.add_DRAResourceHealthServicer_to_server(
            Health(toy, health_v1alpha1), server
        )

    # DRA first: once the registration socket exists the kubelet may call it at once.
    dra = await serve(dra_sock, add_dra)
    registration = await serve(
        reg_sock,
        lambda s: reg_grpc.add_RegistrationServicer_to_server(
            Registration(args.driver, dra_sock, relative=toy.fault == "relative-endpoint"), s
        ),
    )
    publisher = asyncio.create_task(toy.publish())
    log.info("driver %s on node %s running (fault: %s)", args.driver, args.node, args.fault)
    await toy.stopping.wait()

    log.info("stopping")
    publisher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await publisher
    await registration.stop(0.5)  # unregister first: no new calls into a closing server
    await dra.stop(0.5)
    for path in (reg_sock, dra_sock):
        path.unlink(missing_ok=True)
    await client.close()
    log.info("stopped; ResourceSlices left in place")
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="toy_driver", description=__doc__.splitlines()[0])
    p.add_argument("--driver", default="toy.conformance.example")
    p.add_argument("--node", required=True)
    p.add_argument("--registry", required=True, help="the kubelet's plugins_registry dir")
    p.add_argument("--plugin-dir", required=True, help="holds dra.sock and checkpoint.json")
    p.add_argument("--cdi-dir", required=True, help="where CDI specs are written")
    p.add_argument("--kubeconfig", default=None)
    p.add_argument("--boot-id-file", default="/proc/sys/kernel/random/boot_id")
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument("--shared", action="store_true", help="devices allow multiple allocations")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.WARNING,  # not the HTTP client's line per request
        format="%(asctime)s toy-driver %(levelname)s %(message)s",
    )
    for name in (log.name, "accel_plugins"):  # ours, and which resource.k8s.io is spoken
        logging.getLogger(name).setLevel(logging.INFO)
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
