"""The MPI runner: one MPI rank per trace rank, through mpi4py (``mpiexec -n N``).

Every MPI rank builds or loads the same trace (generators are seeded, so they agree), rank 0
prepares the target, each rank runs :func:`pvfs.traces.replay.engine.run_rank` on its own
records with ``MPI_Barrier`` as the barrier, and rank 0 gathers the per-rank results and
summarises them exactly as the local runner does. Start it with the ``mpiexec`` of the
``mpich`` wheel::

    mpiexec -n 4 python -m pvfs.traces replay --workload btio --procs 4 --target /scratch/x
"""

from __future__ import annotations

import os
import time
from typing import Any

from pvfs.traces.format import Trace
from pvfs.traces.replay.engine import ReplayOptions, file_digests, run_rank
from pvfs.traces.replay.targets import open_target

_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "PMIX_SIZE")


def launched_by_mpiexec() -> bool:
    """True when this process is one of several started by ``mpiexec``."""
    for var in _SIZE_VARS:
        try:
            if int(os.environ.get(var, "1")) > 1:
                return True
        except ValueError:
            continue
    return False


def comm_world() -> Any:
    """``MPI.COMM_WORLD`` (imports mpi4py, which initialises MPI).

    Raises:
        RuntimeError: when mpi4py is not installed.
    """
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise RuntimeError("the MPI runner needs mpi4py and an MPI (pip install mpich mpi4py)"
                           ) from exc
    return MPI.COMM_WORLD


def run_mpi(trace: Trace, spec: str, opts: ReplayOptions | None = None,
            comm: Any = None) -> dict[str, Any] | None:
    """Replay ``trace`` with this MPI job's ranks; the result on rank 0, None elsewhere.

    Raises:
        ValueError: when the job's size differs from the trace's number of ranks.
        RuntimeError: when preparing the target or a rank failed (on every rank).
    """
    from pvfs.traces.metrics import summarize

    opts = opts or ReplayOptions()
    comm = comm if comm is not None else comm_world()
    rank, size = comm.Get_rank(), comm.Get_size()
    if size != trace.nprocs:
        raise ValueError(f"the trace has {trace.nprocs} ranks but the MPI job has {size}")
    names = [f.name for f in trace.files]
    before, problem = None, None
    if rank == 0:
        try:
            with open_target(spec) as target:
                target.prepare(trace.files)
                before = target.counters()
        except Exception as exc:  # noqa: BLE001 - broadcast so no rank hangs
            problem = f"preparing {spec}: {exc!r}"
    problem = comm.bcast(problem, root=0)
    if problem:
        raise RuntimeError(problem)
    mine = [r for r in trace.records if r.rank == rank]
    result: dict[str, Any]
    try:
        target = open_target(spec)
    except Exception as exc:  # noqa: BLE001 - reported through the gather
        result = {"rank": rank, "fatal": f"rank {rank}: opening {spec}: {exc!r}"}
        target = None
    comm.Barrier()
    t0 = time.perf_counter()
    if target is not None:
        try:
            result = run_rank(rank, mine, names, target, comm.Barrier, opts)
        finally:
            target.close()
    else:
        # Still pass every barrier so the healthy ranks finish.
        per_sync = 2 if opts.drop_caches else 1
        for _ in range(per_sync * (1 + sum(1 for r in mine if r.op.label == "barrier"))):
            comm.Barrier()
    wall = time.perf_counter() - t0
    results = comm.gather(result, root=0)
    fatal = comm.bcast([r["fatal"] for r in results if "fatal" in r] if rank == 0 else None,
                       root=0)
    if fatal:
        raise RuntimeError("replay failed: " + "; ".join(fatal))
    if rank != 0:
        return None
    with open_target(spec) as target:
        after = target.counters()
        digests = file_digests(target, names) if opts.digest else {}
    return summarize(trace, sorted(results, key=lambda r: r["rank"]), spec=spec, wall_time=wall,
                     runner="mpi", counters_before=before, counters_after=after, digests=digests)
