"""Mounting and unmounting: the mount daemon's life cycle, like mount(8).

``mount()`` forks; the child mounts, serves and reports "ready" through a pipe once a
``stat`` of the mount point has been answered by the new file system, and only then does the
parent return (``foreground=True`` serves in the calling process). SIGTERM or SIGINT unmounts
cleanly: the session ends, dirty blocks are written back, the kernel mount goes.

Each running mount keeps a status file ``<status dir>/<name>.json`` (pid, mount point,
config, options, cache counters; rewritten every ``STATUS_PERIOD`` seconds, removed at exit);
:func:`list_mounts` reads them (``pvfs-admin stats``, ``umount``, ``down``).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gc
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import trio

from pvfs import config as cfgmod
from pvfs.client.aclient import AsyncClient

from .kernel import Front, make_front
from .operations import Operations
from .options import MountOptions

log = logging.getLogger("pvfs.fuse")

__all__ = ["list_mounts", "mount", "serve", "status_dir", "unmount"]

STATUS_PERIOD = 1.0
READY_TIMEOUT = 60.0
EXIT_TIMEOUT = 30.0


def status_dir() -> Path:
    env = os.environ.get("PVFS_MOUNT_STATUS_DIR")
    if env:
        return Path(env)
    return Path("/run/pvfs/mounts") if os.geteuid() == 0 else Path(f"/tmp/pvfs-{os.getuid()}/mounts")


def _status_path(mountpoint: str) -> Path:
    name = mountpoint.strip("/").replace("/", "_") or "root"
    return status_dir() / f"{name}.json"


def list_mounts() -> list[dict]:
    """Status of every running pvfs mount of this host (dead entries are skipped)."""
    out = []
    for p in sorted(status_dir().glob("*.json")):
        try:
            d = json.loads(p.read_text())
            os.kill(int(d["pid"]), 0)
        except (OSError, ValueError, KeyError):
            continue
        out.append(d)
    return out


def mount_device(mountpoint: str) -> str | None:
    """``major:minor`` of the mount at ``mountpoint`` from /proc/self/mountinfo.

    ``mountpoint`` must already be absolute and resolved (``serve`` resolves it before the
    mount exists): this runs on the thread that serves the mount, and any system call on
    the mount there (``stat``, ``realpath``'s ``lstat``) waits for an answer only that
    thread could give -- a deadlock (issue 9)."""
    want = mountpoint
    found = None
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as fh:
        for line in fh:
            parts = line.split()
            mp = parts[4].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
            if mp == want and " - fuse" in line:
                found = parts[2]
    return found


def set_read_ahead(mountpoint: str, kib: int) -> bool:
    dev = mount_device(mountpoint)
    if dev is None or kib <= 0:
        return False
    try:
        Path(f"/sys/class/bdi/{dev}/read_ahead_kb").write_text(f"{kib}\n")
    except OSError as exc:
        log.info("cannot set read_ahead_kb of %s: %s", dev, exc)
        return False
    return True


# ---------------------------------------------------------------------- the daemon
async def _amain(config: cfgmod.Config, mountpoint: str, opts: MountOptions,
                 ready_fd: int | None) -> None:
    """Assemble the mount part by part; each part's teardown is registered on the exit stack
    as soon as the part exists, so whatever fails (or however the mount ends) undoes exactly
    what was built, last first: unmount, write back the cache, stop the tasks, close the
    coherence and global-cache connections, remove the status file, close the client."""
    async with contextlib.AsyncExitStack() as stack:
        client = await AsyncClient.connect(config)
        stack.callback(client.close)
        status = _status_path(mountpoint)
        status.parent.mkdir(parents=True, exist_ok=True)
        stack.callback(lambda: status.unlink(missing_ok=True))
        ops = Operations(client, opts)
        if ops.gbackend is not None:
            stack.callback(ops.gbackend.close)
            await ops.gbackend.identify()  # a [gcache] address of another daemon fails here
        if ops.coherence is not None:
            stack.callback(ops.coherence.close)
        nursery = await stack.enter_async_context(trio.open_nursery())
        stack.callback(nursery.cancel_scope.cancel)
        await ops.cache.start(nursery)
        await nursery.start(ops.files.closes.run)
        stack.push_async_callback(_tell_closes, ops.files.closes)  # after the write-back
        if ops.ahead is not None:
            await nursery.start(ops.ahead.run)
            stack.push_async_callback(_send_creates, ops.ahead)  # before the closes
        if ops.delegations is not None:
            await nursery.start(ops.delegations.run)
        stack.push_async_callback(_write_back, ops.cache, ops.gbackend, ops.delegations)
        if ops.leases is not None:
            await nursery.start(ops.leases.session.run)
        if ops.coherence is not None:
            await nursery.start(ops.coherence.run)
            if ops.gbackend is not None:
                from .gcachewire import global_callbacks

                await nursery.start(global_callbacks(ops).run)
        front = make_front(opts.frontend)  # pyfuse3, or the C front end (kernel.py)
        front.init(ops, mountpoint, opts.fuse_options())
        stack.callback(front.close)
        ops.view.kernel = front.kernel
        session = _Session()
        nursery.start_soon(_signals, session, front)
        nursery.start_soon(_announce, ops, mountpoint, opts, ready_fd)
        nursery.start_soon(_status_writer, ops, status, mountpoint, config, opts)
        await front.main(opts.max_tasks)
    log.info("unmounted %s", mountpoint)


async def _write_back(cache, gbackend=None, delegations=None) -> None:
    """The cache's dirty blocks to the I/O daemons before exit, bounded by EXIT_TIMEOUT: with
    global caches, through them and then their write-back of what this mount wrote (what an
    unmounted file system holds must be on the I/O daemons, whatever becomes of the global
    caches next); the explicit times delegated files' data carry, after them."""
    with trio.move_on_after(EXIT_TIMEOUT, shield=True) as scope:
        try:
            await cache.aclose()
            if delegations is not None:
                await delegations.settle_all()
            if gbackend is not None:
                for ino in list(gbackend.journal):
                    await gbackend.flush(ino)
        except OSError as exc:
            log.error("writing back dirty blocks at unmount: %s", exc)
    if scope.cancelled_caught:
        log.error("write-back at unmount did not finish in %g s", EXIT_TIMEOUT)


async def _send_creates(ahead) -> None:
    """The creates made ahead and not yet sent, bounded by EXIT_TIMEOUT."""
    with trio.move_on_after(EXIT_TIMEOUT, shield=True):
        await ahead.send_pending()


async def _tell_closes(closes) -> None:
    """The closes still queued to the manager, bounded by EXIT_TIMEOUT."""
    with trio.move_on_after(EXIT_TIMEOUT, shield=True):
        await closes.send()


class _Session:
    terminated = False


async def _signals(session: _Session, front: Front) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as sigs:
        async for sig in sigs:
            log.info("signal %d: unmounting", sig)
            session.terminated = True
            front.terminate()


async def _announce(ops: Operations, mountpoint: str, opts: MountOptions,
                    ready_fd: int | None) -> None:
    """Wait until the kernel's requests are served, tune read-ahead, tell the parent.

    The ``stat`` of the mount runs in a worker thread (this thread answers it); nothing
    here touches the mount on the serving thread."""
    await trio.to_thread.run_sync(os.stat, mountpoint)
    ops.view.ready = True
    set_read_ahead(mountpoint, opts.read_ahead_kb)
    log.info("mounted %s (coherence=%s, cache %d x %d B%s)", mountpoint, opts.coherence,
             opts.cache_size // opts.block_size, opts.block_size,
             ", direct_io" if opts.direct_io else "")
    if ready_fd is not None:
        os.write(ready_fd, b"ok\n")
        os.close(ready_fd)


async def _status_writer(ops: Operations, path: Path, mountpoint: str, config: cfgmod.Config,
                         opts: MountOptions) -> None:
    base = {"pid": os.getpid(), "mountpoint": mountpoint, "config": config.path,
            "options": {k: v for k, v in dataclasses.asdict(opts).items() if k != "extra_fuse"}}
    tmp = path.with_suffix(".tmp")
    while True:
        data = dict(base, time=time.time(), stats=ops.controls.stats())
        try:
            tmp.write_text(json.dumps(data, sort_keys=True))
            os.replace(tmp, path)
        except OSError as exc:
            log.debug("status file %s: %s", path, exc)
        await trio.sleep(STATUS_PERIOD)


def _setup_logging(opts: MountOptions, stream: bool) -> None:
    handler: logging.Handler
    if opts.log:
        handler = logging.FileHandler(opts.log)
    elif stream:
        handler = logging.StreamHandler(sys.stderr)
    else:
        handler = logging.NullHandler()
    handler.setFormatter(logging.Formatter(
        "%(asctime)s pvfs-mount[%(process)d] %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if opts.debug else logging.INFO)


def serve(config: cfgmod.Config, mountpoint: str, opts: MountOptions,
          ready_fd: int | None = None) -> int:
    """Mount and serve in this process until unmounted; returns an exit status.

    The mount point is resolved here, before the mount exists: afterwards the serving
    thread must never make a system call on its own mount."""
    mountpoint = os.path.realpath(mountpoint)
    _tune_gc()
    _tune_malloc()
    try:
        trio.run(_amain, config, mountpoint, opts, ready_fd)
    except KeyboardInterrupt:
        return 0
    except Exception as exc:  # reported to the waiting parent, then fail
        log.exception("mount of %s failed", mountpoint)
        if ready_fd is not None:
            with contextlib.suppress(OSError):
                os.write(ready_fd, f"error: {exc}\n".encode())
        return 1
    return 0


# The collector's young-generation threshold in the mount (Python's default 700): every
# cached block is a few long-lived objects, and IOR hard's writes spent 5-14 % of the mount's
# thread in collections; at 50,000 they are rare and still bound the cyclic garbage.
GC_THRESHOLDS = (50_000, 20, 10)


def _tune_gc() -> None:
    """The modules and objects made so far never collected (``gc.freeze``); young
    collections at ``GC_THRESHOLDS``."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


# glibc's malloc in the mount: requests up to MMAP_THRESHOLD come from the heap (default: a
# threshold that starts at 128 KiB), and the heap keeps up to TRIM_THRESHOLD free at its top
# (default 128 KiB). Each 1 MiB request's buffers were fresh pages otherwise, mapped and
# faulted in and given back per request; with these, fio's 1 MiB sequential write went
# 1.0-1.1 -> 1.26-1.35 GiB/s (docs/benchmarks.md, forty-first session). Live memory, and so
# the peak RSS, is unchanged: freed memory is kept for reuse, not returned at once.
MALLOC_MMAP_THRESHOLD = 32 << 20
MALLOC_TRIM_THRESHOLD = 128 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)


def _tune_malloc() -> bool:
    """Set the mount's malloc thresholds (above); False where the C library has no
    ``mallopt`` or refuses (not glibc): the mount runs as before."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD)) and \
        bool(mallopt(_M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD))


def _effective_config(config_path: str | None, opts: MountOptions) -> cfgmod.Config:
    cfg = cfgmod.load(config_path)
    return dataclasses.replace(cfg, request_timeout=min(cfg.request_timeout, opts.timeout),
                               connect_timeout=min(cfg.connect_timeout, opts.timeout))


def mount(config_path: str | None, mountpoint: str, opts: MountOptions,
          foreground: bool = False) -> int:
    """Mount the file system of ``config_path`` at ``mountpoint``.

    Returns once the mount answers (0) or failed (1, the reason on stderr); with
    ``foreground`` it serves until unmounted.

    Raises:
        ValueError: the mount point is not an empty-enough directory, or is mounted already.
    """
    mp = os.path.realpath(mountpoint)
    if not os.path.isdir(mp):
        raise ValueError(f"{mountpoint} is not a directory")
    if os.path.ismount(mp):
        raise ValueError(f"{mountpoint} is already a mount point")
    cfg = _effective_config(config_path, opts)
    if foreground:
        _setup_logging(opts, stream=True)
        return serve(cfg, mp, opts)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the mount daemon
        os.close(r)
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        _setup_logging(opts, stream=False)
        code = 1
        try:
            code = serve(cfg, mp, opts, ready_fd=w)
        finally:
            os._exit(code)
    os.close(w)
    msg = b""
    deadline = time.monotonic() + READY_TIMEOUT
    with os.fdopen(r, "rb", buffering=0) as fh:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fh], [], [], 0.5)
            if ready:
                chunk = fh.read(4096)
                if not chunk:
                    break
                msg += chunk
                if msg.endswith(b"\n"):
                    break
    if msg.startswith(b"ok"):
        return 0
    if not msg and time.monotonic() >= deadline:
        msg = f"the mount did not answer within {READY_TIMEOUT:g} s".encode()
    elif not msg:
        msg = b"the mount daemon exited before the mount was ready"
    print(f"pvfs mount: {mp}: {msg.decode(errors='replace').strip()}", file=sys.stderr)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
    return 1


def unmount(mountpoint: str, timeout: float = 20.0) -> None:
    """``fusermount3 -u``; lazily (``-z``) if that fails; then wait for the daemon to exit.

    Raises:
        OSError: nothing is mounted there, or even a lazy unmount failed.
    """
    mp = os.path.realpath(mountpoint)
    pid = next((int(d["pid"]) for d in list_mounts() if d.get("mountpoint") == mp), None)
    if not os.path.ismount(mp):
        if pid is not None:  # kernel mount gone, daemon still there: stop it
            os.kill(pid, signal.SIGTERM)
            return
        raise OSError(22, f"{mountpoint} is not mounted")
    done = subprocess.run(["fusermount3", "-u", mp], check=False, capture_output=True,
                          text=True)
    if done.returncode != 0:
        lazy = subprocess.run(["fusermount3", "-u", "-z", mp], check=False, capture_output=True,
                          text=True)
        if lazy.returncode != 0:
            raise OSError(16, (lazy.stderr or done.stderr).strip() or "fusermount3 failed")
    if pid is None:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGTERM)
