"""pvfs as a benchmark target: a private cluster, its FUSE mount and its native API.

* :func:`pvfs_cluster` — manager + ``iods`` I/O daemons on 127.0.0.1 under a directory
  (``pvfs.cluster.launch``), stopped on exit;
* :func:`pvfs_mount` — ``python -m pvfs.fuse --foreground`` at a directory with ``-o``
  options; unmounted (``fusermount3 -u``, ``-z`` if busy) and reaped on exit;
* :func:`native_opener` — the ``py:bench.fio.pvfs_target:native_opener`` hook of
  :mod:`bench.fio.pyjobs`: ``pvfs.connect`` on the config named by ``$PVFS_BENCH_CONFIG``,
  files under ``/fio-native-<pid>``; ``pread``/``pwrite`` go straight to the I/O daemons.

Each daemon's and mount's peak resident memory (``VmHWM``) is kept in :data:`PEAK_RSS` as
they stop, for the benchmarks' results (issue 11's memory bounds).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

CONFIG_ENV = "PVFS_BENCH_CONFIG"
MOUNT_TIMEOUT = 30.0
PEAK_RSS: dict[str, int] = {}   # "mgr", "iod0", ..., "mount:<path>" -> peak resident bytes


def status_bytes(pid: int, field: str) -> int | None:
    """A live process's ``/proc/PID/status`` memory field (``VmHWM``, ``VmRSS``) in bytes."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def peak_rss(pid: int) -> int | None:
    """A live process's peak resident set (``VmHWM``) in bytes."""
    return status_bytes(pid, "VmHWM")


def _note_daemons(run_dir: str) -> None:
    for pidfile in sorted(Path(run_dir).glob("*.pid")):
        with contextlib.suppress(OSError, ValueError):
            got = peak_rss(int(pidfile.read_text().split()[0]))
            if got is not None:
                PEAK_RSS[pidfile.stem] = max(got, PEAK_RSS.get(pidfile.stem, 0))


@contextlib.contextmanager
def pvfs_cluster(directory: str | os.PathLike[str], iods: int = 4) -> Iterator[str]:
    """Start a private file system under ``directory``; yields its config path."""
    from pvfs.cluster.launch import down, make_config, up, write_config

    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    cfg = write_config(make_config(str(root), iods=iods), str(root / "pvfs.toml"))
    try:
        up(cfg)
        yield str(root / "pvfs.toml")
    finally:
        _note_daemons(cfg.run_dir)
        down(cfg)


def _unmount(path: Path) -> None:
    if os.path.ismount(path):
        done = subprocess.run(["fusermount3", "-u", str(path)], check=False, capture_output=True)
        if done.returncode != 0:
            subprocess.run(["fusermount3", "-u", "-z", str(path)], check=False,
                           capture_output=True)


@contextlib.contextmanager
def pvfs_mount(config: str, path: str | os.PathLike[str], options: str = "") -> Iterator[str]:
    """Mount the file system of ``config`` at ``path`` with ``-o options``; yields the path.

    Raises:
        RuntimeError: the mount did not come up within ``MOUNT_TIMEOUT`` seconds.
    """
    mnt = Path(path)
    mnt.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pvfs.fuse", "--config", config, str(mnt), "--foreground"]
    if options:
        argv += ["-o", options]
    log = mnt.parent / f"{mnt.name}.mount.log"
    with open(log, "ab") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=fh, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while not os.path.ismount(mnt):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"pvfs mount failed: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        os.stat(mnt)
        yield str(mnt)
    finally:
        got = peak_rss(proc.pid)
        if got is not None:
            PEAK_RSS[f"mount:{mnt}"] = max(got, PEAK_RSS.get(f"mount:{mnt}", 0))
        _unmount(mnt)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)


class _NativeFile:
    """:class:`bench.fio.pyjobs.FileHandle` over ``pvfs.File`` (already pread/pwrite)."""

    def __init__(self, f: object) -> None:
        self._f = f

    def pread(self, length: int, offset: int) -> bytes:
        return self._f.pread(length, offset)  # type: ignore[attr-defined]

    def pwrite(self, data: bytes, offset: int) -> int:
        return self._f.pwrite(data, offset)  # type: ignore[attr-defined]

    def fsync(self) -> None:
        self._f.fsync()  # type: ignore[attr-defined]

    def close(self) -> None:
        self._f.close()  # type: ignore[attr-defined]


@contextlib.contextmanager
def native_opener(workdir: str) -> Iterator[object]:
    """The pvfs native API as a :data:`bench.fio.pyjobs.Opener` (config from the env)."""
    import pvfs

    config = os.environ.get(CONFIG_ENV)
    if not config:
        raise RuntimeError(f"native target: set ${CONFIG_ENV} to a pvfs config")
    base = f"/fio-native-{os.getpid()}"
    with pvfs.connect(config) as fs:
        with contextlib.suppress(FileExistsError):
            fs.mkdir(base)
        try:
            yield lambda name, mode: _NativeFile(fs.open(f"{base}/{name}", mode))
        finally:
            for name in fs.listdir(base):
                with contextlib.suppress(OSError):
                    fs.unlink(f"{base}/{name}")
            with contextlib.suppress(OSError):
                fs.rmdir(base)
