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
    repeat: bool = False,
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
            texts = _env_list(parser, name, raw) if repeat else [raw]
            values = []
            for text in texts:
                try:
                    values.append(type(text))
                except (argparse.ArgumentTypeError, ValueError) as exc:
                    parser.error(f"environment variable {name}={raw!r}: {exc}")
                if choices is not None and values[-1] not in choices:
                    parser.error(
                        f"environment variable {name}={raw!r}: must be one of {', '.join(choices)}"
                    )
            value = tuple(values) if repeat else values[0]
            break
    if repeat and source is None:
        value = tuple(default or ())
    shown = " / ".join(f"${n}" for n in names)
    if source is not None:
        extra = f" (env {shown}, set)"
    elif default is None or default == "" or default == ():
        extra = f" (env {shown})"
    else:
        extra = f" (env {shown}; default {default})"
    extra_kwargs: dict[str, Any] = {}
    if repeat:
        extra = f"; repeatable{extra[:-1]}: a YAML list)"
        extra_kwargs = {"action": _Repeated}
    elif type is parse_bool:
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


class _Repeated(argparse.Action):
    """``append`` whose first use on the command line drops the default (the env twin's
    list): as for every flag, the command line wins over the environment."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        current = getattr(namespace, self.dest)
        kept = () if current is self.default else tuple(current)
        setattr(namespace, self.dest, (*kept, values))


def _env_list(parser: argparse.ArgumentParser | Any, name: str, raw: str) -> list[str]:
    """A repeated flag's env twin: a YAML (or JSON) list, one item per value.

    A string item is the value's text; any other item (a mapping, as a squat
    ``--device`` document is) is passed on as its JSON text, which YAML reads
    back. YAML is imported only when such a variable is set (start-up cost).
    """
    import json

    import yaml

    try:
        items = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        parser.error(f"environment variable {name}: not a YAML list: {exc}")
    if not isinstance(items, list):
        parser.error(f"environment variable {name}: expected a YAML list of values")
    return [item if isinstance(item, str) else json.dumps(item) for item in items]
