"""pvfs.traces: trace format, importers, workload generators, replay engine, metrics, plots.

SPEC §7. The pieces, each in its own module:

- :mod:`pvfs.traces.format` — the versioned trace format (text and msgpack forms);
- :mod:`pvfs.traces.importers` — MAMBO/UMD, Darshan DXT text and strace importers;
- :mod:`pvfs.traces.generators` — the thesis, LU, Cholesky, DB2, Titan, Mining, Pgrep, BTIO,
  FLASH-IO and S3D-IO generators;
- :mod:`pvfs.traces.replay` — the replay engine (local processes or MPI ranks) and targets;
- :mod:`pvfs.traces.metrics`, :mod:`pvfs.traces.stats`, :mod:`pvfs.traces.plot` — results;
- :mod:`pvfs.traces.cli` — the ``replay`` and ``trace`` subcommands of ``pvfs-admin``.
"""

from pvfs.traces.format import FORMAT_VERSION as FORMAT_VERSION
from pvfs.traces.format import FileEntry as FileEntry
from pvfs.traces.format import Flag as Flag
from pvfs.traces.format import Op as Op
from pvfs.traces.format import Record as Record
from pvfs.traces.format import Trace as Trace
from pvfs.traces.format import TraceFormatError as TraceFormatError
from pvfs.traces.format import load as load
from pvfs.traces.format import save as save
from pvfs.traces.generators import generate as generate

__all__ = [
           "FORMAT_VERSION",
           "FileEntry",
           "Flag",
           "Op",
           "Record",
           "Trace",
           "TraceFormatError",
           "generate",
           "load",
           "save",
]
