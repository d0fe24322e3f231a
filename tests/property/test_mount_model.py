"""A hypothesis state machine drives a real mount through plain ``os`` calls and compares every
result (data, sizes, listings, errno) with the same calls on a local directory."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

sys.path.insert(0, str(Path(__file__).parents[1] / "integration"))
from test_mount_support import Mount, needs_fuse

pytestmark = [pytest.mark.fuse, needs_fuse]

NAMES = st.sampled_from(["a", "b", "c", "d/a", "d/b", "e"])
DATA = st.binary(min_size=0, max_size=20_000)
OFFSETS = st.integers(0, 40_000)


def outcome(fn, *args):
    """(result, None) or (None, errno) of a call."""
    try:
        return fn(*args), None
    except OSError as exc:
        return None, exc.errno


class MountModel(RuleBasedStateMachine):
    mount_root: Path
    counter = 0

    @initialize()
    def setup(self) -> None:
        MountModel.counter += 1
        self.fs = MountModel.mount_root / f"run{MountModel.counter}"
        self.ref = Path(tempfile.mkdtemp(prefix="pvfs-model-"))
        self.fs.mkdir()

    def teardown(self) -> None:
        shutil.rmtree(self.ref, ignore_errors=True)

    def both(self, fn, rel: str, *args):
        got = outcome(fn, str(self.fs / rel), *args)
        want = outcome(fn, str(self.ref / rel), *args)
        assert got == want, (fn.__name__, rel, args, got, want)
        return got

    @rule(name=NAMES, data=DATA, off=OFFSETS)
    def pwrite(self, name, data, off):
        def op(path, data, off):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                return os.pwrite(fd, data, off)
            finally:
                os.close(fd)
        self.both(op, name, data, off)

    @rule(name=NAMES, off=OFFSETS, n=st.integers(0, 50_000))
    def pread(self, name, off, n):
        def op(path, off, n):
            fd = os.open(path, os.O_RDONLY)
            try:
                return os.pread(fd, n, off)
            finally:
                os.close(fd)
        self.both(op, name, off, n)

    @rule(name=NAMES, size=OFFSETS)
    def truncate(self, name, size):
        self.both(os.truncate, name, size)

    @rule(name=NAMES)
    def unlink(self, name):
        self.both(os.unlink, name)

    @rule()
    def mkdir(self):
        self.both(os.mkdir, "d")

    @rule()
    def rmdir(self):
        self.both(os.rmdir, "d")

    @rule(src=NAMES, dst=NAMES)
    def rename(self, src, dst):
        got = outcome(os.rename, str(self.fs / src), str(self.fs / dst))
        want = outcome(os.rename, str(self.ref / src), str(self.ref / dst))
        assert got == want, ("rename", src, dst, got, want)

    @rule(src=NAMES, dst=NAMES)
    def link(self, src, dst):
        got = outcome(os.link, str(self.fs / src), str(self.fs / dst))
        want = outcome(os.link, str(self.ref / src), str(self.ref / dst))
        assert got == want, ("link", src, dst, got, want)

    @rule(name=NAMES)
    def stat_size(self, name):
        def op(path):
            s = os.lstat(path)
            return (s.st_size if not os.path.isdir(path) else -1), s.st_nlink if \
                not os.path.isdir(path) else 0
        self.both(op, name)

    @invariant()
    def listings_match(self):
        if not hasattr(self, "fs"):
            return
        for sub in ("", "d"):
            got = outcome(lambda p: sorted(os.listdir(p)), str(self.fs / sub))
            want = outcome(lambda p: sorted(os.listdir(p)), str(self.ref / sub))
            assert got == want, (sub, got, want)


@pytest.fixture(scope="module")
def model_mount(pvfs_cluster, tmp_path_factory):
    m = Mount(pvfs_cluster.config_path, tmp_path_factory.mktemp("model") / "mnt",
              "cache_size=1M")
    with m:
        yield m


def test_mount_matches_local_directory(model_mount):
    MountModel.mount_root = model_mount.path
    MountModel.TestCase.settings = settings(max_examples=25, stateful_step_count=30,
                                            deadline=None)
    MountModel.TestCase().runTest()
