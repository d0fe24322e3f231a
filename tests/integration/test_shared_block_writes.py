"""Non-overlapping writes of different clients to one block both survive (PVFS' rule).

Found by ``pvfs-admin check`` (docs/check.md): a mount that believed a file ended at byte 1
filled a block with zeros up to its own write and wrote the whole block back, destroying
bytes another client had written there. The mount now writes back only the ranges it wrote.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_mount_support import needs_fuse

pytestmark = [pytest.mark.fuse, needs_fuse]


@pytest.mark.parametrize("gap", [0, 3, 2500])
def test_mount_write_keeps_native_write_in_the_same_block(pvfs_mount, fs, gap):
    path = pvfs_mount.path / f"shared{gap}"
    path.write_bytes(b"a")
    fd = os.open(path, os.O_RDWR)
    try:
        os.pread(fd, 1, 0)  # the mount now knows the file as 1 byte long
        with fs.open(f"/shared{gap}", "r+b") as nf:
            nf.pwrite(b"xyz", 16384)  # another client, same 4 KiB block as the write below
        os.pwrite(fd, b"w" * 192, 16387 + gap)
        os.fsync(fd)
    finally:
        os.close(fd)
    with fs.open(f"/shared{gap}", "rb") as nf:
        assert nf.pread(3, 16384) == b"xyz"
        assert nf.pread(192, 16387 + gap) == b"w" * 192
