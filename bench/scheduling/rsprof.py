"""python -m pvfs.bench.scheduling.rsprof OUT.json REPS [--phase3-only] [--pyspy SETTING] -- profile rs against fixed opt3
on the mixed phase's random32 64 KiB cached phase, with the daemons run as the study runs
them (pvfs.cluster.netns, emulated ide-2000 disks, 100mbit links, 14 clients, 2 iods, the
s26 model).

Default mode: REPS runs of the whole mixed-phase sequence (runner.run_mixed) under opt3 and
rs, in a shuffled order per run, with the same seeds for both (as the study's side by side).
Around each phase's measured pass (the study's own mark: a sched_get round trip to each
daemon) it reads every I/O daemon thread's CPU time (/proc/PID/task/TID/schedstat, ns) and
rs' counters. --phase3-only: only phase 3 (warm + measured), REPS times per setting in
blocks; --pyspy SETTING: py-spy records iod0 (raw, --nonblocking) during that setting's
blocks. (Issue 31, thirtieth session: docs/scheduling.md, "rs' own work per request";
its output is in bench/results/study-scheduling-ide-2000-rs-profile-s30-2026-11-29.json.)
Needs root (network namespaces); run it under the machine lock.
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pvfs.bench.scheduling.runner import MIXED_PHASES, Runner, run_mixed
from pvfs.cluster.netns import Network
from pvfs.models.rs import Params

MODEL = str(Path(__file__).resolve().parents[1] / "results"
            / "study-scheduling-ide-2000-quick-s26-2026-11-29.json")
CLIENTS, IODS = 14, 2


def iod_pids(cfg_path):
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"pvfs.daemons.iod" in cmd and cfg_path.encode() in cmd and b"python" in cmd[0]:
            idx = cmd[cmd.index(b"--index") + 1].decode()
            pids.append((int(idx), int(p)))
    return [p for _, p in sorted(pids)]


def cpu(pid):
    """thread -> (comm, CPU ns) of one process."""
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            ns = [int(x) for x in Path(f"/proc/{pid}/task/{t}/schedstat").read_text().split()[:3]]
            comm = Path(f"/proc/{pid}/task/{t}/comm").read_text().strip()
        except OSError:
            continue
        out[int(t)] = (comm, ns)
    return out


def delta(a, b, pid):
    """[main thread cpu ns, runqueue wait ns, slices], [other threads' same]"""
    main, other = [0, 0, 0], [0, 0, 0]
    for t, (comm, ns) in b.items():
        old = a.get(t, (comm, [0, 0, 0]))[1]
        tgt = main if t == pid else other
        for k in range(3):
            tgt[k] += ns[k] - old[k]
    return main, other


def _row(start, rsn, c, pids, alg, rep, phase) -> dict:
    """One phase's row: wall time, load, each daemon's CPU and rs' counters since ``start``."""
    rs0, c0, t0 = start
    row = {"alg": alg, "rep": rep, "phase": phase, "wall_s": time.monotonic() - t0,
           "load": os.getloadavg()[0]}
    row["iod_cpu_ns"] = [list(delta(a, b, p)) for a, b, p in zip(c0, c, pids)]
    row["rs"] = [{"decisions": sum(b["decisions"].values()) - sum(a["decisions"].values()),
                  "switches": b["switches"] - a["switches"],
                  "deciding_s": b["deciding_s"] - a["deciding_s"],
                  "picks": {k: v - a["picks"].get(k, 0) for k, v in b["picks"].items()
                            if v - a["picks"].get(k, 0)}}
                 for a, b in zip(rs0, rsn)]
    return row


def main():
    out_path, reps = sys.argv[1], int(sys.argv[2])
    phase3_only = "--phase3-only" in sys.argv
    pyspy = sys.argv[sys.argv.index("--pyspy") + 1] if "--pyspy" in sys.argv else None
    params = Params.from_wire(json.loads(Path(MODEL).read_text())["model"])
    rows = []
    started = time.time()
    load = [os.getloadavg()[0]]
    with Network([*[f"s{i}" for i in range(IODS)], *[f"c{k}" for k in range(CLIENTS)]],
                 rate="100mbit") as net, tempfile.TemporaryDirectory(prefix="pvfs-prof-") as tmp:
        cfg = net.make_config(tmp, iods=[f"s{i}" for i in range(IODS)], request_timeout=300.0,
                              extra={"storage": {"default": "emulated:ide-2000"}})
        net.start_daemons(cfg)
        pids = iod_pids(cfg.path)
        assert len(pids) == IODS, pids
        with Runner(cfg.path, CLIENTS, range(IODS),
                    wrap=lambda k, argv: net.argv(f"c{k}", argv)) as r:
            for i in range(IODS):
                r.call(i, "model_set", params=params.to_wire())
            state = {}

            def mark(what, alg, rep, phase):
                rsn = [r.call(i, "sched_get")["rs"] for i in range(IODS)]
                c = [cpu(p) for p in pids]
                if what == "start":
                    state["s"] = (rsn, c, time.monotonic())
                else:
                    state["row"] = _row(state.pop("s"), rsn, c, pids, alg, rep, phase)

            def one_mixed(alg, rep):
                phase = [0]

                def m(what):
                    mark(what, alg, rep, phase[0])
                    if what == "end":
                        rows.append(state.pop("row"))
                        phase[0] += 1
                run = run_mixed(r, alg, seed=rep, mark=m)
                for p, ph in zip(rows[-len(MIXED_PHASES):], run.phases):
                    p["task_s"] = ph.times
                    p["workload"], p["size"], p["cached"] = ph.workload, ph.per_task, ph.cached

            def one_p3(alg, rep):
                wl, size, cached = MIXED_PHASES[2]

                def m(what):
                    mark(what, alg, rep, 2)
                    if what == "end":
                        rows.append(state.pop("row"))
                run = r.run(wl, size, cached, alg, rep + 2, m)
                rows[-1]["task_s"] = run.times
                rows[-1]["workload"], rows[-1]["size"], rows[-1]["cached"] = wl, size, cached

            spy = {}
            for rep in range(reps):
                order = random.Random(f"prof/{rep}").sample(["opt3", "rs"], 2)
                for alg in order:
                    if pyspy == alg:
                        f = f"{out_path}.{alg}.{rep}.pyspy.txt"
                        spy[alg] = subprocess.Popen(
                            [os.path.join(os.path.dirname(sys.executable), "py-spy"), "record", "--pid", str(pids[0]),
                             "--rate", "1000", "--nonblocking", "--format", "raw", "-o", f,
                             "--threads"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                        time.sleep(1.5)
                    (one_p3 if phase3_only else one_mixed)(alg, rep)
                    if alg in spy:
                        p = spy.pop(alg)
                        p.send_signal(2)
                        p.wait(30)
                load.append(os.getloadavg()[0])
                print(rep, order, round(load[-1], 2), flush=True)
    Path(out_path).write_text(json.dumps(
        {"mode": "phase3-only" if phase3_only else "mixed", "reps": reps, "rows": rows,
         "load_samples": load, "elapsed_s": time.time() - started, "pyspy": pyspy}, indent=1))


if __name__ == "__main__":
    main()
