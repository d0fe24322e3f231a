"""The benchmarks' working directories (``bench.common.scratch_workdir``): in /tmp, or on a
journaled ext4 of their own, and gone afterwards."""

from __future__ import annotations

import os

from pvfs.bench.common import scratch_workdir


def test_a_tmp_workdir_is_made_and_removed():
    with scratch_workdir("pvfs-scratch-test-", "tmp") as (work, where):
        assert work.is_dir() and where.startswith("/")
        (work / "f").write_bytes(b"x")
    assert not work.exists()


def test_a_journaled_workdir_is_its_own_file_system_and_goes_away(tmp_path):
    with scratch_workdir("pvfs-scratch-test-", "journaled") as (work, where):
        (work / "f").write_bytes(b"x")
        if where == "journaled ext4 (loop)":  # (root with mkfs.ext4 and loop devices)
            assert os.stat(work).st_dev != os.stat(tmp_path).st_dev
            assert os.path.ismount(work.parent)
    assert not work.exists()
    with open("/proc/mounts") as f:
        assert str(work.parent) not in f.read()


def test_a_given_workdir_is_kept(tmp_path):
    with scratch_workdir("unused-", "journaled", str(tmp_path)) as (work, where):
        assert work == tmp_path.resolve() and where.startswith("given")
    assert tmp_path.exists()
