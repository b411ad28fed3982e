"""The command-line reference page: every subcommand's flags, from the parsers that run."""

from __future__ import annotations

import argparse
import os
from unittest import mock

# The project's own backends: a third-party one installed beside (CI installs
# examples/fpga-backend) documents itself.
OWN_BACKENDS = ("nvidia", "generic")


def _parser() -> argparse.ArgumentParser:
    from accel_plugins.cli.main import build_parser, installed_backends

    installed = installed_backends(lambda name: name in OWN_BACKENDS)
    backends = {name: b for name, b in installed.items() if name in OWN_BACKENDS}
    return build_parser(["--help"], backends)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise SystemExit("accel-plugins has no subcommands")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").replace("<", "&lt;").replace(">", "&gt;")


def _flag_row(action: argparse.Action) -> str:
    names = ", ".join(f"`{name}`" for name in action.option_strings)
    if action.nargs == 0:
        value = ""
    elif action.choices:
        value = " \\| ".join(f"`{choice}`" for choice in action.choices)
    else:
        value = f"`{action.metavar or action.dest.upper()}`"
    return f"| {names} | {value} | {_cell(action.help or '')} |"


def _section(name: str, parser: argparse.ArgumentParser) -> list[str]:
    lines = [f"## `accel-plugins {name}`", ""]
    if parser.description:
        lines += [_cell(parser.description), ""]
    positionals = [a for a in parser._actions if not a.option_strings]
    flags = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    for action in positionals:
        lines.append(f"Argument `{action.metavar or action.dest}`: {_cell(action.help or '')}.")
        lines.append("")
    if flags:
        lines += ["| flag | value | meaning |", "| --- | --- | --- |"]
        lines += [_flag_row(action) for action in flags]
        lines.append("")
    return lines


def page(note: str) -> str:
    # The help shows environment values that are set; generate from none of them.
    minimal = {key: os.environ[key] for key in ("PATH", "HOME", "LANG") if key in os.environ}
    with mock.patch.dict(os.environ, minimal, clear=True):
        parser = _parser()
        commands = _subcommands(parser)
        lines = [
            note,
            "",
            "# Command-line flags",
            "",
            "Every flag of every `accel-plugins` subcommand, read from its argparse parser.",
            "Each flag of a plugin command has an environment twin, `ACCEL_PLUGINS_<FLAG>`",
            "(the flag wins); vendor spellings are listed beside it. What they do, with",
            "examples: [Command line](../command-line.md).",
            "",
        ]
        for name, sub in commands.items():
            lines += _section(name, sub)
    return "\n".join(lines).rstrip() + "\n"
