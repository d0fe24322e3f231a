"""test_mount_posix.py's tests that need only a mount, again on the front end the default
is not: pyfuse3, the reference (``-o frontend=pyfuse3``), where the C front end is built
(the default then); name limits, setuid clearing, special files, ``st_blocks``."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_mount_posix import (  # noqa: F401 - collected here again, on pyfuse3
    test_ftruncate_of_a_file_created_with_mode_0,
    test_name_and_path_limits_are_enametoolong,
    test_non_owner_write_and_truncate_clear_suid,
    test_special_files_on_the_mount,
    test_st_blocks_is_the_space_the_stripe_files_use,
)
from test_mount_support import Mount, needs_fuse

from pvfs.fuse.cfront import available

pytestmark = [pytest.mark.fuse, needs_fuse,
              pytest.mark.skipif(not available(), reason="pvfs._fusefront not built: "
                                 "test_mount_posix.py runs on pyfuse3 already")]


@pytest.fixture(scope="module")
def mnt(pvfs_cluster):
    """A frontend=pyfuse3 mount, under a 0755 directory so other uids can reach it."""
    base = Path(tempfile.mkdtemp(prefix="pvfs-pyfuse3-posix-"))
    base.chmod(0o755)
    m = Mount(pvfs_cluster.config_path, base / "mnt", "frontend=pyfuse3")
    m.start()
    os.chmod(m.path, 0o777)
    try:
        yield m.path
    finally:
        m.stop()
        shutil.rmtree(base, ignore_errors=True)
