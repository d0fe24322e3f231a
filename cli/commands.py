"""The command table of ``pvfs-admin``: every group of subcommands, statically.

A group is a ``cmd_*`` module with ``register(sub)``. To add one, import it in the block
below and list it in ``CORE`` -- one line in each, so groups added at the same time merge
line by line. ``CORE`` is the order ``--help`` lists them in. Groups of parts that may be
missing (the mount client, the trace tools) are in :func:`optional`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from pvfs.cli import (
    cmd_admin,
    cmd_cache,
    cmd_calibrate,
    cmd_check,
    cmd_cluster,
    cmd_collective,
    cmd_files,
    cmd_mount,
    cmd_ops,
    cmd_security,
    cmd_stripe,
    cmd_study,
)
from pvfs.cli.common import mount_available

Register = Callable[[argparse._SubParsersAction], None]

#: Always present, in the order ``--help`` lists them.
CORE: tuple[Register, ...] = (
    cmd_cluster.register,
    cmd_files.register,
    cmd_stripe.register,
    cmd_admin.register,
    cmd_ops.register,
    cmd_security.register,
    cmd_cache.register,
    cmd_calibrate.register,
    cmd_study.register,
    cmd_collective.register,
    cmd_check.register,
)


def optional() -> list[Register]:
    """Groups of parts that may be absent: ``mount``/``umount`` when the FUSE client can
    load, ``replay``/``trace`` when the trace tools import (slow: only asked for when the
    command line names no core subcommand)."""
    out: list[Register] = []
    if mount_available():
        out.append(cmd_mount.register)
    try:
        from pvfs.traces import cli as traces_cli
    except ImportError:
        return out
    out.append(traces_cli.add_subcommands)
    return out
