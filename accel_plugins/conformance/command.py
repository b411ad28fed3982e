"""``accel-plugins dra-conformance``: from parsed flags to the report and the exit status.

Without ``--kubeconfig`` the kit starts etcd and kube-apiserver from
``$KUBEBUILDER_ASSETS`` (envtest's convention) and a Node object for the node;
no other driver writes to that server, so every slice of the driver for
another node is this driver's fault (``--sole-node`` is implied).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import shlex
import socket
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO

from accel_plugins.conformance.catalogue import check_list, unknown
from accel_plugins.conformance.cluster import Cluster
from accel_plugins.conformance.report import Outcome, exit_code, junit_xml, render_table
from accel_plugins.conformance.runner import Target, run_checks, selected, session_for
from accel_plugins.conformance.session import Timeouts
from accel_plugins.errors import ConfigError

EXIT_CONFIG = 2


def _ids(values: Sequence[str], flag: str) -> list[str]:
    ids = [i.strip() for v in values for i in v.split(",") if i.strip()]
    bad = unknown(ids)
    if bad:
        raise ConfigError(flag, "", f"no such check: {', '.join(bad)} (see --list)")
    return ids


def _gates(text: str, flag: str) -> dict[str, bool]:
    out = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = item.partition("=")
        if not eq or value.lower() not in ("true", "false"):
            raise ConfigError(flag, "", f"{item!r} is not NAME=true|false")
        out[key] = value.lower() == "true"
    return out


@contextlib.contextmanager
def _api_server(args: argparse.Namespace, workdir: Path) -> Iterator[tuple[str, bool]]:
    """(kubeconfig path, whether the kit owns the server)."""
    if args.kubeconfig:
        yield args.kubeconfig, False
        return
    from accel_plugins.conformance.envtest import EnvtestUnavailable, api_server

    try:
        server_cm = api_server(
            args.kube_apiserver,
            feature_gates=_gates(args.apiserver_feature_gates, "--apiserver-feature-gates"),
            runtime_config=_gates(args.apiserver_runtime_config, "--apiserver-runtime-config"),
            scheduler=False,
        )
        server = server_cm.__enter__()
    except EnvtestUnavailable as exc:
        raise ConfigError(
            "--kubeconfig", "", f"none given, and no API server to start: {exc}"
        ) from exc
    try:
        path = workdir / "kubeconfig"
        path.write_text(json.dumps(server.kubeconfig()))  # JSON is YAML
        yield str(path), True
    finally:
        server_cm.__exit__(None, None, None)


async def conform(
    target: Target, kubeconfig: str, *, only: Sequence[str], skip: Sequence[str], owned: bool
) -> list[Outcome]:
    from accel_plugins.kube.client import load_config, make_client

    client = make_client(load_config(kubeconfig))
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # one line per API call otherwise
    try:
        cluster = Cluster(client, target.driver, target.node)
        if owned:
            await cluster.discover()
            await cluster.ensure_node()
        async with session_for(target, cluster, kubeconfig) as session:
            return await run_checks(session, selected(only, skip))
    finally:
        await client.close()


def run_command(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    if args.list:
        print(check_list(), file=out)
        return 0
    if not args.driver:
        raise ConfigError("--driver", "", "the driver's name is required")
    only, skip = _ids(args.only, "--only"), _ids(args.skip, "--skip")
    command = tuple(shlex.split(args.driver_command)) if args.driver_command else ()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="dra-conformance-"))
    workdir.mkdir(parents=True, exist_ok=True)
    with _api_server(args, workdir) as (kubeconfig, owned):
        target = Target(
            driver=args.driver,
            node=args.node or socket.gethostname(),
            registry=Path(args.plugins_registry_dir),
            cdi_dirs=tuple(Path(d) for d in args.cdi_dir),
            command=command,
            workdir=workdir,
            sole_node=args.sole_node or owned,
            timeouts=Timeouts(
                call=args.call_timeout, register=args.register_timeout, repair=args.repair_timeout
            ),
        )
        outcomes = asyncio.run(conform(target, kubeconfig, only=only, skip=skip, owned=owned))
    print(render_table(args.driver, outcomes), file=out)
    if args.junit:
        Path(args.junit).write_text(junit_xml(args.driver, outcomes))
    if command:
        print(f"driver log: {workdir / 'driver.log'}", file=out)
    return exit_code(outcomes)
