"""Fault steps: kill -9 a daemon of this host and start it again, between two steps.

Only daemons this host runs from the config's ``run_dir`` (pidfiles written by
``pvfs-admin up``, i.e. :mod:`pvfs.cluster.launch`) are touched, and every daemon of the config
must be on this host: a checker never kills what it cannot restart itself.
"""

from __future__ import annotations

import os
import signal
import time

from pvfs.cluster.launch import daemons_of, up
from pvfs.config import Config
from pvfs.procs import pid_alive, read_pidfile

KILL_WAIT = 10.0


class FaultSetupError(RuntimeError):
    """``--faults`` cannot run against this config (daemons elsewhere or not ours)."""


class Faults:
    """Kills and restarts the config's daemons; counts what it did."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        every = daemons_of(cfg, local_only=False)
        local = daemons_of(cfg)
        if len(local) != len(every):
            raise FaultSetupError("--faults needs every daemon of the config on this host")
        missing = [d.name for d in local if read_pidfile(d.pidfile) is None]
        if missing:
            raise FaultSetupError(
                f"--faults restarts daemons it can find by pidfile; not running here: "
                f"{', '.join(missing)} (start them with `pvfs-admin up`)")
        self.names = [d.name for d in local]
        self.done: list[str] = []

    def kill_and_restart(self, which: int) -> str:
        """SIGKILL daemon number ``which`` (modulo their count), wait, start it again."""
        d = daemons_of(self.cfg)[which % len(self.names)]
        pid = read_pidfile(d.pidfile)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + KILL_WAIT
            while pid_alive(pid) and time.monotonic() < deadline:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                time.sleep(0.02)
        up(self.cfg)  # starts what is not running and waits until it answers
        self.done.append(d.name)
        return d.name
