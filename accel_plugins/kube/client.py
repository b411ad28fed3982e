"""One lightkube AsyncClient from ``--kubeconfig`` or the pod's service account.

Shared by the DRA driver's API side and the kubelet emulator's claim reads;
it lives outside both so the emulator reaches it without importing the
plugin framework (the import-linter contract). Import it only where the
``[dra]`` extra (lightkube) is needed.
"""

from __future__ import annotations

import os
from pathlib import Path

from lightkube import AsyncClient, ConfigError, KubeConfig

from accel_plugins.errors import ConfigError as AccelConfigError
from accel_plugins.kube.rate_limit import RateLimit, TokenBucket, process_limit

KUBECONFIG_ENV = "KUBECONFIG"
FIELD_MANAGER = "accel-plugins"


def load_config(kubeconfig: str | os.PathLike[str] | None = None) -> KubeConfig:
    """``kubeconfig`` (or ``$KUBECONFIG``) when given, else the in-cluster service account.

    Raises ConfigError naming the source when neither can be read.
    """
    path = kubeconfig or os.environ.get(KUBECONFIG_ENV) or None
    try:
        if path:
            return KubeConfig.from_file(Path(path))
        return KubeConfig.from_service_account()
    except (ConfigError, OSError) as exc:
        source = f"--kubeconfig {path}" if path else "in-cluster service account"
        raise AccelConfigError(
            source, "", f"cannot load a Kubernetes client config: {exc}"
        ) from exc


def make_client(
    config: KubeConfig | None = None, *, timeout: float = 10.0, limit: RateLimit | None = None
) -> AsyncClient:
    """An AsyncClient for ``config`` (default: :func:`load_config`), its requests paced by
    ``limit`` (default: the process's, ``rate_limit.set_process_limit``: 5 a second, bursts
    of 100).

    ``trust_env`` is off: a node's HTTP(S)_PROXY must not send API calls for
    the local control plane elsewhere.
    """
    import httpx2

    client = AsyncClient(
        config or load_config(),
        field_manager=FIELD_MANAGER,
        trust_env=False,
        timeout=httpx2.Timeout(timeout),
    )
    bucket = TokenBucket(limit or process_limit())

    async def paced(request: httpx2.Request) -> None:
        await bucket.take()

    # lightkube makes its httpx client itself and offers no hook: reached through its
    # (stable since 0.x) attributes; tests/unit/kube/test_rate_limit.py checks the path.
    transport: httpx2.AsyncClient = client._client._client
    transport.event_hooks["request"].append(paced)
    return client
