"""Replay engine and targets (SPEC §7): local processes or MPI ranks, any directory or pvfs."""

from pvfs.traces.replay.engine import ReplayOptions as ReplayOptions
from pvfs.traces.replay.engine import run_local as run_local
from pvfs.traces.replay.engine import run_rank as run_rank
from pvfs.traces.replay.targets import LocalTarget as LocalTarget
from pvfs.traces.replay.targets import PvfsTarget as PvfsTarget
from pvfs.traces.replay.targets import Target as Target
from pvfs.traces.replay.targets import open_target as open_target

__all__ = ["LocalTarget", "PvfsTarget", "ReplayOptions", "Target", "open_target", "run_local",
           "run_rank"]
