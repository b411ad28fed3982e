"""A client for the plugin's optional uses of the API server, or why there is none.

Device-plugin mode needs no API server; with one it posts health Events on its Node
and follows the Node's cordon annotation. Each use runs when a client can be made and
otherwise logs one line saying why not (no --node-name, lightkube not installed, no
config) and the plugin goes on. Importable without lightkube.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lightkube import AsyncClient


def optional_client(
    what: str, node: str, kubeconfig: str | None, log: logging.Logger
) -> AsyncClient | None:
    """A client from ``kubeconfig`` or the service account; None after one INFO line on
    ``log`` ("no <what>: <why>") when ``node`` is empty or no client can be made."""
    if not node:
        log.info("no %s: --node-name is not set", what)
        return None
    try:
        from accel_plugins.kube.client import load_config, make_client

        return make_client(load_config(kubeconfig))
    except ModuleNotFoundError as exc:
        log.info("no %s: %s is not installed (pip install 'accel-plugins[dra]')", what, exc.name)
    except Exception as exc:
        log.info("no %s: no API access (%s)", what, exc)
    return None
