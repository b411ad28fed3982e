"""The chart's default pod security settings are the documented ones (README, chart section).

Both backends run as uid 0 with every capability dropped: root only as the owner of the
kubelet's root-owned sockets and directories. Privileged mode is an explicit opt-in.
"""

from __future__ import annotations

import pytest
import yaml

from tests.support.chart import CI_VALUES, Obj, ci_values, container, mounts, of_kind, render

CI_NAMES = [p.name.removesuffix("-values.yaml") for p in CI_VALUES]

DOCUMENTED_CONTAINER_CONTEXT = {
    "privileged": False,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
    "runAsUser": 0,
    "runAsGroup": 0,
    "runAsNonRoot": False,
    "seccompProfile": {"type": "RuntimeDefault"},
}

# What NVIDIA's chart gives the plugin for a MIG strategy other than none: NVML needs the MIG
# monitor capability, which the NVIDIA runtime hands over with CAP_SYS_ADMIN.
MIG_CONTAINER_CONTEXT = {
    key: value
    for key, value in DOCUMENTED_CONTAINER_CONTEXT.items()
    if key != "allowPrivilegeEscalation"
} | {"capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}

# The MPS control daemon (nvidia.mps in values.yaml): no privileged mode, two capabilities to
# start MPS servers as their clients' user.
MPS_CONTAINER_CONTEXT = DOCUMENTED_CONTAINER_CONTEXT | {
    "capabilities": {"drop": ["ALL"], "add": ["SETUID", "SETGID"]}
}
# What it writes on the host: the MPS root (pipes, logs, status files) and its shm directory.
MPS_WRITABLE_HOST_PATHS = {"/run/nvidia/mps", "/run/nvidia/mps/shm"}

# Host paths a plugin may write: its sockets (device plugin and, in plugin-watcher mode,
# registration), and CDI specs when CDI is on. All others read-only.
WRITABLE_HOST_PATHS = {
    "/var/lib/kubelet/device-plugins",
    "/var/lib/kubelet/plugins_registry",
    "/var/run/cdi",
    # nvidia.nfd.enabled: the Node Feature Discovery feature file the plugin keeps.
    "/etc/kubernetes/node-feature-discovery/features.d",
    # kubeletApi dra: the DRA driver's socket and checkpoint under <dir>/<driver>/.
    "/var/lib/kubelet/plugins",
    # common.stateDir: the node's cordons, which `kubectl exec ... accel-plugins cordon` edits.
    "/var/lib/accel-plugins",
}


def _daemonsets(name: str) -> list[Obj]:
    return list(of_kind(render(ci_values(name)), "DaemonSet").values())


def _is_mps(ds: Obj) -> bool:
    return bool(ds["metadata"]["name"].endswith("-nvidia-mps"))


def _mig_possible(name: str, ds: Obj) -> bool:
    """The NVIDIA daemonset of a values file that sets a MIG strategy or an existing ConfigMap.

    With per-node configs, each DaemonSet ``<prefix>-nvidia-<config>`` reads its own config.
    """
    nvidia = ci_values(name).get("nvidia", {})
    config = nvidia.get("config") or {}
    named = (nvidia.get("configs") or {}).get("map") or {}
    ds_name: str = ds["metadata"]["name"]
    if named and "-nvidia-" in ds_name:
        config = named[ds_name.split("-nvidia-", 1)[1]]
        config = yaml.safe_load(config) if isinstance(config, str) else config
        flags = config.get("flags") or {}
        return (nvidia.get("migStrategy") or flags.get("migStrategy") or "none") != "none"
    flags = config.get("flags") or {}
    strategy = nvidia.get("migStrategy") or flags.get("migStrategy", "none")
    mig = strategy != "none" or bool(
        nvidia.get("existingConfigMap") and not nvidia.get("migStrategy")
    )
    return ds["metadata"]["name"].endswith("-nvidia") and mig


@pytest.mark.parametrize("name", CI_NAMES)
def test_containers_use_the_documented_security_context(name: str) -> None:
    for ds in _daemonsets(name):
        expected = (
            MIG_CONTAINER_CONTEXT if _mig_possible(name, ds) else DOCUMENTED_CONTAINER_CONTEXT
        )
        if _is_mps(ds):
            expected = MPS_CONTAINER_CONTEXT
        assert container(ds)["securityContext"] == expected


@pytest.mark.parametrize(
    ("nvidia", "mig"),
    [
        pytest.param({}, False, id="defaults"),
        pytest.param({"migStrategy": "none"}, False, id="none"),
        pytest.param({"migStrategy": "single"}, True, id="single"),
        pytest.param({"migStrategy": "mixed"}, True, id="mixed"),
        pytest.param({"config": {"flags": {"migStrategy": "mixed"}}}, True, id="config-mixed"),
        pytest.param({"config": {"flags": {"migStrategy": "none"}}}, False, id="config-none"),
        pytest.param(
            {"config": {"flags": {"migStrategy": "single"}}, "migStrategy": "none"},
            False,
            id="value-over-config",
        ),
        pytest.param({"existingConfigMap": "mine"}, True, id="existing-config-map"),
        pytest.param(
            {"existingConfigMap": "mine", "migStrategy": "none"}, False, id="existing-and-none"
        ),
    ],
)
def test_a_mig_strategy_gets_what_nvml_needs_to_see_mig_devices(nvidia: Obj, mig: bool) -> None:
    """As NVIDIA's chart (templates/_helpers.tpl requiresCapSysAdmin, addMigMonitorDevices)."""
    values = {"nvidia": {"enabled": True, **nvidia}}
    plugin = container(of_kind(render(values), "DaemonSet")["rel-accel-plugins-nvidia"])
    env = {e["name"]: e.get("value") for e in plugin["env"]}
    if mig:
        assert plugin["securityContext"] == MIG_CONTAINER_CONTEXT
        assert env["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
    else:
        assert plugin["securityContext"] == DOCUMENTED_CONTAINER_CONTEXT
        assert "NVIDIA_MIG_MONITOR_DEVICES" not in env


@pytest.mark.parametrize("name", CI_NAMES)
def test_pods_share_nothing_with_the_host_but_mounts(name: str) -> None:
    for ds in _daemonsets(name):
        spec = ds["spec"]["template"]["spec"]
        for field in ("hostNetwork", "hostPID", "hostIPC"):
            # The MPS daemon's hostPID is documented (nvidia.mps.hostPID, NVIDIA's default).
            if not (_is_mps(ds) and field == "hostPID"):
                assert not spec.get(field, False), field
        assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
        # A DRA driver talks to the API server (its own ServiceAccount, dra-rbac.yaml); in
        # both modes the plugins post health Events unless healthEvents is off (health-rbac.yaml).
        # The MPS daemon never does.
        events = ci_values(name).get("healthEvents", {}).get("enabled", True) and not _is_mps(ds)
        talks = "--kubelet-api=dra" in container(ds)["args"] or events
        assert spec["automountServiceAccountToken"] is talks
        assert ("serviceAccountName" in spec) is talks


@pytest.mark.parametrize("name", CI_NAMES)
def test_host_mounts_are_read_only_except_sockets_and_cdi(name: str) -> None:
    for ds in _daemonsets(name):
        args = container(ds)["args"]
        # With the per-node switch each mode reads the other's directory, never writes it.
        switch = any(a.startswith("--kubelet-api-switch-label=") for a in args)
        other = (
            "/var/lib/kubelet/device-plugins"
            if "--kubelet-api=dra" in args
            else ("/var/lib/kubelet/plugins")
        )
        for _, read_only, volume in mounts(ds).values():
            if "hostPath" in volume:
                path = volume["hostPath"]["path"]
                writable = MPS_WRITABLE_HOST_PATHS if _is_mps(ds) else WRITABLE_HOST_PATHS
                reads_only = path not in writable or (switch and path == other)
                assert read_only == reads_only, path


@pytest.mark.parametrize("backend", ["nvidia", "generic"])
def test_privileged_is_an_opt_in_per_backend(backend: str) -> None:
    values = ci_values("metrics")
    values.setdefault(backend, {})["privileged"] = True
    objects = of_kind(render(values), "DaemonSet")
    for ds_name, ds in objects.items():
        context = container(ds)["securityContext"]
        if ds_name.endswith(backend):
            # The API rejects allowPrivilegeEscalation: false next to privileged: true.
            assert context["privileged"] is True
            assert "allowPrivilegeEscalation" not in context
            assert "capabilities" not in context
        else:
            assert context == DOCUMENTED_CONTAINER_CONTEXT
