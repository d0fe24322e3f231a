"""Several runs of the same study pooled and scored again (issue 31): each setting's runs of a
cell concatenated, as the mixed-phase headlines since the twenty-seventh session are decided
("each setting's runs concatenated, scored by ``score.mixed_score``")::

    python -m pvfs.bench.scheduling.pool G.json H.json --out pooled.json

The documents must be the same study (disk, tasks, daemons, model); a cell's rows are pooled
only across documents, never within one. The result keeps where its runs came from and the
load each document recorded; it is a score, not a study document.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from statistics import median

from pvfs.bench.scheduling import score

SAME = ("disk", "clients", "iods", "model")


def pool_rows(docs: list[dict]) -> list[dict]:
    """Every cell and setting's row with the runs of all ``docs`` concatenated (in the order
    given); the row's own summary values are the first document's."""
    first = docs[0]
    for d in docs[1:]:
        for k in SAME:
            if d.get(k) != first.get(k):
                raise ValueError(f"the runs differ in {k}: {d.get(k)!r} and {first.get(k)!r}")
    rows: dict[tuple, dict] = {}
    for d in docs:
        seen: set[tuple] = set()
        for x in d["results"]:
            key = (*score._cell_key(x), x["algorithm"])
            if key in seen:
                raise ValueError(f"{key} twice in one document")
            seen.add(key)
            if key not in rows:
                rows[key] = {**x, "runs": list(x.get("runs") or [])}
            else:
                rows[key]["runs"] += list(x.get("runs") or [])
    return list(rows.values())


def mixed(docs: list[dict], setting: str = "rs") -> dict:
    """The mixed-phase score of the pooled runs (``score.mixed_score``), its oracle row and
    each setting's median application time (the slowest task) over the pooled runs."""
    by = {x["algorithm"]: x for x in pool_rows(docs)
          if x["workload"] == "mixed-phase" and x["algorithm"] != "oracle"}
    runs = {a: len(x["runs"]) for a, x in by.items()}
    app = {a: median(score.run_values(x, "app_service_s")) for a, x in by.items() if x["runs"]}
    return {"runs": runs, "median_app_service_s": app, "score": score.mixed_score(by, setting),
            "oracle": score.oracle_row(by)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pvfs.bench.scheduling.pool",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("studies", nargs="+", help="study JSON documents of the same study")
    ap.add_argument("--out", default=None, help="write the JSON here too")
    a = ap.parse_args(argv)
    docs = [json.loads(Path(p).read_text()) for p in a.studies]
    out = {"what": "mixed phase, the documents' runs pooled (each setting's runs "
                   "concatenated), scored by score.mixed_score",
           "pooled_from": [Path(p).name for p in a.studies],
           "load": {Path(p).name: d.get("load_log") or {"before": d.get("load_before"),
                                                        "after": d.get("load_after")}
                    for p, d in zip(a.studies, docs)},
           **mixed(docs)}
    text = json.dumps(out, indent=1)
    if a.out:
        Path(a.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
