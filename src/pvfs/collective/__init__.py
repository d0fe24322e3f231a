"""Collective client caching for MPI programs (SPEC §8).

A file opened by every rank of a communicator gets a group cache in the line of DAChe
(Coloma et al.) and the MPI-IO caching layer (Liao et al., SC 2007): one cached copy of each
page in the group, page metadata on rank ``page mod n``, page locks taken in increasing order,
LRU eviction with write-back and a two-phase flush at close; or, for write-only checkpoints,
two-stage write-behind. Usage, under ``mpiexec -n N python prog.py``::

    from mpi4py import MPI
    import pvfs.collective

    f = pvfs.collective.open(MPI.COMM_WORLD, "/srv/pvfs/pvfs.toml", "/out", "w+",
                             coordination="rma")
    f.write_at(rank * 4096, data)
    f.sync()
    f.read_at(0, 4096)
    f.close()

``docs/collective.md`` is the guide; the names below are the whole public surface.
"""

from pvfs.collective._file import COORDINATIONS as COORDINATIONS
from pvfs.collective._file import METHODS as METHODS
from pvfs.collective._file import CollectiveFile as CollectiveFile
from pvfs.collective._file import LockServerFile as LockServerFile
from pvfs.collective._file import open as open
from pvfs.collective._file import parse_amode as parse_amode
from pvfs.collective._wait import CollectiveTimeout as CollectiveTimeout

__all__ = ["COORDINATIONS", "METHODS", "CollectiveFile", "CollectiveTimeout", "LockServerFile",
           "open", "parse_amode"]
