"""The entry-point reader agrees with importlib.metadata, at a fraction of its import cost."""

from __future__ import annotations

import importlib.metadata
import re
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import accel_plugins
from accel_plugins.plugin.command import ENTRY_POINT_GROUP, Option
from accel_plugins.util.entrypoints import EntryPointRef, entry_points, parse
from tests.support.repo import ROOT as REPO_ROOT

ROOT = REPO_ROOT


def dist(site: Path, folder: str, text: str | None) -> None:
    info = site / folder
    info.mkdir(parents=True)
    name, _, rest = folder.rpartition(".")[0].partition("-")
    version = f"Version: {rest}\n" if rest else ""
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\n{version}\nbody\n")
    if text is not None:
        (info / "entry_points.txt").write_text(text)


def reference(group: str, path: list[str]) -> list[tuple[str, str, str]]:
    """importlib.metadata's view of ``path``: the first distribution of a name wins."""
    unique: dict[str, importlib.metadata.Distribution] = {}
    for found in importlib.metadata.distributions(path=path):
        unique.setdefault(re.sub(r"[-_.]+", "_", found.name).lower(), found)
    return sorted(
        (e.name, e.value, e.group)
        for d in unique.values()
        for e in d.entry_points
        if e.group == group
    )


def as_tuples(found: list[EntryPointRef]) -> list[tuple[str, str, str]]:
    return [(e.name, e.value, e.group) for e in found]


def test_same_answer_as_importlib_metadata_here() -> None:
    ours = as_tuples(entry_points(ENTRY_POINT_GROUP))
    theirs = [(e.name, e.value, e.group) for e in importlib.metadata.entry_points().select(
        group=ENTRY_POINT_GROUP
    )]  # fmt: skip
    assert sorted(ours) == sorted(theirs)
    assert ("nvidia", "accel_plugins.backends.nvidia.command:COMMAND", ENTRY_POINT_GROUP) in ours


def test_same_answer_as_importlib_metadata_on_a_built_path(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    group = "[accel_plugins.backends]\n"
    dist(first, "acme_widget-0.1.dist-info", group + "widget = acme.cmd:COMMAND\n")
    dist(first, "no_entry_points-1.0.dist-info", None)
    dist(first, "old_style.egg-info", "# comment\n" + group + "old = old.cmd : COMMAND\n")
    dist(first, "other-2.0.dist-info", "[console_scripts]\nother = other:main\n")
    # The same distribution again, later on the path: shadowed, as importlib.metadata does.
    dist(second, "Acme.Widget-0.2.dist-info", group + "widget = acme.v2:COMMAND\n")
    path = [str(first), str(second)]
    ours = as_tuples(entry_points(ENTRY_POINT_GROUP, path))
    assert sorted(ours) == reference(ENTRY_POINT_GROUP, path)
    assert ("widget", "acme.cmd:COMMAND", ENTRY_POINT_GROUP) in ours
    assert {e.name: e.dist for e in entry_points(ENTRY_POINT_GROUP, path)} == {
        "widget": "acme_widget 0.1",
        "old": "old_style",
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("[g]\na = m:x\n", [("a", "m:x", "g")], id="plain"),
        pytest.param("[ g ]\n a =  m:x.y \n", [("a", "m:x.y", "g")], id="spaces"),
        pytest.param("; c\n# c\n[g]\n\na=m\n", [("a", "m", "g")], id="comments and blanks"),
        pytest.param("a = m:x\n[g]\n", [], id="entry before any group is ignored"),
        pytest.param(
            "[g]\na = m:x\n[h]\nb = n:y\n", [("a", "m:x", "g"), ("b", "n:y", "h")], id="two groups"
        ),
    ],
)  # fmt: skip
def test_parse(text: str, expected: list[tuple[str, str, str]]) -> None:
    assert as_tuples(parse(text, "d 1")) == expected


def test_load_follows_module_and_attribute_path() -> None:
    ref = EntryPointRef("x", "accel_plugins.plugin.command:Option.dest", "g", "d")
    assert ref.load() is Option.dest
    assert (
        EntryPointRef("x", "accel_plugins.util.entrypoints", "g", "d").load()
        is sys.modules["accel_plugins.util.entrypoints"]
    )


def test_a_zip_on_the_path_goes_to_importlib_metadata(tmp_path: Path) -> None:
    archive = tmp_path / "bundle.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zipped-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: zipped\n")
        z.writestr("zipped-1.0.dist-info/entry_points.txt", "[g.zip]\nz = zipped:C\n")
    assert as_tuples(entry_points("g.zip", [str(archive)])) == [("z", "zipped:C", "g.zip")]


def test_version_is_pyprojects() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert accel_plugins.__version__ == project["version"]
