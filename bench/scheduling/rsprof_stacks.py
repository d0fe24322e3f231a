"""python -m pvfs.bench.scheduling.rsprof_stacks FILES... (``rsprof --pyspy``'s): py-spy raw stacks of an I/O daemon -> the trio thread's busy samples,
the share in rs' code (ReactiveSelector.* and pvfs/models/rs.py), by rs function."""
import collections
import json
import sys
from pathlib import Path


def main() -> None:
    tot = busy = rsn = 0
    by = collections.Counter(); top = collections.Counter(); other_threads = 0
    for fn in sys.argv[1:]:
        for line in Path(fn).read_text().splitlines():
            line = line.rstrip("\n")
            stack, _, n = line.rpartition(" ")
            n = int(n)
            frames = stack.split(";")
            tot += n
            if "MainThread" not in frames[0]:
                other_threads += n
                continue
            if "get_events" in frames[-1] or "epoll" in frames[-1].lower():
                continue
            busy += n
            rsf = [f for f in frames if f.startswith("ReactiveSelector.") or "models/rs.py" in f]
            leaf = frames[-1].split(" (")[0]
            top[leaf] += n
            if rsf:
                rsn += n
                by[rsf[0].split(" (")[0]] += n
                # the model's share and the innermost rs function
                inner = rsf[-1].split(" (")[0]
                by["  innermost: " + inner] += n
    out = {"samples": tot, "trio_busy": busy, "other_threads": other_threads, "in_rs": rsn,
           "rs_share_of_busy": rsn / busy if busy else None,
           "rs_by_outermost": {k: v for k, v in by.most_common() if not k.startswith("  ")},
           "rs_by_innermost": {k.strip()[11:]: v for k, v in by.most_common() if k.startswith("  ")},
           "busy_top_leaves": dict(top.most_common(15))}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
