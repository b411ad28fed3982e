"""Images for the test node, made offline and imported into its containerd.

- The test image: Debian's busybox-static and the pause program (configs/pause.c,
  built static here), written as an OCI image layout archive by this module (a single
  uncompressed layer needs no build tool). It is both the pod sandbox image and the
  image of every test pod.
- The project's images: hack/build-node-images builds them from ./Dockerfile (the images
  users run) and saves them as OCI archives; this module imports them.

Both go in with ``ctr -n k8s.io images import``, where the kubelet's CRI finds them.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.node.cluster import CONFIGS, SANDBOX_IMAGE, Node

TEST_IMAGE = "localhost/accel-node/busybox:1"
BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static
APPLETS = (
    "sh",
    "ls",
    "cat",
    "env",
    "sleep",
    "grep",
    "test",
    "stat",
    "head",
    "sort",
    "wget",
    "echo",
)


class ImageUnavailable(Exception):  # noqa: N818 (a reason to skip, not a failure)
    """Something the image needs is not on this machine."""


@dataclass(frozen=True)
class Blob:
    media_type: str
    data: bytes

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.data).hexdigest()

    def descriptor(self, annotations: Mapping[str, str] | None = None) -> dict[str, object]:
        described: dict[str, object] = {
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": len(self.data),
        }
        if annotations:
            described["annotations"] = dict(annotations)
        return described


def _layer(files: Mapping[str, tuple[bytes, int]], links: Mapping[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in sorted({str(Path(p).parent) for p in (*files, *links)} - {"."}):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, (data, mode) in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
        for path, target in sorted(links.items()):
            info = tarfile.TarInfo(path)
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            tar.addfile(info)
    return buffer.getvalue()


def build_pause(workdir: Path) -> bytes:
    binary = workdir / "pause"
    done = subprocess.run(
        ["gcc", "-static", "-Os", "-o", str(binary), str(CONFIGS / "pause.c")],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ImageUnavailable(f"gcc -static pause.c: {done.stderr.strip()} (libc6-dev?)")
    return binary.read_bytes()


def write_test_image(workdir: Path) -> Path:
    """The test image's OCI archive, named both as the test image and the sandbox image."""
    if not BUSYBOX.is_file():
        raise ImageUnavailable(f"{BUSYBOX} is missing (Debian package busybox-static)")
    layer = Blob(
        "application/vnd.oci.image.layer.v1.tar",
        _layer(
            {"bin/busybox": (BUSYBOX.read_bytes(), 0o755), "pause": (build_pause(workdir), 0o755)},
            {f"bin/{applet}": "busybox" for applet in APPLETS},
        ),
    )
    config = Blob(
        "application/vnd.oci.image.config.v1+json",
        json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                "config": {"Env": ["PATH=/bin"], "Entrypoint": ["/pause"]},
                "rootfs": {"type": "layers", "diff_ids": [layer.digest]},
            }
        ).encode(),
    )
    manifest = Blob(
        "application/vnd.oci.image.manifest.v1+json",
        json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": config.descriptor(),
                "layers": [layer.descriptor()],
            }
        ).encode(),
    )
    index = {
        "schemaVersion": 2,
        "manifests": [
            manifest.descriptor({"io.containerd.image.name": name})
            for name in (TEST_IMAGE, SANDBOX_IMAGE)
        ],
    }
    archive = workdir / "test-image.tar"
    with tarfile.open(archive, "w") as tar:
        for name, data in (
            ("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode()),
            ("index.json", json.dumps(index).encode()),
            *((f"blobs/sha256/{b.digest[7:]}", b.data) for b in (layer, config, manifest)),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive


def import_archive(node: Node, archive: Path) -> None:
    node.ctr("images", "import", str(archive))
