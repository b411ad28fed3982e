"""The chart's admission check of opaque parameters (templates/dra-opaque-parameters.yaml):
a ValidatingAdmissionPolicy that refuses, when a ResourceClaim or ResourceClaimTemplate is
created, the opaque parameters for our drivers that Prepare would refuse, with Prepare's
message after the field path.

The expected messages are not written here: each case runs through the real Preparer (the
simulated NVIDIA sharing node of tests/dra_sharing_fixtures.py, a generic device for the
driver that takes no parameters) and the API server's refusal must carry Prepare's own
words. The invalid cases are Prepare's own table, read from
tests/unit/dra/test_dra_sharing.py, so a case added there is checked here too; the few
that depend on the devices a claim gets are listed in :data:`DEVICE_DEPENDENT` (admission
cannot know them; Prepare still refuses them). The rendered policy runs on a real
kube-apiserver (1.34 and 1.36)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from accel_plugins.dra.checkpoint import Checkpoint
from accel_plugins.dra.model import (
    AllocatedDevice,
    ClaimRef,
    NamedDevice,
    OpaqueConfig,
    ResolvedClaim,
    device_names,
)
from accel_plugins.dra.prepare import Inventory, Preparer
from accel_plugins.plugin.device import Device, tree
from tests.dra_sharing_fixtures import GPU_CONFIG, MPS, TIME_SLICED, gpu_config, sharing_node
from tests.fixtures.dra_kube import V1_34, V1_36, ServerOf
from tests.support.chart import RELEASE, Obj, ci_values, helm_sdk, of_kind, render
from tests.support.polling import until
from tests.unit.dra import test_dra_sharing

if TYPE_CHECKING:
    from lightkube import AsyncClient

    from accel_plugins.conformance.envtest import ApiServer

POLICY = f"{RELEASE}-accel-plugins-dra-opaque-parameters"
NVIDIA = "gpu.nvidia.com"  # the chart's default driver names (values.yaml)
GENERIC = "generic.accel-plugins.io"
POOL = "node-a"
# Prepare's path of a claim's first config, and the claim's and the template's own.
PREPARE_WHERE = "status.allocation.devices.config[0].opaque.parameters"
CLAIM_WHERE = "spec.devices.config[0].opaque.parameters"
TEMPLATE_WHERE = "spec.spec.devices.config[0].opaque.parameters"

# Prepare's cases that turn on the devices allocated, which a claim does not know when it is
# created: whether the GPU is an MPS replica (the config file's sharing.mps), and how many
# GPUs a request gets and their UUIDs. Admission lets them through; Prepare refuses them.
DEVICE_DEPENDENT = {
    "mps-on-a-time-sliced-gpu": "the device is no MPS replica",
    "time-slicing-on-mps-replicas": "the device is an MPS replica",
    "per-device-index-out-of-range": "the request got one GPU",
}

# Values beyond Prepare's table, each checked against Prepare's own verdict (None: accepted):
# odd JSON types in every field Prepare reads, quantities in each form parse_quantity takes
# or refuses, Python's repr of strings with quotes.
MPS_ON = {"strategy": "MPS"}
ODD: dict[str, dict[str, Any]] = {
    "no-sharing": gpu_config(),
    "time-slicing-default": gpu_config({"strategy": "TimeSlicing"}),
    "interval-default": gpu_config(
        {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}}
    ),
    "interval-absent": gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {}}),
    "interval-null": gpu_config(
        {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": None}}
    ),
    "interval-number": gpu_config(
        {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": 5}}
    ),
    "time-slicing-config-not-an-object": gpu_config(
        {"strategy": "TimeSlicing", "timeSlicingConfig": "Long"}
    ),
    "time-slicing-config-misspelt": gpu_config(
        {"strategy": "TimeSlicing", "timeSlicingConfig": {"intervall": "Long"}}
    ),
    "time-slicing-config-with-mps": gpu_config(
        {"strategy": "MPS", "timeSlicingConfig": {"interval": "Default"}}
    ),
    "mps-config-null-with-time-slicing": gpu_config({"strategy": "TimeSlicing", "mpsConfig": None}),
    "strategy-absent": gpu_config({"mpsConfig": {}}),
    "strategy-null": gpu_config({"strategy": None}),
    "strategy-number": gpu_config({"strategy": 5}),
    "strategy-true": gpu_config({"strategy": True}),
    "strategy-float": gpu_config({"strategy": 1.5}),
    "strategy-whole-float": gpu_config({"strategy": 50.0}),
    "strategy-list": gpu_config({"strategy": ["MPS", 1, None]}),
    "strategy-object": gpu_config({"strategy": {"name": "MPS"}}),
    "strategy-quote": gpu_config({"strategy": "it's"}),
    "strategy-quotes": gpu_config({"strategy": 'it\'s "shared"'}),
    "strategy-backslash": gpu_config({"strategy": "a\\b\tc"}),
    "strategy-lowercase": gpu_config({"strategy": "mps"}),
    "sharing-null": {**GPU_CONFIG, "sharing": None},
    "sharing-not-an-object": {**GPU_CONFIG, "sharing": "MPS"},
    "sharing-list": {**GPU_CONFIG, "sharing": []},
    "sharing-misspelt": gpu_config({"stratgey": "MPS"}),
    "api-version-absent": {"kind": "GpuConfig"},
    "api-version-number": {**GPU_CONFIG, "apiVersion": 1},
    "kind-absent": {"apiVersion": GPU_CONFIG["apiVersion"]},
    "kind-lowercase": {**GPU_CONFIG, "kind": "gpuconfig"},
    "unknown-top-level-field": gpu_config(shareing={}),
    "two-unknown-fields": gpu_config(alpha=1, zeta=2),  # see the test of their order
    "driver-config-nvidia": gpu_config(driverConfig={"driver": "nvidia"}),
    "driver-config-empty": gpu_config(driverConfig={}),
    "driver-config-other": gpu_config(driverConfig={"driver": "amd"}),
    "driver-config-null-driver": gpu_config(driverConfig={"driver": None}),
    "driver-config-not-an-object": gpu_config(driverConfig="nvidia"),
    "driver-config-misspelt": gpu_config(driverConfig={"drvier": "nvidia"}),
    "mps-config-null": gpu_config({"strategy": "MPS", "mpsConfig": None}),
    "mps-config-not-an-object": gpu_config({"strategy": "MPS", "mpsConfig": [1]}),
    "percentage-zero": gpu_config(
        {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 0}}
    ),
    "percentage-100": gpu_config(
        {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 100}}
    ),
    "percentage-string": gpu_config(
        {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": "50"}}
    ),
    "percentage-float": gpu_config(
        {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50.0}}
    ),
    "percentage-true": gpu_config(
        {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": True}}
    ),
    "percentage-null": gpu_config(
        {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": None}}
    ),
    **{
        f"pinned-{name}": gpu_config(
            {"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": value}}
        )
        for name, value in {
            "1Mi": "1Mi",
            "1Gi": "1Gi",
            "spaces": " 1Gi ",
            "decimal": "1.5Gi",
            "exponent": "2e6",
            "exponent-small": "1e3",
            "milli": "1048576000m",
            "below-by-a-milli": "1048575999m",
            "point": "1048576.",
            "leading-point": ".5Gi",
            "negative": "-1Gi",
            "zero": "0",
            "int": 1048576,
            "int-small": 4096,
            "float": 1048576.0,
            "float-small": 0.5,
            "true": True,
            "list": ["1Gi"],
            "object": {"value": "1Gi"},
            "words": "lots",
            "unit-only": "Mi",
            "upper-k": "1K",
            "space-inside": "1 Gi",
        }.items()
    },
    "per-device-good": gpu_config(
        {"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": {"0": "1Gi"}}}
    ),
    "per-device-small": gpu_config(
        {"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": {"0": "1Ki"}}}
    ),
    "per-device-not-a-quantity": gpu_config(
        {"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": {"0": "x"}}}
    ),
    "per-device-null": gpu_config(
        {"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": {"0": None}}}
    ),
    "per-device-not-an-object": gpu_config(
        {"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": "1Gi"}}
    ),
    "per-device-before-pinned": gpu_config(
        {
            "strategy": "MPS",
            "mpsConfig": {
                "defaultPinnedDeviceMemoryLimit": "1Ki",
                "defaultPerDevicePinnedMemoryLimit": {"0": 5},
            },
        }
    ),
    "percentage-before-limits": gpu_config(
        {
            "strategy": "MPS",
            "mpsConfig": {
                "defaultPinnedDeviceMemoryLimit": "1Ki",
                "defaultActiveThreadPercentage": 101,
            },
        }
    ),
    "mps-limits-all-good": gpu_config(
        {
            "strategy": "MPS",
            "mpsConfig": {
                "defaultActiveThreadPercentage": 50,
                "defaultPinnedDeviceMemoryLimit": "2Gi",
                "defaultPerDevicePinnedMemoryLimit": {"0": "1Gi"},
            },
        }
    ),
    "everything-wrong": {"apiVersion": "v1", "kind": "Pod", "sharing": {"strategy": "x"}},
}


@pytest.fixture(autouse=True)
def _helm() -> None:
    helm_sdk()


def prepare_cases() -> list[tuple[str, str, dict[str, Any]]]:
    """(id, resource, parameters) of each invalid case of Prepare's own table."""
    test = test_dra_sharing.test_invalid_parameters_fail_their_claim_naming_the_field
    (mark,) = [m for m in getattr(test, "pytestmark", []) if m.name == "parametrize"]
    cases = []
    for case in mark.args[1]:
        resource, parameters, _message = case.values
        cases.append((str(case.id), resource, parameters))
    return cases


def policy_objects(values: Obj | None = None) -> list[Obj]:
    objects = render(values if values is not None else ci_values("dra"))
    return [o for o in objects if o["metadata"]["name"] == POLICY]


def errors_expression(values: Obj) -> str:
    (policy,) = [o for o in policy_objects(values) if o["kind"] == "ValidatingAdmissionPolicy"]
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    return str(variables["errors"])


# -- rendering ---------------------------------------------------------------------------


def test_the_policy_checks_every_claim_and_template_created() -> None:
    objects = policy_objects()
    policy = of_kind(objects, "ValidatingAdmissionPolicy")[POLICY]["spec"]
    (rule,) = policy["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["resourceclaims", "resourceclaimtemplates"]
    assert rule["operations"] == ["CREATE"]  # a claim's spec is immutable
    assert rule["apiVersions"] == ["*"]
    # Prepare stays the judge: a claim the policy cannot evaluate goes on to it.
    assert policy["failurePolicy"] == "Ignore"
    binding = of_kind(objects, "ValidatingAdmissionPolicyBinding")[POLICY]["spec"]
    assert binding == {"policyName": POLICY, "validationActions": ["Deny"]}


@pytest.mark.parametrize(
    ("values", "checked", "unchecked"),
    [
        pytest.param({}, [NVIDIA, GENERIC], [], id="both"),
        pytest.param(
            {"nvidia": {"draDriverName": "gpu.example.org"}},
            ["gpu.example.org", GENERIC],
            [NVIDIA],
            id="renamed",
        ),
        pytest.param({"nvidia": {"enabled": False}}, [GENERIC], [NVIDIA], id="generic-only"),
        pytest.param(
            {"generic": {"enabled": False, "devices": []}, "devices": []},
            [NVIDIA],
            [GENERIC],
            id="nvidia-only",
        ),
        pytest.param(
            {"generic": {"enabled": True, "devices": [], "command": "fpga"}, "devices": []},
            [NVIDIA],
            [GENERIC],
            id="generic-runs-another-backend",
        ),
    ],
)
def test_the_drivers_checked_are_the_charts(
    values: Obj, checked: list[str], unchecked: list[str]
) -> None:
    merged = ci_values("dra")
    for key, value in values.items():
        merged[key] = {**merged.get(key, {}), **value} if isinstance(value, dict) else value
    expression = errors_expression(merged)
    for driver in checked:
        assert f"c_.opaque.driver == '{driver}'" in expression
    for driver in unchecked:
        assert f"'{driver}'" not in expression


@pytest.mark.parametrize(
    "values",
    [
        pytest.param(ci_values("dra") | {"dra": {"validateOpaqueParameters": False}}, id="off"),
        pytest.param(ci_values("defaults"), id="device-plugin-mode"),
        pytest.param(
            {
                "kubeletApi": "dra",
                "nvidia": {"enabled": False},
                "generic": {"enabled": True, "command": "fpga"},
            },
            id="no-driver-of-ours-reads-parameters",
        ),
    ],
)
def test_no_policy(values: Obj) -> None:
    assert policy_objects(values) == []


# -- Prepare's verdicts ------------------------------------------------------------------


@dataclass
class Claims:
    """An in-memory claim source: each claim one device of one request, one config."""

    claims: dict[str, ResolvedClaim] = field(default_factory=dict)

    async def resolve(self, claim: ClaimRef, driver: str, pool: str) -> ResolvedClaim:
        return self.claims[claim.uid]


class Node:
    """The real Preparer of each driver on one node: what it says of a claim's parameters."""

    def __init__(self, tmp_path: Path) -> None:
        self.claims = Claims()
        self.uids = itertools.count()
        backend, _ = sharing_node(tmp_path)
        named = device_names(tree(backend.build(backend.check())), backend)
        generic = {"serial-0": NamedDevice("serial", Device("serial-0"))}
        self.inventories = {
            NVIDIA: Inventory(named, allocator=backend, configurer=backend),
            GENERIC: Inventory(generic),
        }
        self.preparers = {
            driver: Preparer(
                driver=driver,
                pool=POOL,
                claims=self.claims,
                cdi_dir=tmp_path / "cdi",
                checkpoint=Checkpoint(tmp_path / f"{driver}.json", driver),
                inventory=partial(_same, inventory),
            )
            for driver, inventory in self.inventories.items()
        }

    def device(self, driver: str, resource: str) -> str:
        """The first device of ``resource`` (replica 0 of a shared GPU)."""
        return min(
            (n for n, d in self.inventories[driver].devices.items() if d.resource == resource),
            key=lambda n: (len(n), n),
        )

    async def prepare(self, driver: str, resource: str, parameters: dict[str, Any]) -> str | None:
        """Prepare's error for a claim of one ``resource`` device with these parameters,
        without its path (``status.allocation.devices.config[0].opaque.parameters``);
        None when it prepares the claim."""
        uid = f"uid-{next(self.uids)}"
        ref = ClaimRef(uid=uid, namespace="default", name=f"claim-{uid}")
        device = AllocatedDevice("gpu", driver, POOL, self.device(driver, resource))
        self.claims.claims[uid] = ResolvedClaim(ref, (device,), (OpaqueConfig(parameters),))
        result = (await self.preparers[driver].prepare([ref]))[uid]
        if not isinstance(result, str):
            return None
        assert result.startswith(PREPARE_WHERE), result
        return result.removeprefix(PREPARE_WHERE)


def _same(inventory: Inventory) -> Inventory:
    return inventory


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def resource_for(parameters: dict[str, Any]) -> str:
    """The resource a claim with these parameters is meant for: MPS replicas for MPS."""
    sharing = parameters.get("sharing")
    strategy = sharing.get("strategy") if isinstance(sharing, dict) else None
    return MPS if strategy == "MPS" else TIME_SLICED


# -- against a real API server -----------------------------------------------------------


@pytest.fixture(name="kube_apiserver", params=[pytest.param(k, id=k.name) for k in (V1_34, V1_36)])
def every_served_v1(request: pytest.FixtureRequest, apiservers: ServerOf) -> ApiServer:
    """The chart's DRA needs resource.k8s.io/v1: 1.34 and the newest, 1.36."""
    return apiservers(request.param)


def claim_of(namespace: str, driver: str, parameters: Any, *more: Any) -> Obj:
    configs = [
        {"opaque": {"driver": d, "parameters": p}}
        for d, p in ((driver, parameters), *zip(more[::2], more[1::2], strict=True))
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"generateName": "opaque-", "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": NVIDIA}}],
                "config": configs,
            }
        },
    }


def template_of(claim: Obj) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": claim["metadata"],
        "spec": {"spec": claim["spec"]},
    }


BAD = gpu_config({"strategy": "Sliced"})  # refused while the policy is in force


@dataclass
class Admission:
    kube: AsyncClient
    namespace: str

    async def verdict(self, obj: Obj) -> str | None:
        """The policy's message when the API server refuses ``obj``; None when it is created."""
        from lightkube import ApiError, codecs

        try:
            await self.kube.create(cast(Any, codecs.from_dict(obj)))
        except ApiError as exc:
            status = exc.status
            message = status.message or ""
            assert (status.code, status.reason) == (422, "Invalid"), message
            prefix = (
                f"ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}' denied request: "
            )
            assert prefix in message, message
            return message.split(prefix, 1)[1]
        return None

    async def in_force(self) -> bool:
        return await self.verdict(claim_of(self.namespace, NVIDIA, BAD)) is not None


@pytest.fixture
async def admission(kube: AsyncClient, kube_namespace: str) -> AsyncIterator[Admission]:
    """The rendered policy and binding applied, in force; deleted after, and out of force
    (the session's API server is shared: other tests create such claims to see Prepare
    refuse them)."""
    from lightkube import codecs
    from lightkube.resources.admissionregistration_v1 import (
        ValidatingAdmissionPolicy,
        ValidatingAdmissionPolicyBinding,
    )

    from accel_plugins.dra.kube.client import FIELD_MANAGER

    checker = Admission(kube, kube_namespace)
    for obj in policy_objects():
        if obj["kind"] == "ValidatingAdmissionPolicy":
            # Fail here, not Ignore as shipped: an expression that fails at run time then
            # shows as a refusal with the error instead of passing for an admission.
            obj["spec"]["failurePolicy"] = "Fail"
        await kube.apply(cast(Any, codecs.from_dict(obj)), field_manager=FIELD_MANAGER)
    try:
        # A policy takes effect once the API server has loaded it; no event says when.
        await until(checker.in_force, "the opaque-parameters policy in force")
        yield checker
    finally:
        await kube.delete(ValidatingAdmissionPolicyBinding, POLICY)
        await kube.delete(ValidatingAdmissionPolicy, POLICY)

        async def gone() -> bool:
            return not await checker.in_force()

        await until(gone, "the opaque-parameters policy out of force")


async def test_prepares_invalid_cases_are_refused_when_the_claim_is_created(
    admission: Admission, node: Node
) -> None:
    """Each invalid case of Prepare's table: refused with Prepare's message after the
    claim's own path, for a claim and for a template; those that depend on the devices
    allocated are admitted and left to Prepare."""
    cases = prepare_cases()
    assert len(cases) >= 15
    assert set(DEVICE_DEPENDENT) <= {case for case, _, _ in cases}
    wrong = []
    for case, resource, parameters in cases:
        expected = await node.prepare(NVIDIA, resource, parameters)
        assert expected is not None, f"{case}: Prepare accepts it"
        claim = claim_of(admission.namespace, NVIDIA, parameters)
        got = await admission.verdict(claim), await admission.verdict(template_of(claim))
        if case in DEVICE_DEPENDENT:
            want: tuple[str | None, str | None] = (None, None)
        else:
            want = (f"{CLAIM_WHERE}{expected}", f"{TEMPLATE_WHERE}{expected}")
        if got != want:
            wrong.append(f"{case}: admission said {got}, Prepare {want}")
    assert not wrong, "\n".join(wrong)


async def test_admission_agrees_with_prepare_on_odd_values(
    admission: Admission, node: Node
) -> None:
    """Parameters beyond the table: admission refuses exactly those Prepare refuses, with
    Prepare's message (Python's repr of the value at fault included)."""
    wrong = []
    for case, parameters in ODD.items():
        expected = await node.prepare(NVIDIA, resource_for(parameters), parameters)
        want = None if expected is None else f"{CLAIM_WHERE}{expected}"
        got = await admission.verdict(claim_of(admission.namespace, NVIDIA, parameters))
        if got != want:
            wrong.append(f"{case}: admission said {got!r}, Prepare {want!r}")
    assert not wrong, "\n".join(wrong)


async def test_the_generic_driver_takes_no_parameters(admission: Admission, node: Node) -> None:
    """Prepare adds the resource the device came from, which admission cannot know."""
    parameters = {"anything": True}
    expected = await node.prepare(GENERIC, "serial", parameters)
    assert expected == f": driver {GENERIC} takes no opaque parameters for resource serial"
    claim = claim_of(admission.namespace, GENERIC, parameters)
    for obj, where in ((claim, CLAIM_WHERE), (template_of(claim), TEMPLATE_WHERE)):
        got = await admission.verdict(obj)
        assert got is not None
        assert f"{where}{expected}".startswith(got)
        assert got == f"{where}: driver {GENERIC} takes no opaque parameters"


async def test_other_drivers_and_good_parameters_are_admitted(admission: Admission) -> None:
    namespace = admission.namespace
    good = gpu_config({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}})
    # Another driver's parameters are its own business, even in GpuConfig's shape.
    assert await admission.verdict(claim_of(namespace, "gpu.example.com", BAD)) is None
    assert await admission.verdict(claim_of(namespace, "gpu.example.com", {"x": 1})) is None
    assert await admission.verdict(claim_of(namespace, NVIDIA, good)) is None
    assert await admission.verdict(template_of(claim_of(namespace, NVIDIA, good))) is None
    mixed = claim_of(namespace, "gpu.example.com", BAD, NVIDIA, good)
    assert await admission.verdict(mixed) is None
    # A claim without configs, and one with no devices section at all.
    no_config = claim_of(namespace, NVIDIA, good)
    no_config["spec"]["devices"].pop("config")
    assert await admission.verdict(no_config) is None
    no_devices = {**no_config, "spec": {}}
    assert await admission.verdict(no_devices) is None
    assert await admission.verdict(template_of(no_devices)) is None


async def test_the_first_bad_config_is_named_by_its_place(admission: Admission) -> None:
    good = gpu_config({"strategy": "TimeSlicing"})
    claim = claim_of(admission.namespace, NVIDIA, good, "gpu.example.com", BAD, NVIDIA, BAD)
    claim["spec"]["devices"]["config"].append({"opaque": {"driver": GENERIC, "parameters": {}}})
    assert await admission.verdict(claim) == (
        "spec.devices.config[2].opaque.parameters.sharing.strategy: "
        "unknown GPU sharing strategy 'Sliced' (known: TimeSlicing, MPS)"
    )


async def test_of_several_unknown_fields_admission_names_the_first_in_sorted_order(
    admission: Admission, node: Node
) -> None:
    """Prepare names the first in the claim's order, which does not reach CEL (an object's
    keys come in no fixed order there): both refuse, naming different fields."""
    parameters = gpu_config(zeta=1, alpha=2)
    expected = await node.prepare(NVIDIA, TIME_SLICED, parameters)
    known = "unknown field (known: apiVersion, kind, sharing, driverConfig)"
    assert expected == f".zeta: {known}"
    got = await admission.verdict(claim_of(admission.namespace, NVIDIA, parameters))
    assert got == f"{CLAIM_WHERE}.alpha: {known}"
