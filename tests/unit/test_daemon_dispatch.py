"""Each daemon serves its operations from one dispatch table that covers its schema."""

from __future__ import annotations

import inspect

from pvfs.daemons.iod.control import ControlRequests
from pvfs.daemons.iod.data import DataRequests
from pvfs.daemons.iod.server import INLINE, STREAM, TASK, IodServer
from pvfs.daemons.iod.smallwrites import SmallWrites
from pvfs.protocol.schema import IOD_SCHEMAS

# The classes of the server's parts its dispatch table names (``control.op_ping``).
IOD_PARTS = {"": IodServer, "control": ControlRequests, "data": DataRequests,
             "smallwrites": SmallWrites}


def test_iod_table_covers_the_schema_exactly() -> None:
    assert set(IodServer.OPS) == set(IOD_SCHEMAS)


def test_iod_handlers_match_their_kind() -> None:
    for op, (kind, name) in IodServer.OPS.items():
        part, _, attr = name.rpartition(".")
        method = getattr(IOD_PARTS[part], attr)
        params = list(inspect.signature(method).parameters)
        if kind == TASK:
            # may block on the disk or wait on other daemons: never on the trio thread itself
            assert inspect.iscoroutinefunction(method), op
            assert params == ["self", "f"], op
        elif kind == INLINE:
            assert not inspect.iscoroutinefunction(method), op
            assert params == ["self", "f"], op
        else:
            assert kind == STREAM, op
            assert params == ["self", "cid", "f", "bulk_len"], op


def test_iod_slow_file_calls_are_tasks() -> None:
    # These touch the disk in ways that can take long (freeing blocks, stat of many files,
    # fsync, a directory scan): they must not run on the daemon's trio thread.
    for op in ("truncate", "unlink", "sizes", "fsync", "list", "statfs", "drop_cache"):
        assert IodServer.OPS[op][0] == TASK, op


def test_mgr_table_covers_the_schema() -> None:
    from pvfs.daemons.mgr.server import MgrServer
    from pvfs.protocol.schema import MGR_SCHEMAS

    for op in MGR_SCHEMAS:
        if op in MgrServer.CONNECTION_OPS:  # takes the connection over in dispatch
            continue
        method = getattr(MgrServer, f"op_{op}", None)
        assert method is not None and inspect.iscoroutinefunction(method), op
        assert list(inspect.signature(method).parameters)[:3] == ["self", "f", "cred"], op
