"""A plugin process for tests: `python -m tests.e2e.sample_plugin DIR SPEC [METRICS_ADDR]`.

SPEC is a JSON file {"resource": count}; it is re-read on SIGHUP, so tests can
see a reload reach the kubelet. Runs the real CLI serve() loop.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from accel_plugins.cli.main import serve
from accel_plugins.deviceplugin.manager import ManagerSettings
from accel_plugins.errors import ConfigError
from accel_plugins.metrics import parse_address
from accel_plugins.plugin.device import Device, tree
from accel_plugins.util.logs import setup_logging
from tests.fixtures.framework import ScriptedBackend


def main() -> int:
    plugin_dir, spec = Path(sys.argv[1]), Path(sys.argv[2])
    metrics = parse_address(sys.argv[3]) if len(sys.argv) > 3 else None

    def factory() -> ScriptedBackend:
        try:
            counts = json.loads(spec.read_text())
        except ValueError as exc:
            raise ConfigError(str(spec), "", f"not JSON: {exc}") from exc
        return ScriptedBackend(
            tree({name: [Device(f"d{i}") for i in range(n)] for name, n in counts.items()})
        )

    setup_logging("json", "debug")
    return asyncio.run(serve(factory, ManagerSettings(plugin_dir=plugin_dir), metrics))


if __name__ == "__main__":
    sys.exit(main())
