#!/usr/bin/env python3
"""NVIDIA's Go device plugin and ours on the same GPUs: what each hands a container.

    hack/peer_nvidia.py BINARY [--strategy S ...] [--out DIR]

BINARY is NVIDIA's ``nvidia-device-plugin`` (k8s-device-plugin, built from its
source). For each device-list strategy, each plugin in turn registers with the
kubelet emulator, one GPU is allocated, and the Allocate answer and (for the
CDI strategies) the CDI spec on disk are kept; then the two are compared: the
env, the annotations, the CDI device names, and per spec the device nodes, the
mounts, the hooks and the env. Differences are printed and written to
``DIR/compare.json``. Needs root and a real driver: NVIDIA's plugin keeps its
sockets in /var/lib/kubelet/device-plugins and its CDI spec in /var/run/cdi.
Not part of CI (no GPU there); hack/gpu-check runs it where it finds BINARY.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from accel_plugins.kubelet_emulator import Kubelet

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
PEER_CDI_DIR = Path("/var/run/cdi")
GPU = "nvidia.com/gpu"


def peer_argv(binary: Path, strategy: str) -> list[str]:
    return [
        str(binary),
        "--kubelet-socket",
        str(PLUGIN_DIR / "kubelet.sock"),
        "--device-list-strategy",
        strategy,
        # The plugin runs on the host here, not in a container with the host at /driver-root.
        "--driver-root-ctr-path",
        "/",
    ]


def our_argv(strategy: str, spec_dir: Path, simulate: str | None) -> list[str]:
    return [
        str(Path(sys.executable).parent / "accel-plugins"),
        "nvidia",
        "--plugin-dir",
        str(PLUGIN_DIR),
        "--metrics-address",
        "",
        "--device-list-strategy",
        strategy,
        "--cdi-spec-dir",
        str(spec_dir),
        "--log-level",
        "warning",
        *(["--simulate", simulate] if simulate else []),
    ]


async def one_allocation(
    kubelet: Kubelet, argv: list[str], pod: str, spec_dir: Path, keep: Path, count: int
) -> dict[str, Any]:
    """Start ``argv``, allocate one GPU, keep the CDI specs, stop it; the answer as JSON."""
    log = (keep.parent / f"{keep.name}.log").open("wb")
    child = await asyncio.create_subprocess_exec(*argv, cwd=ROOT, stdout=log, stderr=log)
    try:
        await kubelet.wait_for_resource(GPU, allocatable=count, timeout=60)
        record = await kubelet.allocate(pod, "main", GPU, 1)
        keep.mkdir(parents=True, exist_ok=True)
        for spec in sorted(spec_dir.glob("*.json")) + sorted(spec_dir.glob("*.yaml")):
            shutil.copy(spec, keep / spec.name)
        r = record.response
        return {
            "devices": sorted(record.device_ids),
            "envs": dict(r.envs),
            "annotations": dict(r.annotations),
            "cdi_devices": list(r.cdi_devices),
            "mounts": sorted(f"{m.host_path} -> {m.container_path}" for m in r.mounts),
            "device_specs": sorted(f"{d.host_path} -> {d.container_path}" for d in r.devices),
        }
    finally:
        child.terminate()
        await child.wait()
        log.close()
        await kubelet.wait_for(lambda k: not k.resources[GPU].connected, timeout=30)
        kubelet.release(pod)


def spec_of(directory: Path) -> dict[str, Any]:
    """The GPU spec in ``directory`` (the one whose kind ends in ``/gpu``), parsed."""
    for path in sorted(directory.glob("*.json")):
        spec = json.loads(path.read_text())
        if str(spec.get("kind", "")).endswith("/gpu"):
            return dict(spec)
    return {}


def differences(peer: Any, ours: Any, path: str = "") -> list[str]:
    """Where two JSON values differ, one line each: lists as sets, then their order."""
    if isinstance(peer, dict) and isinstance(ours, dict):
        lines = []
        for key in sorted(set(peer) | set(ours)):
            lines += differences(peer.get(key), ours.get(key), f"{path}.{key}")
        return lines
    if isinstance(peer, list) and isinstance(ours, list):
        a = [json.dumps(x, sort_keys=True) for x in peer]
        b = [json.dumps(x, sort_keys=True) for x in ours]
        if set(a) == set(b):
            return [] if a == b else [f"{path}: same entries, another order"]
        if len(a) == len(b) and all(isinstance(x, dict) for x in [*peer, *ours]):
            # The same list with entries changed: compare entry by entry.
            return [
                line
                for i, (x, y) in enumerate(zip(peer, ours, strict=True))
                for line in differences(x, y, f"{path}[{i}]")
            ]
        return [f"{path}: only NVIDIA's: {x}" for x in sorted(set(a) - set(b))] + [
            f"{path}: only ours: {x}" for x in sorted(set(b) - set(a))
        ]
    return [] if peer == ours else [f"{path}: NVIDIA's {peer!r}, ours {ours!r}"]


async def main_async(args: argparse.Namespace) -> int:
    if args.simulate:  # a dry run of this script: BINARY must stand in for NVIDIA's too
        count = args.count
    else:
        from bench_cli import real_gpus  # hack/ is this script's directory

        count = real_gpus()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    PLUGIN_DIR.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {}
    async with Kubelet(PLUGIN_DIR) as kubelet:
        for strategy in args.strategy:
            shutil.rmtree(PEER_CDI_DIR, ignore_errors=True)
            PEER_CDI_DIR.mkdir(parents=True)
            ours_dir = out / f"ours-{strategy}-specs"
            peer = await one_allocation(
                kubelet,
                peer_argv(args.binary, strategy),
                "peer",
                PEER_CDI_DIR,
                out / f"nvidia-{strategy}",
                count,
            )
            ours = await one_allocation(
                kubelet,
                our_argv(strategy, ours_dir, args.simulate),
                "ours",
                ours_dir,
                out / f"ours-{strategy}",
                count,
            )
            entry: dict[str, Any] = {"nvidia": peer, "ours": ours}
            if strategy.startswith("cdi"):
                entry["nvidia_spec"] = spec_of(out / f"nvidia-{strategy}")
                entry["ours_spec"] = spec_of(out / f"ours-{strategy}")
            report[strategy] = entry
            print(f"== {strategy}")
            print("NVIDIA's:", json.dumps(peer, sort_keys=True))
            print("ours:    ", json.dumps(ours, sort_keys=True))
            # Each got its own GPU: compare with the device ID taken out of the values.
            same_gpu = {peer["devices"][0]: "<gpu>", ours["devices"][0]: "<gpu>"}
            entry["differences"] = differences(normalise(peer, same_gpu), normalise(ours, same_gpu))
            if "nvidia_spec" in entry:
                entry["differences"] += differences(
                    entry["nvidia_spec"], entry["ours_spec"], ".spec"
                )
            print("\n".join(entry["differences"]) or "no differences")
    (out / "compare.json").write_text(json.dumps(report, indent=1, sort_keys=True))
    return 0


# The CDI annotation key ends in an ID fresh for each Allocate (NVIDIA's: a random UUID).
ANNOTATION_ID = re.compile(r"(nvidia-device-plugin_)[0-9a-f-]{36}")


def normalise(value: Any, names: dict[str, str]) -> Any:
    """``value`` with each device ID replaced, so that two different GPUs compare equal."""
    text = ANNOTATION_ID.sub(r"\1<id>", json.dumps(value))
    for name, stand_in in names.items():
        text = text.replace(name, stand_in)
    return json.loads(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binary", type=Path)
    parser.add_argument(
        "--strategy", action="append", help="device-list strategies (default: all three)"
    )
    parser.add_argument("--out", type=Path, default=Path("/tmp/peer-nvidia"))
    parser.add_argument("--simulate", help="dry run: ours on this simulated profile")
    parser.add_argument("--count", type=int, default=4, help="dry run: the profile's GPUs")
    args = parser.parse_args()
    args.strategy = args.strategy or ["envvar", "volume-mounts", "cdi-annotations"]
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
