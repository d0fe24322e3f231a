"""Moved to :mod:`pvfs.protocol.rpc` (both daemons use it); kept for work still in flight."""

from pvfs.protocol.rpc import Channel, call_many

__all__ = ["Channel", "call_many"]
