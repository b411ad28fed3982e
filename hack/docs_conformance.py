"""The conformance kit's checks as a reference page, from its catalogue (hack/gen-docs)."""

from __future__ import annotations

from accel_plugins.conformance.catalogue import CHECKS, Profile


def page(note: str) -> str:
    lines = [
        note,
        "",
        "# DRA conformance checks",
        "",
        "Every check of `accel-plugins dra-conformance`, in the order the kit runs them, with",
        "the rule it holds a driver to and where the rule is written. How to run the kit and",
        "read its report: [DRA driver conformance](../conformance.md).",
        "",
    ]
    for profile in Profile:
        lines += [f"## {profile.value.capitalize()}", ""]
        lines += ["| check | rule | source | needs |", "| --- | --- | --- | --- |"]
        for c in (c for c in CHECKS if c.profile is profile):
            needs = ", ".join(f"`{n}`" for n in c.needs)
            if c.needs_command:
                needs = ", ".join(filter(None, [needs, "`--driver-command`"]))
            lines.append(f"| `{c.id}` | {c.rule} | {c.source} | {needs} |")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"
