"""One check run: build the clients from the options, run the state machine under hypothesis,
report. Exit status: 0 no violation found, 1 a violation, 2 a setup error.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from pvfs.check.clients import Client, NativeClient, PathClient, pvfs_mount_info
from pvfs.check.world import World
from pvfs.client.modes import CHECK_MODES

MODES = CHECK_MODES


class SetupError(RuntimeError):
    """The run cannot start (exit status 2)."""


@dataclass
class Options:
    config: str | None = None
    mounts: list[str] = field(default_factory=list)
    native: int | None = None
    mode: str = "none"
    examples: int = 100
    steps: int = 30
    seed: int | None = None
    target: str | None = None
    faults: bool = False
    trace_out: str | None = None
    progress: bool = False
    shrink_seconds: int = 60


@dataclass
class Result:
    status: int  # 0, 1, 2
    summary: dict[str, Any]
    text: list[str]


def _clients(opts: Options) -> tuple[list[Client], Any, Any]:
    """(clients, admin connection, config) for a pvfs run."""
    from pvfs.config import ConfigError, load

    try:
        cfg = load(opts.config)
    except (ConfigError, OSError) as exc:
        raise SetupError(f"config: {exc}") from None
    import pvfs

    try:
        admin = pvfs.connect(cfg.path)
    except OSError as exc:
        raise SetupError(f"manager {cfg.manager.address}: {exc.strerror or exc} "
                         f"(is the file system up?)") from None
    clients: list[Client] = []
    nnative = opts.native if opts.native is not None else (0 if opts.mounts else 2)
    for i in range(nnative):  # every second one creates ahead of the manager
        ahead = i % 2 == 1
        clients.append(NativeClient(cfg.path, f"native{i}{'-ahead' if ahead else ''}", ahead))
    for i, d in enumerate(opts.mounts):
        info = pvfs_mount_info(d)
        if info is None:
            raise SetupError(f"{d} is not a running pvfs mount of this host")
        if os.path.realpath(str(info.get("config", ""))) != os.path.realpath(cfg.path):
            raise SetupError(f"{d} mounts {info.get('config')}, not {cfg.path}")
        clients.append(PathClient(d, f"{chr(ord('A') + i)}:{d}", pvfs_mount=info))
    if not clients:
        raise SetupError("no clients: give --mounts and/or --native N (N >= 1)")
    return clients, admin, cfg


def setup(opts: Options) -> tuple[World, list[str]]:
    """The world of a run and warnings to print first."""
    warnings: list[str] = []
    if opts.mode not in MODES:
        raise SetupError(f"unknown mode {opts.mode!r} ({', '.join(MODES)})")
    if opts.mode == "collective":
        if importlib.util.find_spec("pvfs.collective") is None:
            raise SetupError("mode collective: not available (this pvfs has no "
                             "pvfs.collective, the collective caching of SPEC §8)")
        raise SetupError("mode collective: not available yet -- pvfs.collective is an MPI "
                         "library (every rank opens the file collectively), and this checker "
                         "drives its clients from one process; see docs/check.md")
    run_dir = f"pvfs-check-{os.getpid()}-{int(time.time())}"
    if opts.target:
        if opts.mounts or opts.native or opts.faults:
            raise SetupError("--target runs alone (no --mounts, --native or --faults)")
        if not os.path.isdir(opts.target):
            raise SetupError(f"--target {opts.target}: not a directory")
        client = PathClient(opts.target, f"target:{opts.target}")
        world = World([client], "none", run_dir, checks_nlink=True)
        return world, warnings
    clients, admin, cfg = _clients(opts)
    world = World(clients, opts.mode, run_dir, admin=admin, niods=len(cfg.iods))
    if opts.mode == "sync":
        loose = [c.label for c in clients if c.caches and c.coherence != "sync"]
        if loose:
            warnings.append(f"mode sync, but mounted with coherence=none: {', '.join(loose)} "
                            "(expect a violation)")
    if opts.faults:
        from pvfs.check.faults import Faults, FaultSetupError

        try:
            world.faults = Faults(cfg)
        except FaultSetupError as exc:
            raise SetupError(str(exc)) from None
    return world, warnings


def _find_violation(exc: BaseException, depth: int = 0):
    """The :class:`Violation` in what hypothesis raised, and whether it came wrapped (the
    failure did not reproduce on every replay: a timing-dependent one)."""
    from pvfs.check.machine import Violation

    if isinstance(exc, Violation):
        return exc, depth > 0
    if depth > 8:
        return None, False
    for e in [*getattr(exc, "exceptions", ()), exc.__cause__, exc.__context__]:
        if e is not None:
            found, _ = _find_violation(e, depth + 1)
            if found is not None:
                return found, True
    return None, False


def run(opts: Options) -> Result:
    """Run a check; never raises for a violation or a setup error."""
    from hypothesis import HealthCheck, Verbosity, settings
    from hypothesis import seed as hseed
    from hypothesis.reporting import with_reporter
    from hypothesis.stateful import get_state_machine_test

    from pvfs.check.machine import build_machine

    seed = opts.seed if opts.seed is not None else random.randrange(1 << 31)
    try:
        world, warnings = setup(opts)
    except SetupError as exc:
        return Result(2, {"result": "setup error", "error": str(exc)},
                      [f"setup error: {exc}"])
    bar = _bar(opts.examples) if opts.progress else None
    if bar is not None:
        world.on_example = lambda n: (setattr(bar, "n", min(n, opts.examples)), bar.refresh())
    labels = [c.label for c in world.clients]
    summary: dict[str, Any] = {"mode": world.mode, "clients": labels, "seed": seed,
                               "examples": opts.examples, "steps": opts.steps}
    text = [(f"checking mode {world.mode} with {len(labels)} client(s): {', '.join(labels)}; "
            f"{opts.examples} examples of up to {opts.steps} steps, seed {seed}")]
    text += [f"warning: {w}" for w in warnings]
    machine = build_machine(world)
    conf = settings(max_examples=opts.examples, stateful_step_count=opts.steps,
                    deadline=None, database=None, suppress_health_check=list(HealthCheck),
                    verbosity=Verbosity.quiet, report_multiple_bugs=False, print_blob=False)
    test = hseed(seed)(get_state_machine_test(machine, settings=conf))
    t0 = time.monotonic()
    status = 0
    try:
        with with_reporter(lambda _msg: None), _shrink_limit(opts.shrink_seconds):
            test()
    except Exception as exc:  # noqa: BLE001 - a violation, or a broken setup mid-run
        violation, flaky = _find_violation(exc)
        if violation is None:
            status = 2
            cause = _root_cause(exc)
            summary.update(result="error", error=f"{type(exc).__name__}: {exc}",
                           cause="".join(traceback.format_exception(cause)[-6:]))
            text.append(f"error while checking: {type(exc).__name__}: {exc}")
            if cause is not exc:
                text.append(f"caused by: {type(cause).__name__}: {cause}")
        else:
            status = 1
            if world.first_failure is not None:
                n, when = world.first_failure
                summary["first_failure"] = {"example": n, "seconds": round(when - t0, 1)}
                text.append(f"first failure in example {n} after {when - t0:.1f} s; shrunk "
                            f"in {time.monotonic() - when:.1f} s")
            text += _violation(violation, flaky, opts, labels, seed, summary)
    finally:
        if bar is not None:
            bar.close()
        world.remove_run_dir()
        for c in world.clients:
            c.close()
        if world.admin is not None:
            world.admin.close()
    summary["examples_run"] = world.examples
    summary["seconds"] = round(time.monotonic() - t0, 1)
    summary["notes"] = world.notes
    summary["operations"] = dict(sorted(world.ops.items()))
    if world.faults is not None:
        summary["faults"] = world.faults.done
    text += [f"note: {n}" for n in world.notes]
    text.append("steps run: " + ", ".join(f"{k} {v}" for k, v in sorted(world.ops.items())))
    if status == 0:
        summary["result"] = "pass"
        text.append(f"no violation found in {world.examples} example runs "
                    f"({summary['seconds']} s)"
                    + (f"; {len(world.faults.done)} daemon kills" if world.faults else ""))
    return Result(status, summary, text)


def _violation(v, flaky: bool, opts: Options, labels: list[str], seed: int,
               summary: dict[str, Any]) -> list[str]:
    from pvfs.check import report

    text = [f"VIOLATION of mode {summary['mode']} by {v.client}: {v.message}"]
    if flaky:
        text.append("(the shrunk example did not fail on every run: timing-dependent)")
    if v.mismatch is not None:
        text += report.format_mismatch(v.mismatch)
    text += report.format_steps(v.steps)
    path = opts.trace_out or f"pvfs-check-{seed}.trace"
    try:
        lost = report.write_trace(path, v.steps, labels, seed)
    except (OSError, ValueError) as exc:
        text.append(f"could not write the trace {path}: {exc}")
        lost = []
        path = None
    else:
        text.append(f"trace: {path} (exact steps: {path}.steps.json); re-run it with")
        text.append(f"  pvfs-admin replay --trace {path} --procs {len(labels)} "
                    f"--target TARGET --verify")
        text.append("  (replay writes its own deterministic bytes and runs every rank on "
                    "TARGET: one node)")
        if lost:
            text.append("  the trace cannot express: " + "; ".join(lost))
    summary.update(result="violation", client=v.client, message=v.message,
                   mismatch=report.mismatch_json(v.mismatch), steps=v.steps, trace=path,
                   trace_lost=lost, flaky=flaky)
    return text


def _root_cause(exc: BaseException) -> BaseException:
    """The first exception of a chain or group (hypothesis wraps what a step raised)."""
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        inner = getattr(exc, "exceptions", None)
        nxt = inner[0] if inner else (exc.__cause__ or exc.__context__)
        if nxt is None:
            break
        exc = nxt
    return exc


@contextlib.contextmanager
def _shrink_limit(seconds: int):
    """Bound hypothesis' shrinking time (its default is 300 s; every step here is real I/O)."""
    try:
        from hypothesis.internal.conjecture import engine
    except ImportError:  # pragma: no cover - a hypothesis without that module
        yield
        return
    old = getattr(engine, "MAX_SHRINKING_SECONDS", None)
    engine.MAX_SHRINKING_SECONDS = seconds
    try:
        yield
    finally:
        if old is not None:
            engine.MAX_SHRINKING_SECONDS = old


def _bar(total: int):
    if not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="example", desc="check", leave=False)
