"""A private MooseFS (master + chunkservers + mfsmount) for side-by-side benchmarks.

::

    from pvfs.bench.peers.moosefs import moosefs_mount
    with moosefs_mount("/tmp/mfs", chunkservers=1) as mnt:
        ...  # mnt is a FUSE mount with goal 1

Follows ``shared/PEERS.md``: the chunkserver refuses a master on any 127/8 address, so the
master, the chunkservers and mfsmount run in a private network namespace (bound on the file
``WORKDIR/netns``) whose only interface is ``lo`` carrying the documentation address
``192.0.2.10``; nothing leaves the namespace. The FUSE mount itself is visible from the
normal namespace. Chunkserver ``i`` listens on port ``9422 + i`` with its own data directory.

On exit — also after any failure part way — the mount is unmounted, the chunkservers and the
master stopped (then killed by pid if they linger) and the namespace file unmounted.
"""

from __future__ import annotations

import contextlib
import logging
import os
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
from pvfs.procs import pid_alive, terminate

log = logging.getLogger("bench.moosefs")

ADDR = "192.0.2.10"
MATOML_PORT = 9419
MATOCS_PORT = 9420
MATOCL_PORT = 9421
CS_BASE_PORT = 9422
PACKAGES = ["moosefs-master", "moosefs-chunkserver", "moosefs-client", "moosefs-cli"]
EMPTY_METADATA = "/var/lib/mfs/metadata.mfs.empty"


def ensure_installed() -> None:
    """apt-get install the MooseFS master, chunkserver, client and CLI unless present."""
    ensure_apt(PACKAGES, ["mfsmaster", "mfschunkserver", "mfsmount", "mfssetgoal"])


def _cfg(values: dict[str, object]) -> str:
    return "".join(f"{k} = {v}\n" for k, v in values.items())


def master_config(data: Path, exports: Path, topology: Path, addr: str = ADDR) -> str:
    """``mfsmaster.cfg`` for a master listening on ``addr`` and running as root."""
    return _cfg({
        "WORKING_USER": "root",
        "WORKING_GROUP": "root",
        "SYSLOG_IDENT": "mfsmaster-bench",
        "DATA_PATH": data,
        "EXPORTS_FILENAME": exports,
        "TOPOLOGY_FILENAME": topology,
        "MATOML_LISTEN_HOST": addr,
        "MATOML_LISTEN_PORT": MATOML_PORT,
        "MATOCS_LISTEN_HOST": addr,
        "MATOCS_LISTEN_PORT": MATOCS_PORT,
        "MATOCL_LISTEN_HOST": addr,
        "MATOCL_LISTEN_PORT": MATOCL_PORT,
    })


def chunkserver_config(data: Path, hdd_cfg: Path, port: int, addr: str = ADDR) -> str:
    """``mfschunkserver.cfg`` for a chunkserver on ``addr:port`` talking to the master."""
    return _cfg({
        "WORKING_USER": "root",
        "WORKING_GROUP": "root",
        "SYSLOG_IDENT": f"mfschunkserver-bench-{port}",
        "DATA_PATH": data,
        "HDD_CONF_FILENAME": hdd_cfg,
        "HDD_LEAVE_SPACE_DEFAULT": "1GiB",
        "BIND_HOST": addr,
        "MASTER_HOST": addr,
        "MASTER_PORT": MATOCS_PORT,
        "CSSERV_LISTEN_HOST": addr,
        "CSSERV_LISTEN_PORT": port,
    })


def _ns(netns: Path, *cmd: str) -> list[str]:
    return ["nsenter", f"--net={netns}", *cmd]


def _lock_pid(data: Path, prefix: str) -> int | None:
    """The PID in a MooseFS daemon's lock file (``.mfsmaster.lock`` and the like)."""
    for f in data.glob(f".{prefix}*.lock"):
        try:
            text = f.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            return int(text)
    return None


@contextlib.contextmanager
def moosefs_mount(workdir: str | os.PathLike[str], chunkservers: int = 1,
                  goal: int = 1, startup_timeout: float = 60) -> Iterator[str]:
    """Start a MooseFS master, chunkservers and a mount; tear everything down on exit.

    Args:
        workdir: private directory for the namespace file, configs, data and the mount
            point (``workdir/mnt``); created if missing.
        chunkservers: number of chunkservers, each with one data directory.
        goal: replication goal set on the root (``mfssetgoal -r``).
        startup_timeout: seconds to wait for the chunkservers to register and the mount.

    Yields:
        The mount point (a string path).

    Raises:
        RuntimeError: a MooseFS command failed.
        TimeoutError: a part did not come up in time.
    """
    ensure_installed()
    work = Path(workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    netns = work / "netns"
    mnt = work / "mnt"
    mnt.mkdir(exist_ok=True)
    mdata, master_cfg = _write_master_files(work)

    with contextlib.ExitStack() as stack:
        stack.callback(_kill_leftovers, str(work))
        _make_netns(stack, netns)
        stack.callback(_stop_daemon, netns, "mfsmaster", master_cfg, mdata, "mfsmaster")
        run(_ns(netns, "mfsmaster", "-c", str(master_cfg), "start"), timeout=120)
        _start_chunkservers(stack, netns, work, chunkservers, startup_timeout)
        _mount(stack, netns, mnt, goal, startup_timeout)
        log.info("moosefs (%d chunkserver(s), goal %d) mounted on %s", chunkservers, goal, mnt)
        yield str(mnt)


def _write_master_files(work: Path) -> tuple[Path, Path]:
    """The master's fresh data directory (``work/master``, holding empty metadata), its
    exports, topology and ``mfsmaster.cfg``; returns the data directory and the config."""
    mdata = work / "master"
    if mdata.exists():
        shutil.rmtree(mdata)
    mdata.mkdir()
    exports = work / "mfsexports.cfg"
    exports.write_text(f"{ADDR} / rw,alldirs,admin,maproot=0:0\n")
    topology = work / "mfstopology.cfg"
    topology.write_text("")
    master_cfg = work / "mfsmaster.cfg"
    master_cfg.write_text(master_config(mdata, exports, topology))
    shutil.copyfile(EMPTY_METADATA, mdata / "metadata.mfs")
    return mdata, master_cfg


def _make_netns(stack: contextlib.ExitStack, netns: Path) -> None:
    """The network namespace, bound on the file ``netns`` so every nsenter joins the same
    one, with ``lo`` up carrying ``ADDR``; its unmount is put on ``stack`` before it is
    made."""
    def drop_netns() -> None:
        if is_mounted(netns):
            run(["umount", str(netns)], check=False)
        if is_mounted(netns):
            run(["umount", "-l", str(netns)], check=False)

    stack.callback(drop_netns)
    netns.touch()
    run(["unshare", f"--net={netns}", "true"])
    run(_ns(netns, "sh", "-c", f"ip link set lo up && ip addr add {ADDR}/32 dev lo"))


def _stop_daemon(netns: Path, tool: str, cfg: Path, data: Path, prefix: str) -> None:
    """Stop a MooseFS daemon with ``TOOL -c CFG stop``, then end it by the PID its lock file
    held before."""
    pid = _lock_pid(data, prefix)
    run(_ns(netns, tool, "-c", str(cfg), "stop"), check=False, timeout=120)
    if pid:
        terminate([pid])


def _start_chunkservers(stack: contextlib.ExitStack, netns: Path, work: Path,
                        chunkservers: int, startup_timeout: float) -> None:
    """Start ``chunkservers`` chunkservers, each with a fresh data directory ``work/csI`` and
    port ``CS_BASE_PORT + I`` (each one's stop put on ``stack`` before it starts), and wait
    until the master lists them all."""
    for i in range(chunkservers):
        cdata = work / f"cs{i}"
        if cdata.exists():
            shutil.rmtree(cdata)
        (cdata / "hdd").mkdir(parents=True)
        hdd_cfg = cdata / "mfshdd.cfg"
        hdd_cfg.write_text(f"{cdata / 'hdd'}\n")
        cs_cfg = cdata / "mfschunkserver.cfg"
        cs_cfg.write_text(chunkserver_config(cdata, hdd_cfg, CS_BASE_PORT + i))
        stack.callback(_stop_daemon, netns, "mfschunkserver", cs_cfg, cdata, "mfschunkserver")
        run(_ns(netns, "mfschunkserver", "-c", str(cs_cfg), "start"), timeout=120)

    wait_for(lambda: _registered_chunkservers(netns) >= chunkservers, startup_timeout,
             f"{chunkservers} chunkserver(s) to register", interval=0.5)


def _mount(stack: contextlib.ExitStack, netns: Path, mnt: Path, goal: int,
           startup_timeout: float) -> None:
    """mfsmount on ``mnt`` (its unmount put on ``stack`` first), the goal set on the root,
    and a wait until the mount takes writes."""
    stack.callback(unmount, mnt)
    run(_ns(netns, "mfsmount", str(mnt), "-H", ADDR, "-P", str(MATOCL_PORT)), timeout=60)
    wait_for(lambda: is_mounted(mnt), startup_timeout, f"mfsmount on {mnt}")
    run(_ns(netns, "mfssetgoal", "-r", str(goal), str(mnt)), timeout=60)
    wait_for(lambda: _usable(mnt), startup_timeout, "moosefs mount to accept writes",
             interval=0.5)


def _registered_chunkservers(netns: Path) -> int:
    """Chunkservers the master lists as connected (``mfscli -SCS``), 0 on any failure."""
    proc = run(_ns(netns, "mfscli", "-H", ADDR, "-P", str(MATOCL_PORT), "-SCS", "-p"),
               check=False, timeout=30, quiet=True)
    if proc.returncode != 0:
        return 0
    return sum(1 for line in proc.stdout.splitlines()
               if line.startswith("chunk servers") and ADDR in line)


def _usable(mnt: Path) -> bool:
    probe = mnt / f".probe-{os.getpid()}"
    try:
        with open(probe, "wb") as f:
            f.write(b"x" * 65536)
            f.flush()
            os.fsync(f.fileno())
        probe.unlink()
    except OSError:
        return False
    return True


def _kill_leftovers(work: str) -> None:
    """Kill any process of this run still alive (their command lines name ``work``)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        pids = [p for p in pids_with_arg(work) if pid_alive(p)]
        if not pids:
            return
        time.sleep(0.2)
    for pid in pids_with_arg(work):
        if pid_alive(pid):
            log.warning("killing leftover moosefs process %d", pid)
            terminate([pid])
