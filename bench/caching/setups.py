"""The caching study's setups and traces by name, and its defaults: light (no trio, no file
system), so ``pvfs-admin study caching --help`` lists them without loading the study
(``pvfs.bench.caching.study``; its docstring says what each setup is).

A setup's global cache policy is one of :data:`pvfs.models.bypass.POLICIES`, named by the
policy's class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pvfs.models.bypass import DEFAULT_POLICY, HybridAdmission, RuntimeBypass, SketchAdmission
from pvfs.models.disk import DEFAULT_PRESET

__all__ = ["IOD_CACHE", "POLICIES", "STORAGE", "TRACES", "Setup"]

#: Page cache of each I/O daemon's emulated disk. The preset's 56 MiB (the thesis' nodes)
#: would hold every scaled trace whole, so after its first touch no block would ever reach
#: a disk and neither the global cache nor bypassing it could matter; on the paper's cluster
#: (128 MB nodes, traces of hundreds of MB) the I/O daemons' memory held a small part of the
#: data. Scaled with the traces, it is a fraction of the global cache.
IOD_CACHE = 512 << 10
#: The study's I/O daemons: emulated disks of the thesis' era, so a miss costs what it did.
STORAGE = f"emulated:{DEFAULT_PRESET}"

#: Scaled traces: (generator parameters for --quick, for the full study). The rule: every
#: trace's footprint (distinct blocks touched) is at least twice the global cache in the quick
#: study (8-10 MiB) and three times in the full one (12-18 MiB), as the paper's traces were
#: far larger than its 4 MB global cache. (Before 2026-11-23 the quick LU, Cholesky, Mining,
#: Pgrep and DB2 had 1.9-5.4 MiB: they nearly fit, every global miss was a first touch, and
#: no admission policy could matter.)
TRACES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "lu": ({"n": 1024, "slabs": 16}, {"n": 1280, "slabs": 20}),
    "cholesky": ({"panels": 450}, {"panels": 650}),
    "titan": ({}, {"grid": 20}),
    "mining": ({"db": 2 << 20}, {"db": 3 << 20}),
    "pgrep": ({"files": 32}, {"files": 48}),
    "db2": ({"scale": 0.002}, {"scale": 0.003}),
}


@dataclass(frozen=True)
class Setup:
    local: bool
    gcache: bool
    policy: str = DEFAULT_POLICY
    threshold: int = 0
    plan: bool = False


POLICIES: dict[str, Setup] = {
    "none": Setup(False, False),
    "local": Setup(True, False),
    "global": Setup(False, True),
    "both": Setup(True, True),
    "plan": Setup(True, True, plan=True),
    "runtime10": Setup(True, True, RuntimeBypass.name, 10),
    "runtime25": Setup(True, True, RuntimeBypass.name, 25),
    "adaptive": Setup(True, True, HybridAdmission.name, 10),
    "sketch": Setup(True, True, SketchAdmission.name),
}
