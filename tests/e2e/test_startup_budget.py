"""What a plugin imports before the kubelet first registers it, held to a declared budget.

Issue 34: every capability used to add modules to the start path whether or not a node
used it, and the footprint slipped past its budget unnoticed. Each case starts a backend
as the process an operator runs (``accel_plugins.launch``, a typical configuration) under
``python -X importtime``, which writes each import to stderr as it happens, in order with
the log lines. Everything imported before the line saying the kubelet registered the
plugin is the start path; less the floor's modules (python, asyncio and grpc, read the
same way in the same run), each must be in ``startup_budget.txt``, or the test fails
naming it. No timing is involved: only which modules, in which order.

A module that a later RPC, a scrape or a capability left off needs is loaded where it is
used, and so never counts here.
"""

from __future__ import annotations

import asyncio
import functools
import os
import stat
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from accel_plugins.conformance.envtest import ApiServer
from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.testing import short_tempdir
from tests.support.cli import free_port
from tests.support.nvidia_mock import MockNvmlUnavailable, mock_driver_root, mock_nvml_env
from tests.support.repo import ROOT

BUDGET = Path(__file__).with_name("startup_budget.txt")
LAUNCH = "import sys; from accel_plugins.launch import main; sys.exit(main())"
FLOOR = "import asyncio, grpc, grpc.aio"
START_TIMEOUT = 30.0
REGISTERED = {  # the log line each mode writes once the kubelet has registered it
    "device-plugin": "registered with the kubelet",
    "dra": "registered by the kubelet",
}
GENERIC_CONFIG = "devices: [{name: accel, groups: [{paths: [{path: /dev/accel*}]}]}]\n"


@dataclass(frozen=True)
class Entry:
    pattern: str  # a module, or ``package.*`` for a package and everything under it
    reason: str
    section: str

    def allows(self, module: str) -> bool:
        if self.pattern.endswith(".*"):
            package = self.pattern[:-2]
            return module == package or module.startswith(package + ".")
        return module == self.pattern


def read_budget(path: Path = BUDGET) -> dict[str, list[Entry]]:
    """Sections (``[name]``) of entries, one a line: ``module  # reason``."""
    sections: dict[str, list[Entry]] = {}
    current: list[Entry] | None = None
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line, _, reason = raw.partition("#")
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
        elif line:
            assert current is not None, f"{path.name}:{number}: an entry before any [section]"
            assert " " not in line, f"{path.name}:{number}: one module a line: {line!r}"
            current.append(Entry(line, reason.strip(), next(reversed(sections))))
    return sections


def modules_before(stderr: str, marker: str | None = None) -> list[str]:
    """The modules ``-X importtime`` reported before the first line containing ``marker``."""
    found: list[str] = []
    for line in stderr.splitlines():
        if marker is not None and marker in line:
            return found
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                found.append(name)
    if marker is not None:
        raise AssertionError(f"no line with {marker!r} in the plugin's output:\n{stderr[-3000:]}")
    return found


@functools.cache
def floor_modules() -> frozenset[str]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", FLOOR],
        capture_output=True,
        text=True,
        check=True,
    )
    return frozenset(modules_before(done.stderr))


def over_budget(loaded: Sequence[str], entries: Sequence[Entry]) -> list[str]:
    floor = floor_modules()
    return [m for m in loaded if m not in floor and not any(e.allows(m) for e in entries)]


def third_party(pattern: str) -> bool:
    top = pattern.partition(".")[0]
    return top != "accel_plugins" and top not in sys.stdlib_module_names and not top.startswith("_")


def budget_for(*sections: str) -> list[Entry]:
    budget = read_budget()
    return [entry for section in ("common", *sections) for entry in budget[section]]


async def start_path(
    argv: Sequence[str],
    mode: str,
    logs: Path,
    env: Mapping[str, str] | None = None,
    *,
    preload: str = "",
) -> list[str]:
    """Run the plugin until it logs its registration (the kubelet emulator of the test
    registers it), then stop it; the modules it loaded before that line. ``preload``
    is imported first, as if the start path had gained it (the guard's own test)."""
    log = logs / "plugin.log"
    code = f"import {preload}; {LAUNCH}" if preload else LAUNCH
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-X", "importtime", "-c", code, *argv, "--log-level", "info",
            cwd=ROOT, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
            env={**os.environ, **(env or {})},
        )  # fmt: skip
    try:
        await wait_for_line(log, REGISTERED[mode], proc)
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), START_TIMEOUT) == 0, log.read_text()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return modules_before(log.read_text(errors="replace"), REGISTERED[mode])


async def wait_for_line(log: Path, text: str, proc: asyncio.subprocess.Process) -> None:
    """Until ``log`` has ``text`` (the process writes it; there is no event to await)."""
    deadline = asyncio.get_running_loop().time() + START_TIMEOUT
    while text not in log.read_text(errors="replace"):
        if proc.returncode is not None or asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"no {text!r} from the plugin:\n{log.read_text()[-3000:]}")
        await asyncio.sleep(0.05)


def generic_argv(root: Path, metrics: bool = True) -> list[str]:
    """Four accelerators under a /dev of the test's own (real nodes: mknod)."""
    dev = root / "dev"
    dev.mkdir()
    try:
        for minor in range(4):
            os.mknod(dev / f"accel{minor}", 0o600 | stat.S_IFCHR, os.makedev(261, minor))
    except PermissionError:
        pytest.skip("creating device nodes needs CAP_MKNOD")
    config = root / "generic.yaml"
    config.write_text(GENERIC_CONFIG)
    return [
        "generic", "--config", str(config), "--dev-root", str(dev),
        "--sys-root", str(root / "sys"),
        "--metrics-address", f"127.0.0.1:{free_port()}" if metrics else "",
    ]  # fmt: skip


def nvidia_argv(root: Path, simulate: bool) -> list[str]:
    argv = ["nvidia", "--metrics-address", f"127.0.0.1:{free_port()}"]
    if simulate:
        return [*argv, "--simulate", "pcie-8gpu-nvlink-pairs"]
    dev = root / "nvidia-dev"  # the mock's GPUs have no device nodes here: the plugin's
    dev.mkdir()  # own checks of /dev/nvidia* read this empty directory
    return [*argv, "--nvidia-dev-root", str(dev), "--fail-on-init-error", "true"]


DEVICE_PLUGIN_CASES = {  # case: (backend, the budget's sections)
    "generic": ("generic", ("device-plugin", "generic")),
    "nvidia-simulated": ("nvidia", ("device-plugin", "nvidia", "nvidia-simulated")),
    "nvidia-mock-nvml": ("nvidia", ("device-plugin", "nvidia", "nvidia-nvml")),
}


@pytest.mark.parametrize("case", sorted(DEVICE_PLUGIN_CASES))
async def test_a_device_plugin_loads_only_its_budget_before_registering(
    case: str, tmp_path: Path
) -> None:
    backend, sections = DEVICE_PLUGIN_CASES[case]
    env: dict[str, str] = {}
    if case == "nvidia-mock-nvml":
        try:
            env = mock_nvml_env(tmp_path / "nvml")
        except MockNvmlUnavailable as exc:
            pytest.skip(str(exc))
    with short_tempdir("budget-") as root:
        argv = (
            generic_argv(root)
            if backend == "generic"
            else nvidia_argv(root, case.endswith("simulated"))
        )
        plugins = root / "plugins"
        plugins.mkdir()
        argv += ["--plugin-dir", str(plugins), "--pod-resources-socket", str(root / "pr.sock")]
        async with Kubelet(plugins):
            loaded = await start_path(argv, "device-plugin", tmp_path, env)
    assert over_budget(loaded, budget_for(*sections)) == []


DRA_CASES = {  # NVIDIA on its mock NVML: DRA's self-contained CDI needs a driver to describe
    "generic": ("generic", ("dra", "generic")),
    "nvidia-mock-nvml": ("nvidia", ("dra", "nvidia", "nvidia-nvml", "nvidia-dra")),
}


@pytest.mark.parametrize("case", sorted(DRA_CASES))
async def test_a_dra_driver_loads_only_its_budget_before_registering(
    case: str,
    tmp_path: Path,
    kube_apiserver: ApiServer,
    watching_kubelet: Kubelet,
    registry_dir: Path,
) -> None:
    backend, sections = DRA_CASES[case]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(kube_apiserver.kubeconfig()))
    env: dict[str, str] = {}
    with short_tempdir("budget-") as root:
        if backend == "generic":
            argv = generic_argv(root)
        else:
            try:
                env = mock_driver_root(root / "driver", "h100")
            except MockNvmlUnavailable as exc:
                pytest.skip(str(exc))
            metrics = f"127.0.0.1:{free_port()}"
            argv = [
                "nvidia",
                "--metrics-address",
                metrics,
                "--nvidia-driver-root",
                str(root / "driver"),
            ]
        argv += [
            "--kubelet-api", "dra", "--node-name", "node-0", "--kubeconfig", str(kubeconfig),
            "--kubelet-plugins-dir", str(root / "plugins"),
            "--plugins-registry-dir", str(registry_dir),
            "--dra-cdi-spec-dir", str(root / "cdi"), "--state-dir", str(root / "state"),
        ]  # fmt: skip
        loaded = await start_path(argv, "dra", tmp_path, env)
    assert over_budget(loaded, budget_for(*sections)) == []


async def test_an_import_added_to_the_start_path_is_named(tmp_path: Path) -> None:
    """The guard fails on what it guards against: a start path that gains a module."""
    with short_tempdir("budget-") as root:
        argv = generic_argv(root)
        plugins = root / "plugins"
        plugins.mkdir()
        argv += ["--plugin-dir", str(plugins), "--pod-resources-socket", str(root / "pr.sock")]
        async with Kubelet(plugins):
            loaded = await start_path(argv, "device-plugin", tmp_path, preload="difflib")
    assert over_budget(loaded, budget_for("device-plugin", "generic")) == ["difflib"]


def test_the_budget_says_why_each_third_party_package_is_on_the_start_path() -> None:
    budget = read_budget()
    assert sorted(budget) == sorted(
        {
            *("common", "device-plugin", "dra", "generic"),
            *("nvidia", "nvidia-simulated", "nvidia-nvml", "nvidia-dra"),
        }
    )
    entries = [e for es in budget.values() for e in es if third_party(e.pattern)]
    packages = {e.pattern.partition(".")[0] for e in entries}
    explained = {e.pattern.partition(".")[0] for e in entries if e.reason}
    assert sorted(packages - explained) == []  # each says why it is on the start path
    wildcards = [e.pattern for es in budget.values() for e in es if e.pattern.endswith(".*")]
    assert [w for w in wildcards if not third_party(w)] == []  # our modules are listed one by one


@pytest.mark.parametrize(
    ("loaded", "allowed", "over"),
    [
        pytest.param(["yaml", "yaml.reader"], ["yaml.*"], [], id="a package's wildcard"),
        pytest.param(["yamlx"], ["yaml.*"], ["yamlx"], id="a name that only starts alike"),
        pytest.param(["accel_plugins.x"], ["accel_plugins.x"], [], id="an exact module"),
        pytest.param(["difflib", "grpc"], [], ["difflib"], id="the floor's modules are free"),
    ],
)
def test_over_budget_names_what_no_entry_allows(
    loaded: list[str], allowed: list[str], over: list[str]
) -> None:
    entries = [Entry(pattern, "", "test") for pattern in allowed]
    assert over_budget(loaded, entries) == over


def test_the_start_path_ends_at_the_registration_line() -> None:
    stderr = "\n".join([
        "import time: self [us] | cumulative | imported package",
        "import time:       100 |        100 | yaml",
        "2026-11-28 INFO resource r: registered with the kubelet at /k.sock",
        "import time:       100 |        100 | difflib",
    ])  # fmt: skip
    assert modules_before(stderr, REGISTERED["device-plugin"]) == ["yaml"]
