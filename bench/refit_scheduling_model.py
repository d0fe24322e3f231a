"""Refit the reactive-scheduling model to the fixed-algorithm runs of an earlier study.

``pvfs-admin study scheduling`` fits the model to its own opt1..opt4 runs (appendix B). When
the fit changes after such a run, this fits again from the same runs, without running them
again, and writes a document ``study scheduling --model`` takes::

    python bench/refit_scheduling_model.py bench/results/study-scheduling-ide-2000-quick-fit.json \\
        bench/results/study-scheduling-ide-2000-quick-model.json
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pvfs.models import fit, rs


def refit(study: dict) -> tuple[rs.Params, list[dict]]:
    obs = [fit.Obs(x["workload"], x["request_bytes"], x["cached"], x["algorithm"],
                   x["mean_task_service_s"]) for x in study["results"]
           if x["algorithm"] in rs.ALGORITHMS and x["workload"] in fit.PIECES]
    return fit.fit(obs, study["clients"], study["iods"], s_cache=study["model"]["S_cache"])


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    src, dst = argv
    params, residuals = refit(json.loads(Path(src).read_text()))
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=False).stdout.strip()
    doc = {"model": params.to_wire(), "residuals": residuals, "fitted_from": src,
           "git": head, "command": " ".join(["python", "bench/refit_scheduling_model.py",
                                             *argv])}
    Path(dst).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"zero_s {params.zero_s:.4g} s, small_alg {params.small_alg}; wrote {dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
