"""A private single-node GlusterFS distribute volume on loopback, for side-by-side benchmarks.

::

    from pvfs.bench.peers.gluster import gluster_volume
    with gluster_volume("/tmp/gl", bricks=4) as mnt:
        ...  # mnt is a FUSE mount of a 4-brick distribute volume

Follows ``shared/PEERS.md``: the gluster CLI refuses ``localhost``/``127.0.0.1`` as a brick
host, so glusterd runs from a copy of ``/etc/glusterfs/glusterd.vol`` bound to
``127.0.0.2`` and the bricks are ``127.0.0.2:WORKDIR/bricks/bN``. On exit — also after any
failure part way — the mount is unmounted, the volume stopped and deleted, the brick
processes and glusterd killed by their pidfiles. glusterd keeps its state in
``/var/lib/glusterd`` (left behind, as PEERS.md says); a volume of the same name left there by
an earlier crashed run is stopped and deleted before creating the new one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from pvfs.bench.common import (
    ensure_apt,
    is_mounted,
    pids_with_arg,
    run,
    unmount,
    wait_for,
)
from pvfs.procs import pid_alive, read_pidfile, terminate

log = logging.getLogger("bench.gluster")

GLUSTERD = "/usr/sbin/glusterd"
GLUSTERFS = "/usr/sbin/glusterfs"
HOST = "127.0.0.2"
PACKAGES = ["glusterfs-server", "glusterfs-client"]


def ensure_installed() -> None:
    """apt-get install the GlusterFS server and client unless they are present."""
    ensure_apt(PACKAGES, [GLUSTERD, GLUSTERFS, "gluster"])


def private_glusterd_vol(src: str, host: str) -> str:
    """The text of ``glusterd.vol`` with glusterd bound to ``host``.

    Adds ``option transport.socket.bind-address HOST`` right after ``option transport-type``
    (replacing any bind-address already there).
    """
    out = []
    for line in src.splitlines():
        if "transport.socket.bind-address" in line:
            continue
        out.append(line)
        if re.match(r"\s*option\s+transport-type\s", line):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}option transport.socket.bind-address {host}")
    return "\n".join(out) + "\n"


def _gluster(*args: str, check: bool = True, timeout: float = 120) -> str:
    proc = run(["gluster", "--mode=script", *args], check=check,
               timeout=timeout)
    return proc.stdout


def _volume_exists(name: str) -> bool:
    out = _gluster("volume", "list", check=False, timeout=30)
    return name in out.split()


def _brick_pids(volume: str) -> list[int]:
    """Brick process PIDs from glusterd's run directory (pidfile per brick)."""
    pids = []
    for d in (Path("/var/run/gluster/vols") / volume, Path("/run/gluster/vols") / volume):
        if d.is_dir():
            for f in d.glob("*.pid"):
                pid = read_pidfile(f)
                if pid:
                    pids.append(pid)
    return sorted(set(pids))


def _delete_volume(volume: str) -> None:
    if not _volume_exists(volume):
        return
    _gluster("volume", "stop", volume, "force", check=False)
    _gluster("volume", "delete", volume, check=False)


@contextlib.contextmanager
def gluster_volume(workdir: str | os.PathLike[str], bricks: int = 4,
                   volume: str = "v0", startup_timeout: float = 60) -> Iterator[str]:
    """Start glusterd, create and mount a distribute volume; tear everything down on exit.

    Args:
        workdir: private directory for config, logs, pidfiles, bricks and the mount point;
            created if missing. ``workdir/mnt`` is the mount point.
        bricks: number of bricks (all on ``127.0.0.2``), one directory each.
        volume: volume name.
        startup_timeout: seconds to wait for glusterd and for the mount.

    Yields:
        The mount point (a string path).

    Raises:
        RuntimeError: a gluster command failed.
        TimeoutError: glusterd or the mount did not come up in time.
    """
    ensure_installed()
    work = Path(workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    mnt = work / "mnt"
    mnt.mkdir(exist_ok=True)
    vol_file = work / "glusterd.vol"
    src = Path("/etc/glusterfs/glusterd.vol").read_text()
    vol_file.write_text(private_glusterd_vol(src, HOST))

    with contextlib.ExitStack() as stack:
        # Registered first, so it runs last: whatever is left of this run's processes.
        stack.callback(_kill_leftovers, str(work))
        _start_glusterd(stack, vol_file, work / "glusterd.pid", logs, startup_timeout)
        _start_volume(stack, work, volume, bricks)
        _mount_volume(stack, volume, mnt, work / "client.pid", logs, startup_timeout)
        log.info("gluster volume %s (%d bricks) mounted on %s", volume, bricks, mnt)
        yield str(mnt)


def _start_glusterd(stack: contextlib.ExitStack, vol_file: Path, glusterd_pidfile: Path,
                    logs: Path, startup_timeout: float) -> None:
    """Start glusterd from ``vol_file`` and wait until it answers; its stop is put on
    ``stack`` before it starts."""
    glusterd_pid: list[int] = []

    def stop_glusterd() -> None:
        pid = read_pidfile(glusterd_pidfile) or (glusterd_pid[0] if glusterd_pid else None)
        if pid:
            terminate([pid])

    stack.callback(stop_glusterd)
    run([GLUSTERD, "-f", str(vol_file), "-p", str(glusterd_pidfile),
         f"--log-file={logs / 'glusterd.log'}"], timeout=60)
    wait_for(lambda: read_pidfile(glusterd_pidfile) is not None, startup_timeout,
             "glusterd pidfile")
    glusterd_pid.append(read_pidfile(glusterd_pidfile) or 0)
    wait_for(lambda: run(["gluster", "--mode=script", "volume", "list"], check=False, timeout=30).returncode == 0,
             startup_timeout, "glusterd to answer", interval=0.3)


def _start_volume(stack: contextlib.ExitStack, work: Path, volume: str, bricks: int) -> None:
    """Create ``volume`` on ``bricks`` fresh brick directories under ``work/bricks`` (after
    deleting a leftover of the same name) and start it; its deletion and the brick
    processes' end are put on ``stack`` before it is created."""
    _delete_volume(volume)  # a leftover of an earlier crashed run
    brick_dirs = []
    for i in range(1, bricks + 1):
        b = work / "bricks" / f"b{i}"
        if b.exists():
            shutil.rmtree(b)
        b.mkdir(parents=True)
        brick_dirs.append(f"{HOST}:{b}")

    def drop_volume() -> None:
        pids = _brick_pids(volume)
        _delete_volume(volume)
        for pid in pids:
            terminate([pid])

    stack.callback(drop_volume)
    _gluster("volume", "create", volume, "transport", "tcp", *brick_dirs, "force")
    _gluster("volume", "start", volume)


def _mount_volume(stack: contextlib.ExitStack, volume: str, mnt: Path, client_pidfile: Path,
                  logs: Path, startup_timeout: float) -> None:
    """Mount ``volume`` on ``mnt`` with the FUSE client and wait until it takes writes; the
    unmount and the client's end are put on ``stack`` before it mounts."""
    def stop_client() -> None:
        unmount(mnt)
        pid = read_pidfile(client_pidfile)
        if pid:
            terminate([pid])

    stack.callback(stop_client)
    run([GLUSTERFS, f"--volfile-server={HOST}", f"--volfile-id={volume}",
         f"--log-file={logs / 'client.log'}", f"--pid-file={client_pidfile}", str(mnt)],
        timeout=60)
    wait_for(lambda: is_mounted(mnt), startup_timeout, f"gluster mount on {mnt}")
    # The mount answers once the client has connected to every brick.
    wait_for(lambda: _usable(mnt), startup_timeout, "gluster mount to accept writes",
             interval=0.3)


def _usable(mnt: Path) -> bool:
    probe = mnt / f".probe-{os.getpid()}"
    try:
        probe.write_bytes(b"x")
        probe.unlink()
    except OSError:
        return False
    return True


def _kill_leftovers(work: str) -> None:
    """Kill any process of this run still alive (their command lines name ``work``)."""
    for pid in pids_with_arg(work):
        if pid_alive(pid):
            log.warning("killing leftover gluster process %d", pid)
            terminate([pid])
    time.sleep(0.1)
