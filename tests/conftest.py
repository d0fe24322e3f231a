"""Fixtures that start real daemons, exactly as `pvfs-admin up` does, and always stop them."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

from pvfs.cluster.launch import daemons_of, down, make_config, up, write_config
from pvfs.config import Config
from pvfs.procs import read_pidfile

# CI runs one fixed, reproducible set of examples (the same on every run); local runs explore.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@dataclass
class Cluster:
    """A running file system: a manager and I/O daemons on 127.0.0.1 in a temp dir."""

    dir: Path
    config: Config

    @property
    def config_path(self) -> str:
        return self.config.path

    def connect(self, **kw):
        import pvfs

        return pvfs.connect(self.config_path, **kw)

    def pid(self, name: str) -> int | None:
        for d in daemons_of(self.config):
            if d.name == name:
                return read_pidfile(d.pidfile)
        return None

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        pid = self.pid(name)
        if pid:
            os.kill(pid, sig)
            if sig == signal.SIGKILL:
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass

    def removals_done(self, limit: float = 30.0) -> None:
        """Wait until the manager has removed the data of every deleted file (reaper.py)."""
        deadline = time.monotonic() + limit
        with self.connect() as fs:
            while fs.meta("status")["removals_pending"]:
                assert time.monotonic() < deadline, "deleted files' data not removed"
                time.sleep(0.02)

    def stripe_files(self) -> list[Path]:
        """The stripe files of files, once deleted files' are gone (not those the manager
        precreated for its pool)."""
        self.removals_done()
        found = [p for e in self.config.iods for p in Path(e.data_dir, "stripes").rglob("*")
                 if p.is_file()]
        with self.connect() as fs:  # after listing: numbers reserved meanwhile are in it
            pooled = set(fs.meta("precreated")["inos"])
        return [p for p in found if int(p.name, 16) not in pooled]


@contextmanager
def schedulers_kept(config: str | Config) -> Iterator[None]:
    """Every I/O daemon's scheduler as it was before the block (algorithm, window, gather, the
    reactive selector's throttle and model), put back afterwards even if the block fails: a
    module's tests share its cluster, and the next test must not run on what a failed one
    set."""
    import pvfs

    with pvfs.connect(config) as fs:
        saved = [fs.iod_call(i, "sched_get") for i in range(fs.config.niods)]
    try:
        yield
    finally:
        with pvfs.connect(config) as fs:
            for i, s in enumerate(saved):
                fs.iod_call(i, "sched_set", algorithm=s["engine"], window=s["window"],
                            gather=s["gather"], decide=s["rs"]["decide_s"])
                if s["algorithm"] != s["engine"]:  # "rs": the selector over the engine
                    fs.iod_call(i, "sched_set", algorithm=s["algorithm"])
                fs.iod_call(i, "model_set", params=s["rs"]["params"])


def start_cluster(directory: Path, iods: int = 4, **overrides) -> Cluster:
    cfg = make_config(str(directory), iods=iods, **overrides)
    cfg = write_config(cfg, str(directory / "pvfs.toml"))
    try:
        up(cfg)
    except BaseException:
        down(cfg)
        raise
    return Cluster(directory, cfg)


@pytest.fixture(scope="module")
def pvfs_cluster(tmp_path_factory):
    """A 4-daemon file system shared by the tests of one module."""
    cluster = start_cluster(tmp_path_factory.mktemp("pvfs"))
    try:
        yield cluster
    finally:
        down(cluster.config)


@pytest.fixture
def fresh_cluster(tmp_path):
    """A file system of its own for a test that breaks things (short timeouts)."""
    cluster = start_cluster(tmp_path, connect_timeout=1.0, request_timeout=2.0)
    try:
        yield cluster
    finally:
        down(cluster.config)


@pytest.fixture
def fs(pvfs_cluster):
    with pvfs_cluster.connect() as conn:
        yield conn


@pytest.fixture(scope="module")
def pvfs_mount(pvfs_cluster, tmp_path_factory):
    """The module's file system mounted (FUSE, default options); skipped without FUSE."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent / "integration"))
    from test_mount_support import Mount, fuse_available

    if not fuse_available():
        pytest.skip("needs /dev/fuse and fusermount3")
    mount = Mount(pvfs_cluster.config_path, tmp_path_factory.mktemp("mnt") / "pvfs").start()
    try:
        yield mount
    finally:
        mount.stop()
