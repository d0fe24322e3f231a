"""One scheduling study from several runs of ``study scheduling --model M --workloads ...``.

The full study (four sizes, five workloads, five settings side by side) takes about an hour
here; on a shared machine it runs in pieces of one or two workloads each, under the same
model. This puts the pieces back together -- every cell once, the issue's targets checked on
all of them -- and optionally draws the plots::

    python bench/scheduling/merge.py A.json B.json C.json --out full.json \\
        --plot-dir docs/study/s12

The pieces must agree on the disk, tasks, daemons and model (else they are not one study);
a cell run in two pieces is refused rather than silently picked.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pvfs.bench.scheduling.study import targets

SAME = ("study", "disk", "rate", "clients", "iods", "model")


def merge(docs: list[dict]) -> dict:
    first = docs[0]
    for d in docs[1:]:
        for k in SAME:
            if d.get(k) != first.get(k):
                raise ValueError(f"the pieces differ in {k}: {d.get(k)!r} and {first.get(k)!r}")
    results: list[dict] = []
    seen: set[tuple] = set()
    for d in docs:
        for x in d["results"]:
            key = (x["workload"], x["request_bytes"], x["cached"],
                   x.get("operation", "read"), x["algorithm"])
            if key in seen:
                raise ValueError(f"cell {key} is in two pieces")
            seen.add(key)
            results.append(x)
    sizes = sorted({s for d in docs for s in d["sizes"]})
    return {**{k: first.get(k) for k in SAME}, "sizes": sizes,
            "reps": first.get("reps"), "reps_short": first.get("reps_short"),
            "short_s": first.get("short_s"), "results": results,
            "targets": targets(results),
            "pieces": [{"command": d.get("command"), "elapsed_s": d.get("elapsed_s"),
                        "machine": d.get("machine")} for d in docs],
            "elapsed_s": sum(d.get("elapsed_s", 0.0) for d in docs),
            "model_from": first.get("model_from")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("pieces", nargs="+", help="study documents (--out of each piece)")
    p.add_argument("--out", required=True)
    p.add_argument("--plot-dir")
    args = p.parse_args(argv)
    doc = merge([json.loads(Path(f).read_text()) for f in args.pieces])
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    t = doc["targets"]["rs_within_5pct_of_best"]
    print(f"{len(t['cells'])} cells: {len(t['cells']) - t['misses']} within 5 %, "
          f"{t['misses_beyond_noise']} misses beyond noise")
    for name, v in doc["targets"].items():
        if isinstance(v, dict) and "pass" in v:
            print(f"{name}: {v['pass']}")
    if args.plot_dir:
        from pvfs.bench.scheduling.plot import plot_study

        for path in plot_study(doc, args.plot_dir):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
