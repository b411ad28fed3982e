"""``accel-plugins generic --kubelet-api dra`` as a process, seen by the emulated kubelet.

The API server is unreachable here (the API side's tests run a real one): the
kubelet side must register and answer anyway, a claim it cannot read fails in
that claim's ``error`` (not the RPC), and SIGTERM stops it cleanly.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.kubelet_emulator.dra import SERVICE_V1, DraClaim
from accel_plugins.testing import short_tempdir
from tests.e2e.test_kubelet_admit_cli import fake_node
from tests.support.cli import free_port, http_get

ROOT = Path(__file__).resolve().parents[2]
DRIVER = "generic.accel-plugins.io"
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: nowhere
  cluster: {server: "https://127.0.0.1:9", insecure-skip-tls-verify: true}
users:
- name: nobody
  user: {token: "not-a-token"}
contexts:
- name: nowhere
  context: {cluster: nowhere, user: nobody}
current-context: nowhere
"""


ONE_ACCEL = """
devices:
  - name: accel
    groups:
      - paths: [{path: "/dev/accel0"}]
"""


async def test_a_generic_plugin_in_dra_mode_registers_answers_and_stops(
    tmp_path: Path, watching_kubelet: Kubelet, registry_dir: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    port = free_port()
    with short_tempdir("dracli-") as root:
        argv = [
            *fake_node(tmp_path),
            "--kubelet-api",
            "dra",
            "--node-name",
            "node-1",
            "--kubeconfig",
            str(kubeconfig),
            "--kubelet-plugins-dir",
            str(root / "plugins"),
            "--plugins-registry-dir",
            str(registry_dir),
            "--dra-cdi-spec-dir",
            str(root / "cdi"),
            "--metrics-address",
            f"127.0.0.1:{port}",
        ]
        log = tmp_path / "plugin.log"
        with log.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "accel_plugins.cli.main",
                *argv,
                cwd=ROOT,
                stdout=out,
                stderr=out,
            )
        try:
            await watching_kubelet.wait_for(lambda k: DRIVER in k.dra.names, timeout=20)
            client = watching_kubelet.dra.client(DRIVER)
            assert client.service == SERVICE_V1
            assert client.endpoint == root / "plugins" / DRIVER / "dra.sock"
            claim = DraClaim(namespace="default", name="c", uid="uid-1")
            result = (await client.prepare([claim], timeout=30))["uid-1"]
            assert "preparing failed" in result.error  # the API read failed, for this claim only
            assert result.devices == ()
            assert await client.unprepare([claim]) == {"uid-1": ""}
            # A changed --config rebuilds the backend, as in device-plugin mode.
            health = client.watch_health()
            assert len(await anext(health)) == 4
            (tmp_path / "generic.yaml").write_text(ONE_ACCEL)
            while len(devices := await anext(health)) != 1:
                pass
            assert devices[0].health == "Healthy"
            await health.aclose()
            assert await http_get(port, "/healthz") == (200, "ok\n")
            status, metrics = await http_get(port, "/metrics")
            assert status == 200
            assert "accel_plugins_device_healthy{" in metrics
            assert "# TYPE accel_plugins_device_health_reason gauge" in metrics
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 20) == 0, log.read_text()
            assert not (root / "plugins" / DRIVER / "dra.sock").exists()
            await watching_kubelet.wait_for(lambda k: DRIVER not in k.dra.names)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
