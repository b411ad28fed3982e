"""Backends as entry points: discovery, their subcommands, the pip hint, and cheap --help.

The third-party backend here is a real installed distribution as far as
importlib.metadata can tell (a ``*.dist-info`` with ``entry_points.txt`` on
PYTHONPATH), run by ``python -m accel_plugins.cli`` in a subprocess.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from accel_plugins.backends.generic import command as generic_command
from accel_plugins.backends.nvidia import command as nvidia_command
from accel_plugins.cli import main as cli
from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.plugin.command import BackendCommand, BackendContext, BackendFactory, Option

WIDGET_MODULE = '''
"""acme-widget: a third-party backend, shaped as a package outside accel_plugins ships it."""

from __future__ import annotations

import asyncio
import json

from accel_plugins.errors import ConfigError
from accel_plugins.util.flags import parse_bool
from accel_plugins.plugin import BackendCommand, BackendContext, Device, Option, Publish, tree


class Widgets:
    def __init__(self, count: int) -> None:
        self.count = count

    async def run(self, publish: Publish) -> None:
        publish(tree({"example.com/widget": [Device(f"w{i}") for i in range(self.count)]}))
        await asyncio.Event().wait()


def build(ctx: BackendContext):
    if ctx.options["show"]:
        print(json.dumps(dict(ctx.options)), flush=True)
        raise ConfigError("--show", "", "options shown, not serving")
    count = ctx.options["count"]
    if count < 0:
        raise ConfigError("--count", "", f"must be >= 0, got {count}")
    return lambda: Widgets(count)


OPTIONS = (
    Option("--count", "how many widgets to offer", default=2, type=int, env=("WIDGET_COUNT",)),
    Option("--color", "paint", default="red", choices=("red", "blue")),
    Option("--show", "print the options and stop", default=False, type=parse_bool),
)
COMMAND = BackendCommand(summary="count widgets for acme", build=build, options=OPTIONS)
NEEDY = BackendCommand(
    summary="needs acme's hardware library",
    build=build,
    options=OPTIONS,
    requires=("acme_missing_lib",),
    install="pip install 'acme-widget[hw]'",
)
'''

ENTRY_POINTS = """
[accel_plugins.backends]
widget = acme_widget:COMMAND
needy = acme_widget:NEEDY
broken = acme_broken:COMMAND
notacommand = acme_widget:build
demo = acme_widget:COMMAND
"""

BROKEN_REASON = "cannot load acme_broken:COMMAND: RuntimeError: libacme 0.9 is too old"
DEMO_SKIPPED = (
    "accel-plugins: warning: backend 'demo' from acme_widget:COMMAND (acme-widget 0.1) is "
    "skipped: demo is a built-in command"
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the installed distribution acme-widget 0.1."""
    root = tmp_path_factory.mktemp("site")
    (root / "acme_widget.py").write_text(WIDGET_MODULE)
    (root / "acme_broken.py").write_text('raise RuntimeError("libacme 0.9 is too old")\n')
    info = root / "acme_widget-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-widget\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(ENTRY_POINTS))
    return root


def clean_environ(**extra: str) -> dict[str, str]:
    """This process's environment without flag twins, plus ``extra``."""
    twins = ("ACCEL_PLUGINS_", "WIDGET_", "MIG_", "DEVICE_", "CONFIG_FILE", "NVIDIA_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(twins)}
    return env | extra


def run_with(site: Path, argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, "-m", "accel_plugins.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_environ(PYTHONPATH=path, **env),
        cwd=site,
    )


@dataclass(frozen=True)
class Case:
    argv: list[str]
    code: int
    stdout: tuple[str, ...] = ()
    stderr: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


CASES = [
    pytest.param(
        Case(
            ["--help"],
            0,
            stdout=(
                "widget count widgets for acme",
                "nvidia expose NVIDIA GPUs",
                "generic expose /dev nodes",
                f"broken unavailable: {BROKEN_REASON}",
                "notacommand unavailable: acme_widget:build is a function, not a BackendCommand",
                "demo walk through a plugin",
            ),
            stderr=(DEMO_SKIPPED,),
        ),
        id="help-lists-every-installed-backend",
    ),
    pytest.param(
        Case(
            ["widget", "--help"],
            0,
            stdout=(
                "count widgets for acme",
                "$ACCEL_PLUGINS_COUNT / $WIDGET_COUNT; default 2",
                "--color {red,blue}",
                "$ACCEL_PLUGINS_PLUGIN_DIR",
                "--metrics-address",
            ),
        ),
        id="backend-help-shows-its-options-with-env-twins",
    ),
    pytest.param(
        Case(
            ["widget", "--show"],
            2,
            stdout=('"count": 5', '"color": "blue"'),
            stderr=("accel-plugins widget: configuration error: --show: options shown",),
            env=(("ACCEL_PLUGINS_COUNT", "5"), ("ACCEL_PLUGINS_COLOR", "blue")),
        ),
        id="env-twin-honoured",
    ),
    pytest.param(
        Case(["widget", "--show"], 2, stdout=('"count": 7',), env=(("WIDGET_COUNT", "7"),)),
        id="vendor-env-name-honoured",
    ),
    pytest.param(
        Case(
            ["widget", "--show", "--count", "3"],
            2,
            stdout=('"count": 3',),
            env=(("ACCEL_PLUGINS_COUNT", "5"),),
        ),
        id="flag-beats-env",
    ),
    pytest.param(
        Case(
            ["widget"],
            2,
            stderr=("environment variable ACCEL_PLUGINS_COUNT='many'",),
            env=(("ACCEL_PLUGINS_COUNT", "many"),),
        ),
        id="bad-env-value-named",
    ),
    pytest.param(
        Case(
            ["widget", "--count", "-1", "--metrics-address", ""],
            2,
            stderr=("accel-plugins widget: configuration error: --count: must be >= 0, got -1",),
        ),
        id="config-error-names-the-backend",
    ),
    pytest.param(
        Case(
            ["needy"],
            2,
            stderr=(
                "accel-plugins: backend needy needs acme_missing_lib, which is not installed: "
                "pip install 'acme-widget[hw]'",
            ),
        ),
        id="missing-requirement-names-the-pip-command",
    ),
    pytest.param(
        Case(
            ["broken", "--count", "1"],
            2,
            stderr=(f"accel-plugins: backend broken is unavailable: {BROKEN_REASON}",),
        ),
        id="broken-entry-point-exits-2-with-the-reason",
    ),
    pytest.param(
        Case(["notacommand"], 2, stderr=("is a function, not a BackendCommand",)),
        id="entry-point-that-is-no-command",
    ),
    pytest.param(
        Case(["demo", "--help"], 0, stdout=("--once",), stderr=(DEMO_SKIPPED,)),
        id="name-of-a-builtin-is-skipped-with-a-warning",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_a_third_party_backend(site: Path, case: Case) -> None:
    result = run_with(site, case.argv, **dict(case.env))
    assert result.returncode == case.code, result.stderr
    # Compared with runs of whitespace as one space: --help wraps and aligns columns.
    stdout, stderr = (" ".join(text.split()) for text in (result.stdout, result.stderr))
    for text in case.stdout:
        assert text in stdout
    for text in case.stderr:
        assert text in stderr
    assert "Traceback" not in result.stderr


async def test_a_third_party_backend_serves(site: Path, kubelet: Kubelet) -> None:
    """The factory build returns is what runs: its devices reach the kubelet; SIGTERM exits 0."""
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    assert kubelet.pod_resources_socket is not None
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "accel_plugins.cli.main",
        "widget",
        "--plugin-dir",
        str(kubelet.plugin_dir),
        "--pod-resources-socket",
        str(kubelet.pod_resources_socket),
        "--metrics-address",
        "",
        env=clean_environ(PYTHONPATH=path, ACCEL_PLUGINS_COUNT="3"),
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await kubelet.wait_for_resource("example.com/widget", allocatable=3, timeout=20)
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 10) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


HEAVY = ("grpc", "google.protobuf", "prometheus_client", "pynvml", "pyudev", "yaml")


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["--help"], id="help"),
        pytest.param(["--version"], id="version"),
        pytest.param(["nvidia", "--help"], id="nvidia-help"),
        pytest.param(["generic", "--help"], id="generic-help"),
    ],
)
def test_help_and_version_import_nothing_heavy(argv: list[str]) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        from accel_plugins.cli.main import main
        try:
            main({argv!r})
        except SystemExit as exc:
            assert exc.code == 0, exc.code
        print("HEAVY", [m for m in {HEAVY!r} if m in sys.modules], file=sys.stderr)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_environ(),
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines()[-1] == "HEAVY []"


@pytest.mark.parametrize(
    ("backend", "module", "message"),
    [
        pytest.param(
            "nvidia",
            "pynvml",
            "accel-plugins: backend nvidia needs pynvml, which is not installed: "
            "pip install 'accel-plugins[nvidia]'",
            id="nvidia-without-pynvml",
        ),
        pytest.param(
            "generic",
            "pyudev",
            "accel-plugins: backend generic needs pyudev, which is not installed: "
            "pip install 'accel-plugins[generic]'",
            id="generic-without-pyudev",
        ),
    ],
)
def test_a_vendor_without_its_extra(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    backend: str,
    module: str,
    message: str,
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # find_spec: not installed
    assert cli.main([backend, "--config", "/nonexistent.yaml"]) == 2
    assert capsys.readouterr().err.strip() == message


def never_built(ctx: BackendContext) -> BackendFactory:
    raise AssertionError("not built in these tests")


@pytest.mark.parametrize(
    ("command", "hint"),
    [
        pytest.param(
            BackendCommand("s", never_built, requires=("a",), extra="x"),
            "pip install 'accel-plugins[x]'",
            id="extra",
        ),
        pytest.param(
            BackendCommand("s", never_built, requires=("a",), install="pip install acme"),
            "pip install acme",
            id="install-wins",
        ),
        pytest.param(
            BackendCommand("s", never_built, requires=("a", "b")),
            "pip install a b",
            id="the-modules-themselves",
        ),
    ],
)
def test_install_hint(command: BackendCommand, hint: str) -> None:
    assert command.install_hint() == hint


@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param(lambda: Option("-c", "x"), "spelled --lower-case-name", id="short-flag"),
        pytest.param(lambda: Option("--Dev_Root", "x"), "--lower-case-name", id="odd-flag"),
        pytest.param(
            lambda: BackendCommand("s", never_built, (Option("--a", ""), Option("--a", ""))),
            "options given twice: a",
            id="twice",
        ),
    ],
)
def test_refused_definitions(make: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_option_env_names() -> None:
    option = Option("--mig-strategy", "x", env=("MIG_STRATEGY",))
    assert (option.dest, option.env_names) == (
        "mig_strategy",
        ("ACCEL_PLUGINS_MIG_STRATEGY", "MIG_STRATEGY"),
    )


def test_nvidia_keeps_nvidia_env_names() -> None:
    names = {o.flag: o.env for o in nvidia_command.COMMAND.options}
    assert names["--config"] == ("CONFIG_FILE",)
    assert names["--mig-strategy"] == ("MIG_STRATEGY",)
    assert names["--fail-on-init-error"] == ("FAIL_ON_INIT_ERROR",)


def test_mirrored_constants_match_their_sources() -> None:
    """The cheap modules repeat a few constants of heavy ones; they must not drift."""
    from accel_plugins.backends.generic.backend import DEFAULT_RESCAN_INTERVAL
    from accel_plugins.backends.generic.health import DEFAULT_VANISHED_GRACE
    from accel_plugins.backends.generic.monitor import UdevSource
    from accel_plugins.backends.nvidia import container_contract
    from accel_plugins.backends.nvidia.config import config
    from accel_plugins.backends.nvidia.simulate import builtin_profiles
    from accel_plugins.deviceplugin.manager import DEFAULT_PLUGIN_DIR
    from accel_plugins.metrics import DEFAULT_METRICS_ADDRESS
    from accel_plugins.runtime.podresources import DEFAULT_POD_RESOURCES_SOCKET

    assert nvidia_command.MIG_STRATEGIES == config.MIG_STRATEGIES
    assert nvidia_command.REPLICA_POLICIES == config.REPLICA_POLICIES
    assert nvidia_command.SHARED_DEVICES_POLICIES == config.SHARED_DEVICES_POLICIES
    assert nvidia_command.DEVICE_DISCOVERY_STRATEGIES == config.DEVICE_DISCOVERY_STRATEGIES
    assert nvidia_command.DEFAULT_RECOVERY_SECONDS == config.DEFAULT_RECOVERY_SECONDS
    assert nvidia_command.DEVICE_ID_STRATEGIES == container_contract.DEVICE_ID_STRATEGIES
    assert list(nvidia_command.SIMULATED_PROFILES) == builtin_profiles.names()
    assert tuple(s.value for s in UdevSource) == generic_command.UDEV_SOURCES
    assert generic_command.DEFAULT_RESCAN_INTERVAL == DEFAULT_RESCAN_INTERVAL
    assert generic_command.DEFAULT_VANISHED_GRACE == DEFAULT_VANISHED_GRACE
    assert cli.DEFAULT_PLUGIN_DIR == DEFAULT_PLUGIN_DIR
    assert cli.DEFAULT_POD_RESOURCES_SOCKET == DEFAULT_POD_RESOURCES_SOCKET
    assert cli.DEFAULT_METRICS_ADDRESS == DEFAULT_METRICS_ADDRESS


def test_the_vendors_are_entry_points() -> None:
    backends = cli.installed_backends()
    assert backends["nvidia"].command is nvidia_command.COMMAND
    assert backends["generic"].command is generic_command.COMMAND


def test_a_run_that_fails_to_parse_reads_the_env_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad environment value is reported like a bad flag, naming the variable (exit 2)."""
    monkeypatch.setenv("MIG_STRATEGY", "double")
    with pytest.raises(SystemExit) as exited:
        cli.main(["nvidia", "--simulate", "pcie-4gpu"])
    assert exited.value.code == 2
    assert "environment variable MIG_STRATEGY='double'" in capsys.readouterr().err


def test_show_json_is_what_build_saw(site: Path) -> None:
    result = run_with(site, ["widget", "--show", "--color", "blue"])
    assert json.loads(result.stdout) == {"count": 2, "color": "blue", "show": True}
