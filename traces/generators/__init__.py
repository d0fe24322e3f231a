"""Seeded, parameterised workload generators (SPEC §7), one registry for all of them.

Every generator is a function ``gen(nprocs, params=None, seed=0) -> Trace`` whose docstring
says what it models and from which paper; ``params`` maps names to values (strings from the
command line are converted to the type of the default). :data:`GENERATORS` maps the names the
CLI accepts to ``(function, defaults)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pvfs.traces.format import Trace
from pvfs.traces.generators import apps, checkpoint, cholesky, db2, lu, thesis

Generator = Callable[..., Trace]

GENERATORS: dict[str, tuple[Generator, Mapping[str, Any]]] = {
    "thesis": (thesis.thesis, thesis.DEFAULTS),
    "single": (thesis.single, thesis.DEFAULTS),
    "strided": (thesis.strided, thesis.DEFAULTS),
    "random16": (thesis.random16, thesis.DEFAULTS),
    "random32": (thesis.random32, thesis.DEFAULTS),
    "lu": (lu.lu, lu.DEFAULTS),
    "cholesky": (cholesky.cholesky, cholesky.DEFAULTS),
    "db2": (db2.db2, db2.DEFAULTS),
    "titan": (apps.titan, apps.TITAN_DEFAULTS),
    "mining": (apps.mining, apps.MINING_DEFAULTS),
    "pgrep": (apps.pgrep, apps.PGREP_DEFAULTS),
    "btio": (checkpoint.btio, checkpoint.BTIO_DEFAULTS),
    "flash": (checkpoint.flash, checkpoint.FLASH_DEFAULTS),
    "s3d": (checkpoint.s3d, checkpoint.S3D_DEFAULTS),
}

NAMES = tuple(GENERATORS)


def generate(name: str, nprocs: int, params: Mapping[str, Any] | None = None,
             seed: int = 0) -> Trace:
    """Run the generator ``name``.

    Raises:
        ValueError: for an unknown name, an unknown parameter or a bad value.
    """
    try:
        func, _ = GENERATORS[name]
    except KeyError:
        raise ValueError(f"unknown workload {name!r} (one of {', '.join(NAMES)})") from None
    return func(nprocs, dict(params or {}), seed)


def describe(name: str) -> str:
    """The first paragraph of a generator's docstring."""
    func, _ = GENERATORS[name]
    return (func.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")


__all__ = ["GENERATORS", "NAMES", "describe", "generate"]
