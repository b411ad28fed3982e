"""Read the dynamic linker's cache (``/etc/ld.so.cache``) of a root file system.

The driver's libraries live wherever the distribution put them
(``/usr/lib/x86_64-linux-gnu``, ``/usr/lib64``, a driver container's own
tree); the linker cache under the driver root says where, as NVIDIA's CDI
generator reads it. The format is glibc's "new" one (``glibc-ld.so.cache``
version ``1.1``), alone or after the old ``ld.so-1.7.0`` table: a 48-byte
header, then 24-byte entries whose key (the library's name) and value (its
path) are offsets of NUL-terminated strings from the new header's start.
Only entries for this machine's word size and architecture are kept, as the
linker itself would.
"""

from __future__ import annotations

import platform
import struct
from dataclasses import dataclass
from pathlib import Path

LDCACHE = "/etc/ld.so.cache"
OLD_MAGIC = b"ld.so-1.7.0\0"
NEW_MAGIC = b"glibc-ld.so.cache1.1"
_NEW_HEADER = struct.Struct("<20sII12x8x")  # magic+version, entries, string table size
_NEW_ENTRY = struct.Struct("<iIIIQ")  # flags, key, value, osversion, hwcap
_OLD_ENTRY_SIZE = 12

FLAG_ELF_LIBC6 = 0x0003  # the type byte of a glibc shared library
ARCH_FLAGS = {
    "x86_64": 0x0300,
    "aarch64": 0x0A00,
    "ppc64le": 0x0500,
}
"""The architecture byte glibc writes for each 64-bit machine (elf/cache.c)."""


class LdCacheError(ValueError):
    """The file is no linker cache this reader understands."""


@dataclass(frozen=True, slots=True)
class LdCacheEntry:
    name: str  # libcuda.so.1
    path: str  # /usr/lib/x86_64-linux-gnu/libcuda.so.1 (inside the root it was read from)


def parse(data: bytes, machine: str | None = None) -> list[LdCacheEntry]:
    """The entries of one cache file for ``machine`` (default: this one), in file order."""
    arch = ARCH_FLAGS.get(machine or platform.machine())
    start = 0
    if data.startswith(OLD_MAGIC):
        (count,) = struct.unpack_from("<I", data, len(OLD_MAGIC))
        start = len(OLD_MAGIC) + 4 + count * _OLD_ENTRY_SIZE
        start += -start % 8  # the new table is 8-byte aligned
    if data[start : start + len(NEW_MAGIC)] != NEW_MAGIC:
        raise LdCacheError("not a glibc ld.so.cache (format 1.1)")
    try:
        _, count, _ = _NEW_HEADER.unpack_from(data, start)
        entries: list[LdCacheEntry] = []
        for i in range(count):
            flags, key, value, _, _ = _NEW_ENTRY.unpack_from(
                data, start + _NEW_HEADER.size + i * _NEW_ENTRY.size
            )
            if flags & 0xFF != FLAG_ELF_LIBC6 or (arch is not None and flags & 0xFF00 != arch):
                continue
            entries.append(LdCacheEntry(_string(data, start + key), _string(data, start + value)))
    except struct.error as exc:
        raise LdCacheError(f"truncated ld.so.cache: {exc}") from None
    return entries


def _string(data: bytes, offset: int) -> str:
    end = data.find(b"\0", offset)
    if offset >= len(data) or end < 0:
        raise LdCacheError(f"string offset {offset} outside the cache")
    return data[offset:end].decode("utf-8", "replace")


def read(root: Path, machine: str | None = None) -> list[LdCacheEntry]:
    """The cache under ``root``; empty when there is none or it cannot be read."""
    try:
        data = (root / LDCACHE.lstrip("/")).read_bytes()
        return parse(data, machine)
    except (OSError, LdCacheError):
        return []


def build(entries: list[tuple[str, str]], machine: str | None = None) -> bytes:
    """A new-format cache holding ``(name, path)`` entries: for tests and simulated roots."""
    arch = ARCH_FLAGS.get(machine or platform.machine(), 0)
    table_start = _NEW_HEADER.size + len(entries) * _NEW_ENTRY.size
    strings = bytearray()
    packed = bytearray()
    for name, path in entries:
        key = table_start + len(strings)
        strings += name.encode() + b"\0"
        value = table_start + len(strings)
        strings += path.encode() + b"\0"
        packed += _NEW_ENTRY.pack(FLAG_ELF_LIBC6 | arch, key, value, 0, 0)
    header = _NEW_HEADER.pack(NEW_MAGIC, len(entries), len(strings))
    return bytes(header + packed + strings)
