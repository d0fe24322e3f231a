"""python -m pvfs.bench.scheduling.rsprof_summary PROF.json [...] (``rsprof``'s output): per phase and setting, medians of the mean task time, the I/O
daemons' main (trio) thread CPU and run-queue wait per request, the other threads' CPU, rs'
decisions; rs over opt3 paired by run (bootstrap 95 % interval of the median ratio)."""
import json
import random
import statistics as st
import sys
from pathlib import Path

REQ = {0: 14, 1: 14, 2: 14 * 32, 3: 14 * 16, 4: 14, 5: 14, 6: 14}   # requests per phase (all daemons)


def boot(xs, n=2000, seed=1):
    rng = random.Random(seed)
    meds = sorted(st.median(rng.choices(xs, k=len(xs))) for _ in range(n))
    return [meds[int(0.025 * n)], meds[int(0.975 * n) - 1]]


def summary(rows):
    out = {}
    phases = sorted({r["phase"] for r in rows})
    for ph in phases:
        by = {}
        for r in rows:
            if r["phase"] == ph:
                by.setdefault(r["alg"], {})[r["rep"]] = r
        o = {}
        for alg, runs in by.items():
            rs = list(runs.values())
            n = REQ[ph]
            mt = [st.mean(r["task_s"]) for r in rs]
            main_cpu = [sum(c[0][0] for c in r["iod_cpu_ns"]) / n / 1e3 for r in rs]
            main_wait = [sum(c[0][1] for c in r["iod_cpu_ns"]) / n / 1e3 for r in rs]
            other_cpu = [sum(c[1][0] for c in r["iod_cpu_ns"]) / n / 1e3 for r in rs]
            o[alg] = {"runs": len(rs), "mean_task_ms": st.median(mt) * 1e3,
                      "main_cpu_us_per_req": st.median(main_cpu),
                      "main_runqueue_wait_us_per_req": st.median(main_wait),
                      "other_threads_cpu_us_per_req": st.median(other_cpu),
                      "load": st.median(r["load"] for r in rs)}
            if alg == "rs":
                o[alg]["decisions_per_pass"] = st.median(sum(d["decisions"] for d in r["rs"]) for r in rs)
                o[alg]["deciding_ms_per_pass"] = st.median(sum(d["deciding_s"] for d in r["rs"]) for r in rs) * 1e3
                o[alg]["switches"] = sum(sum(d["switches"] for d in r["rs"]) for r in rs)
                picks = {}
                for r in rs:
                    for d in r["rs"]:
                        for k, v in d["picks"].items():
                            picks[k] = picks.get(k, 0) + v
                o[alg]["picks"] = picks
        if "rs" in by and "opt3" in by:
            reps = sorted(set(by["rs"]) & set(by["opt3"]))
            rat = [st.mean(by["rs"][k]["task_s"]) / st.mean(by["opt3"][k]["task_s"]) for k in reps]
            dcpu = [(sum(c[0][0] for c in by["rs"][k]["iod_cpu_ns"]) -
                     sum(c[0][0] for c in by["opt3"][k]["iod_cpu_ns"])) / REQ[ph] / 1e3 for k in reps]
            o["rs_over_opt3"] = {"pairs": len(reps), "median": st.median(rat), "ci95": boot(rat),
                                 "rs_slower_in": sum(x > 1 for x in rat),
                                 "main_cpu_extra_us_per_req": st.median(dcpu),
                                 "main_cpu_extra_ci95": boot(dcpu)}
        out[ph] = o
    return out


if __name__ == "__main__":
    rows = []
    for p in sys.argv[1:]:
        d = json.loads(Path(p).read_text())
        base = len({r["rep"] for r in rows}) * 1000
        for r in d["rows"]:
            r = dict(r)
            r["rep"] += base
            rows.append(r)
    print(json.dumps(summary(rows), indent=1))
