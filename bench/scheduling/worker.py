"""One task of a scheduling study or calibration run (``python -m pvfs.bench.scheduling.worker``).

A study runs N of these, on N client hosts (``pvfs.cluster.netns``) or as N local processes, and
drives them over stdin/stdout with JSON lines so that every task starts its access at the
same moment -- the thesis' tasks "synchronize before the access" (§4.3):

    driver -> {"path": P, "ops": [["read", off, len] | ["list", [[off, len], ...]]
                                 | ["write", off, len] | ["wlist", [[off, len], ...]], ...],
               "hint": {"size", "requests", "regions", "range"} (optional: pvfs.AccessHint)}
               (a write op writes that many bytes of a pattern; a file with any write op
               is opened "r+b", else "rb")
    worker -> {"ready": true}                 (file open, nothing read yet)
    driver -> {"go": true, "at": T}           (to every worker: the barrier; each sleeps
                                               until time.monotonic() == T, one clock for
                                               every network namespace of the machine)
    worker -> {"t": seconds, "bytes": n}      (time of the task's whole access; file closed)

and, for the driver's own needs from inside the network (the driver may not reach it):

    driver -> {"create": P, "size": n, "ssize": s, "base": b, "pcount": c}
                                                     -> {"created": n}  (pseudo-random data)
    driver -> {"call": [iod, op, {fields}]}          -> {"reply": {...}}

An empty line or EOF ends the worker. Its task service time covers its requests only, not
the open: the file is opened before "ready" (so the daemons' N_file counts every task).
"""

from __future__ import annotations

import json
import sys
import time


def open_mode(ops: list) -> str:
    """The mode a task's file is opened in: for writing when any of its ops writes."""
    return "r+b" if any(op[0] in ("write", "wlist") for op in ops) else "rb"


def _pattern(n: int) -> memoryview:
    """``n`` bytes to write (one buffer, grown as needed, its first ``n`` bytes)."""
    global _BUF
    if len(_BUF) < n:
        _BUF = bytes(range(256)) * (n // 256 + 1)
    return memoryview(_BUF)[:n]


_BUF = b""


def _do(f, op: list) -> int:
    kind = op[0]
    if kind == "read":
        return len(f.pread(op[2], op[1]))
    if kind == "list":
        return len(f.read_list([tuple(r) for r in op[1]]))
    if kind == "write":
        return f.pwrite(_pattern(op[2]), op[1])
    regions = [tuple(r) for r in op[1]]
    return f.write_list(regions, _pattern(sum(n for _, n in regions)))


def _run(fs, msg: dict) -> dict:
    import pvfs

    for op in msg["ops"]:                    # the buffer exists before the clock starts
        if op[0] in ("write", "wlist"):
            _pattern(op[2] if op[0] == "write" else sum(n for _, n in op[1]))
    with fs.open(msg["path"], open_mode(msg["ops"])) as f:
        if msg.get("hint"):
            f.set_hint(pvfs.AccessHint(**msg["hint"]))
        _say({"ready": True})
        go = sys.stdin.readline()
        if not go.strip():
            raise SystemExit(0)
        # Released one by one through pipes, 14 tasks on 2 cores began up to 0.1 s apart;
        # a common start time makes them begin together, as an MPI barrier would.
        at = json.loads(go).get("at")
        if at is not None and at > time.monotonic():
            time.sleep(at - time.monotonic())
        got = 0
        t0 = time.perf_counter()
        for op in msg["ops"]:
            got += _do(f, op)
        t = time.perf_counter() - t0
    return {"t": t, "bytes": got}


def _create(fs, msg: dict) -> dict:
    import random

    import pvfs

    rng = random.Random(msg["create"])
    size, chunk = msg["size"], 1 << 20
    stripe = pvfs.Stripe(msg.get("base", 0), msg.get("pcount", -1), msg["ssize"])
    with fs.open(msg["create"], "wb", stripe=stripe) as f:
        for off in range(0, size, chunk):
            f.pwrite(rng.randbytes(min(chunk, size - off)), off)
    return {"created": size}


def _say(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    import pvfs

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m pvfs.bench.scheduling.worker CONFIG", file=sys.stderr)
        return 2
    with pvfs.connect(args[0]) as fs:
        for line in sys.stdin:
            if not line.strip():
                break
            msg = json.loads(line)
            try:
                if "create" in msg:
                    _say(_create(fs, msg))
                elif "call" in msg:
                    iod, op, fields = msg["call"]
                    _say({"reply": fs.iod_call(iod, op, **fields)})
                else:
                    _say(_run(fs, msg))
            except OSError as exc:
                _say({"error": f"{type(exc).__name__}: {exc}"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
