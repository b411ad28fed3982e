"""Node Feature Discovery's local feature files: ``key=value`` lines NFD turns into node labels.

nfd-worker's local source reads every file in
``/etc/kubernetes/node-feature-discovery/features.d/`` and skips names that
start with a dot, which is what makes the update atomic: the new content is
written to a dot-file beside the target and renamed over it.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_FEATURES_DIR = Path("/etc/kubernetes/node-feature-discovery/features.d")


def write_feature_file(path: Path, text: str) -> bool:
    """Replace ``path`` with ``text`` atomically; False (and no write) when it already holds it.

    Unchanged content is not rewritten, so NFD sees no change and a reload
    that changed nothing the labels show costs one read.
    """
    try:
        if path.read_text() == text:
            return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.chmod(0o644)
    os.replace(tmp, path)
    return True
