"""The calibration runs of ``pvfs-admin calibrate`` (thesis appendix B; ``pvfs.models.fit``).

* B.1 single-block reads under opt2, uncached at four sizes (``T_over``, ``B_dr``), cached at
  the smallest (``B_drc``); then cached runs of doubling size until caching stops working,
  and a bisection of that step (``S_cache``); ``S_nocache``, where cached runs are as slow as
  uncached ones, gives ``C_cache``.
* B.2 strided and random 16/32 block reads under opt2, uncached (``C_req``; ``C_dist``,
  ``P_dist``).
* B.3 all four workloads under every fixed algorithm, cached and uncached (``E_opt``).

Sizes are bytes per I/O daemon (the model's ``S_req``).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable

from pvfs import schedulers


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _per_task(s_iod: int, niods: int, nprocs: int, units: int) -> int:
    """Bytes per task for ``s_iod`` bytes per I/O daemon, a multiple of 64 KiB * units."""
    grain = 65536 * units
    return max(grain, round(s_iod * niods / nprocs / grain) * grain)


def calibrate(runner, nprocs: int, quick: bool, max_size: int,
              log: Callable[[str], None] = _log) -> dict:
    """Appendix B's runs on ``runner``'s file system and the model fitted to them."""
    from pvfs.bench.scheduling.runner import WORKLOADS, units
    from pvfs.models import fit

    niods = runner.niods
    obs: list[fit.Obs] = []

    def run(wl: str, s_iod: int, cached: bool, alg: str) -> fit.Obs:
        per = _per_task(s_iod, niods, nprocs, units(wl))
        r = runner.run(wl, per, cached, alg).row()
        o = fit.Obs(wl, per, cached, alg, r["mean_task_service_s"])
        obs.append(o)
        log(f"{wl:>12} {per * nprocs // niods >> 10:>8} KiB/iod "
            f"{'cached  ' if cached else 'uncached'} {alg}: {o.mean_task_service_s:.4f} s")
        return o

    sizes = [1 << 20, 2 << 20, 4 << 20] if quick else [1 << 20, 2 << 20, 4 << 20, 8 << 20]
    for s in sizes:
        run("single-block", s, False, "opt2")
    run("single-block", sizes[0], True, "opt2")
    base, _ = fit.fit(obs, nprocs, niods)
    b_dr, b_drc = base.B_dr, base.B_drc

    def s_of(o: fit.Obs) -> float:
        return o.request_bytes * nprocs / niods

    def fast(o: fit.Obs) -> bool:
        """Cached still: nearer the cached prediction than the uncached one (in time, which
        keeps a noisy small run from looking uncached)."""
        s = s_of(o)
        return o.mean_task_service_s <= base.T_over + (s / b_drc + s / b_dr) / 2

    # B.1: where caching stops working: double, then bisect (cached single-block, opt2).
    lo, hi, s = 0, 0, sizes[0]
    while s <= max_size:
        if fast(run("single-block", s, True, "opt2")):
            lo, s = s, s * 2
        else:
            hi = s
            break
    s_cache = s_nocache = None
    if lo and hi:
        for _ in range(5):
            mid = (lo + hi) // 2
            if fast(run("single-block", mid, True, "opt2")):
                lo = mid
            else:
                hi = mid
        s_cache, s_nocache = float(lo), float(hi)
    elif lo:
        log(f"caching still works at {lo >> 20} MiB per daemon: S_cache is at least that "
            "(raise --max-size)")
        s_cache = float(lo)
    # B.2 and B.3.
    mid_size = 1 << 20 if quick else 4 << 20
    for wl in WORKLOADS[1:]:
        run(wl, mid_size, False, "opt2")
        if not quick:
            run(wl, 2 << 20, False, "opt2")
    for wl in WORKLOADS:
        for cached in (False, True):
            for alg in schedulers.FIXED:
                if not any(o.workload == wl and o.cached == cached and o.algorithm == alg
                           and s_of(o) == mid_size for o in obs):
                    run(wl, mid_size, cached, alg)
    params, residuals = fit.fit(obs, nprocs, niods, s_cache=s_cache,
                                s_nocache=s_nocache if s_nocache != s_cache else None)
    return {"params": params.to_wire(), "S_nocache": s_nocache, "residuals": residuals,
            "runs": [dataclasses.asdict(o) for o in obs]}
