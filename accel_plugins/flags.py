"""Command-line flags that each have an environment-variable twin.

A flag given on the command line wins over its environment variable, which
wins over the built-in default (and, for vendors that read a config file,
over the file). The env name is shown in --help so operators can find it.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from typing import Any

ENV_PREFIX = "ACCEL_PLUGINS_"


def env_name(flag: str) -> str:
    """`--plugin-dir` -> `ACCEL_PLUGINS_PLUGIN_DIR`."""
    return ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper()


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (true/false), got {text!r}")


def add_flag(
    parser: argparse.ArgumentParser | Any,
    flag: str,
    *,
    default: Any,
    help: str,
    type: Callable[[str], Any] = str,
    env: Sequence[str] = (),
    choices: Sequence[str] | None = None,
    metavar: str | None = None,
    aliases: Sequence[str] = (),
) -> None:
    """Add ``flag`` whose default comes from its env twins when set.

    ``aliases`` are other spellings of the same flag (``--driver-root``); the env
    twin is named after ``flag`` only.

    ``env`` lists extra variable names accepted besides the ACCEL_PLUGINS_ one
    (e.g. NVIDIA's MIG_STRATEGY); the first one set wins, ours first. A bad
    value in the environment is reported like a bad flag, naming the variable.
    """
    names = [env_name(flag), *env]
    value = default
    source = None
    for name in names:
        raw = os.environ.get(name)
        if raw is not None:
            source = name
            try:
                value = type(raw)
            except (argparse.ArgumentTypeError, ValueError) as exc:
                parser.error(f"environment variable {name}={raw!r}: {exc}")
            if choices is not None and value not in choices:
                parser.error(
                    f"environment variable {name}={raw!r}: must be one of {', '.join(choices)}"
                )
            break
    shown = " / ".join(f"${n}" for n in names)
    if source is not None:
        extra = f" (env {shown}, set)"
    elif default is None or default == "":
        extra = f" (env {shown})"
    else:
        extra = f" (env {shown}; default {default})"
    extra_kwargs: dict[str, Any] = {}
    if type is parse_bool:
        # `--pass-device-specs` alone means true, as Go's boolean flags do.
        extra_kwargs = {"nargs": "?", "const": True}
    parser.add_argument(
        flag,
        *aliases,
        dest=flag.lstrip("-").replace("-", "_"),
        default=value,
        type=type,
        choices=choices,
        metavar=metavar,
        help=help + extra,
        **extra_kwargs,
    )
