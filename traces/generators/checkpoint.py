"""Checkpoint patterns of the MPI-IO caching paper (Liao et al., SC 2007, §5).

BTIO, FLASH-IO and S3D-IO write big shared files whose per-process pieces are many small
or medium non-contiguous regions; their union tiles each array exactly once. The generators
write what ROMIO hands to the file system for the *independent* form of each benchmark, which
is the form the paper's write-behind method targets.
"""

from __future__ import annotations

import math
import random
from typing import Any

from pvfs.traces.format import Flag, Trace
from pvfs.traces.generators._build import TraceBuilder, resolve_params, split_even

BTIO_DEFAULTS: dict[str, Any] = {
    "n": 12,  # grid points per side (class S 12, W 24, A 64, B 102, C 162)
    "dumps": 40,  # solution arrays appended to the file
    "readback": False,  # read the file back as BTIO's verification step does
}
BTIO_CELL = 5 * 8  # five double-precision solution components per grid point


def btio_cells(rank: int, q: int) -> list[tuple[int, int, int]]:
    """Cell coordinates ``(x, y, z)`` of ``rank`` in the q×q×q multi-partition.

    Rank ``row*q + col`` owns one cell in every z-layer, shifted along a diagonal: for each
    layer the map (row, col) → (x, y) is a bijection, so the cells tile the grid.
    """
    row, col = divmod(rank, q)
    return [((col - c) % q, (row + c) % q, c) for c in range(q)]


def btio(nprocs: int, params: dict[str, Any] | None = None, seed: int = 0) -> Trace:
    """BTIO (NPB 2.4 I/O): block-tridiagonal 4D subarrays, 40 arrays appended, small writes.

    Models the BTIO benchmark of Liao et al. §5.1: a square number of processes each own
    √P cells of an n³ grid (multi-partition); each dump appends the n³×5 array of doubles in
    canonical Fortran order, every process writing one contiguous run per grid row of each of
    its cells (small independent writes).

    Raises:
        ValueError: when the number of processes is not a square or exceeds n².
    """
    p = resolve_params(BTIO_DEFAULTS, params)
    q = math.isqrt(nprocs)
    n = p["n"]
    if q * q != nprocs:
        raise ValueError(f"btio needs a square number of processes, not {nprocs}")
    if q > n:
        raise ValueError("btio needs n >= sqrt(procs)")
    parts = split_even(n, q)
    array = n * n * n * BTIO_CELL
    b = TraceBuilder(nprocs, "btio", p, seed)
    fid = b.file("btio/out")
    b.open_all(fid)
    runs: list[list[tuple[int, int]]] = []
    for rank in range(nprocs):
        mine = []
        for cx, cy, cz in btio_cells(rank, q):
            (x0, nx), (y0, ny), (z0, nz) = parts[cx], parts[cy], parts[cz]
            for z in range(z0, z0 + nz):
                for y in range(y0, y0 + ny):
                    mine.append((((z * n + y) * n + x0) * BTIO_CELL, nx * BTIO_CELL))
        runs.append(mine)
    for d in range(p["dumps"]):
        b.barrier(f"btio dump {d}")
        for rank in range(nprocs):
            for off, length in runs[rank]:
                b.write(rank, fid, d * array + off, length)
    if p["readback"]:
        for d in range(p["dumps"]):
            b.barrier(f"btio read {d}")
            for rank in range(nprocs):
                for off, length in runs[rank]:
                    b.read(rank, fid, d * array + off, length)
    b.barrier("teardown")
    b.close_all(fid)
    return b.build()


FLASH_DEFAULTS: dict[str, Any] = {
    "blocks": 80,  # blocks per process (about)
    "vary": 4,  # block counts vary by up to this much (slightly unbalanced load)
    "nxb": 16,  # interior cells per block side
    "nvars": 24,  # checkpoint variables
    "plotvars": 4,  # variables in each plot file
    "header": 2048,  # bytes of HDF5 metadata written by rank 0 at the start of each file
}


def flash(nprocs: int, params: dict[str, Any] | None = None, seed: int = 0) -> Trace:
    """FLASH-IO: 24 variables of ~80 blocks of 16³ cells per process, contiguous appends.

    Models the FLASH I/O benchmark of Liao et al. §5.2: the checkpoint file holds, after a
    metadata header written by rank 0, one dataset per variable; for each variable every
    process appends the interiors of all its blocks (guard cells stripped, doubles) right
    after the previous rank's piece. The two plot files hold ``plotvars`` single-precision
    variables of cell-centred (nxb³) and corner (nxb+1)³ data, written the same way.
    """
    p = resolve_params(FLASH_DEFAULTS, params)
    rng = random.Random(seed)
    counts = [max(1, p["blocks"] + rng.randint(-p["vary"], p["vary"])) for _ in range(nprocs)]
    prefix = [sum(counts[:r]) for r in range(nprocs)]
    total = sum(counts)
    b = TraceBuilder(nprocs, "flash", p, seed)
    files = [
        ("checkpoint", "flash/chk", p["nvars"], p["nxb"] ** 3 * 8),
        ("plot centered", "flash/plt_cnt", p["plotvars"], p["nxb"] ** 3 * 4),
        ("plot corner", "flash/plt_crn", p["plotvars"], (p["nxb"] + 1) ** 3 * 4),
    ]
    for label, name, nvars, block_bytes in files:
        fid = b.file(name)
        b.barrier(f"flash {label} open")
        b.open_all(fid)
        if p["header"]:
            b.write(0, fid, 0, p["header"])
        for v in range(nvars):
            b.barrier(f"flash {label} var {v}")
            base = p["header"] + v * total * block_bytes
            for r in range(nprocs):
                b.write(r, fid, base + prefix[r] * block_bytes, counts[r] * block_bytes)
        b.barrier(f"flash {label} close")
        b.close_all(fid)
    return b.build()


S3D_DEFAULTS: dict[str, Any] = {
    "nx": 16,  # local points per side (the paper used 50)
    "checkpoints": 1,
    "listio": True,  # one list request per array per process (else one write per run)
}
S3D_ARRAYS = (("mass", 11), ("velocity", 3), ("pressure", 1), ("temperature", 1))


def dims_create(nprocs: int, ndims: int = 3) -> list[int]:
    """A balanced factorisation of ``nprocs`` into ``ndims`` factors (as MPI_Dims_create)."""
    dims = [1] * ndims
    rest = nprocs
    factors = []
    f = 2
    while f * f <= rest:
        while rest % f == 0:
            factors.append(f)
            rest //= f
        f += 1
    if rest > 1:
        factors.append(rest)
    for fac in sorted(factors, reverse=True):
        dims[dims.index(min(dims))] *= fac
    return sorted(dims, reverse=True)


def s3d(nprocs: int, params: dict[str, Any] | None = None, seed: int = 0) -> Trace:
    """S3D-IO: 4 arrays, 3D block-block-block partition, 4th dimension 11 and 3.

    Models the S3D I/O benchmark of Liao et al. §5.3: each checkpoint file holds mass (4D,
    11 species), velocity (4D, 3), pressure and temperature (3D), doubles in canonical Fortran
    order, one after another; the X-Y-Z dimensions are block-partitioned over a process grid
    and the 4th is not partitioned, so a process writes one contiguous run of nx doubles per
    (v, z, y).
    """
    p = resolve_params(S3D_DEFAULTS, params)
    px, py, pz = dims_create(nprocs)
    nx = p["nx"]
    gx, gy, gz = px * nx, py * nx, pz * nx
    b = TraceBuilder(nprocs, "s3d", p, seed)
    for k in range(p["checkpoints"]):
        fid = b.file(f"s3d/checkpoint{k}")
        b.barrier(f"s3d checkpoint {k} open")
        b.open_all(fid, Flag.WR | Flag.CREAT)
        base = 0
        for name, nv in S3D_ARRAYS:
            b.barrier(f"s3d checkpoint {k} {name}")
            for rank in range(nprocs):
                ix, rem = rank % px, rank // px
                iy, iz = rem % py, rem // py
                runs = []
                for v in range(nv):
                    for z in range(iz * nx, (iz + 1) * nx):
                        for y in range(iy * nx, (iy + 1) * nx):
                            elem = ((v * gz + z) * gy + y) * gx + ix * nx
                            runs.append((base + elem * 8, nx * 8))
                if p["listio"]:
                    b.listio(rank, fid, runs, write=True)
                else:
                    for off, length in runs:
                        b.write(rank, fid, off, length)
            base += nv * gx * gy * gz * 8
        b.barrier(f"s3d checkpoint {k} close")
        b.close_all(fid)
    return b.build()
