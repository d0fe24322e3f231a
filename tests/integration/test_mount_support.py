"""Helpers for the mount tests: a real mount in a subprocess that is always taken down.

No tests here; ``test_mount*.py`` and ``tests/property/test_mount_model.py`` import it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Self

import pytest

MOUNT_TIMEOUT = 30.0


def fuse_available() -> bool:
    return os.path.exists("/dev/fuse") and shutil.which("fusermount3") is not None


needs_fuse = pytest.mark.skipif(not fuse_available(), reason="needs /dev/fuse and fusermount3")


class Mount:
    """``python -m pvfs.fuse --foreground`` at ``path``; ``stop()`` unmounts and reaps it."""

    def __init__(self, config_path: str, path: Path, options: str = "") -> None:
        self.config_path = config_path
        self.path = Path(path)
        self.options = options
        self.proc: subprocess.Popen | None = None
        self.log = self.path.parent / f"{self.path.name}.log"

    def start(self) -> Self:
        self.path.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "pvfs.fuse", "--config", self.config_path, str(self.path),
                "--foreground"]
        if self.options:
            argv += ["-o", self.options]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while not os.path.ismount(self.path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"mount failed: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)
        os.stat(self.path)  # answered once the session serves
        return self

    def listed(self) -> bool:
        """Whether the kernel still lists the mount (also a dead one: ``ismount`` says False
        when its daemon was killed, ENOTCONN, and the mount would leak)."""
        target = os.path.realpath(self.path).encode()
        with open("/proc/self/mounts", "rb") as f:
            return any(line.split()[1] == target for line in f if len(line.split()) > 1)

    def stop(self) -> None:
        if self.listed():
            done = subprocess.run(["fusermount3", "-u", str(self.path)], check=False,
                                  capture_output=True)
            if done.returncode != 0:
                subprocess.run(["fusermount3", "-u", "-z", str(self.path)], check=False,
                               capture_output=True)
        if self.proc is not None:
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
            self.proc = None

    def stats(self) -> dict:
        return json.loads(os.getxattr(self.path, "user.pvfs.stats"))

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_leasing(m, pool: int = 0):
    """``m`` once its lease session runs and (``pool``) the manager's pool of precreated
    numbers holds that many (until then a mount creates at the manager)."""
    import pvfs

    deadline = time.monotonic() + 10
    while not m.stats()["leases"]["valid"]:
        assert time.monotonic() < deadline, "no lease session"
        time.sleep(0.05)
    if pool:
        with pvfs.connect(m.config_path) as fs:
            while fs.meta("status")["precreated"] < pool:
                assert time.monotonic() < deadline, "the manager's pool stays empty"
                time.sleep(0.05)
    return m


def tree_equal(a: Path, b: Path) -> list[str]:
    """Differences between two trees (names, types, bytes); empty if equal."""
    diffs = []
    for root, dirs, files in os.walk(a):
        rel = Path(root).relative_to(a)
        other = b / rel
        got = sorted(os.listdir(other)) if other.is_dir() else None
        if got != sorted(dirs + files):
            diffs.append(f"{rel}: {sorted(dirs + files)} != {got}")
            continue
        for f in files:
            if (Path(root) / f).read_bytes() != (other / f).read_bytes():
                diffs.append(f"{rel / f}: bytes differ")
    return diffs
