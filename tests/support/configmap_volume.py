"""A ConfigMap volume as the kubelet lays it out and updates it, for live-reload tests.

The kubelet's AtomicWriter (kubernetes pkg/volume/util/atomic_writer.go) keeps
each key as a symlink ``<key> -> ..data/<key>``, ``..data`` a symlink to a
timestamped directory ``..<UTC time>.<random>``. An update writes a new
timestamped directory, points ``..data_tmp`` at it, renames ``..data_tmp``
over ``..data`` (the one atomic step) and then removes the old directory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

DATA = "..data"
DATA_TMP = "..data_tmp"


class ConfigMapVolume:
    """A directory whose keys are updated exactly as a projected ConfigMap's are."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        """The path a container is given: ``<mount>/<key>``."""
        return self.directory / key

    def write(self, files: dict[str, str]) -> None:
        """Publish ``files`` (key -> content) as the volume's whole new content."""
        stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
        fresh = Path(tempfile.mkdtemp(prefix=stamp, dir=self.directory))
        for key, text in files.items():
            (fresh / key).write_text(text)
        data = self.directory / DATA
        old = Path(os.readlink(data)) if data.is_symlink() else None
        tmp = self.directory / DATA_TMP
        tmp.symlink_to(fresh.name)
        tmp.rename(data)
        for key in files:
            link = self.directory / key
            if not link.is_symlink():
                link.symlink_to(Path(DATA) / key)
        if old is not None:
            shutil.rmtree(self.directory / old)
