"""What a failed check prints and writes: the shrunk steps (in their global order and per
client), the expected and the actual bytes, and a trace ``pvfs-admin replay`` can re-run.

The trace format (``pvfs.traces.format``) has ranks, not nodes, and writes its own
deterministic bytes, so a trace reproduces the *access pattern* of the counterexample: rank i
does client i's opens, closes, reads, writes and fsyncs in the same global order (a barrier
after every step). What it cannot express is listed with the trace: name-space operations,
truncate, xattrs and striping changes, failed calls, and the placement of ranks on different
nodes (``replay`` runs every rank on one target). The exact steps are saved next to it as JSON.
"""

from __future__ import annotations

import json
from typing import Any

from pvfs.check.model import Mismatch
from pvfs.traces.format import FileEntry, Flag, Op, Record, Trace, save

_FLAG_BITS = {"r": Flag.RD, "w": Flag.WR, "rw": Flag.RD | Flag.WR, "creat": Flag.CREAT,
              "trunc": Flag.TRUNC, "excl": Flag.EXCL, "sync": Flag.SYNC}


def _args(step: dict[str, Any]) -> str:
    a = dict(step["args"])
    a.pop("file", None)
    return " ".join(f"{k}={v}" for k, v in a.items())


def format_steps(steps: list[dict[str, Any]]) -> list[str]:
    """The global order, then each client's own sequence."""
    width = max([len(s["client"]) for s in steps] + [6])
    lines = ["steps (shrunk), in the order they ran:"]
    for i, s in enumerate(steps, 1):
        lines.append(f"  {i:3d}  {s['client']:<{width}}  {s['op']:<9} {_args(s):<44} "
                     f"-> {s['result']}")
    lines.append("per client:")
    for client in dict.fromkeys(s["client"] for s in steps):
        mine = [f"#{i} {s['op']}" for i, s in enumerate(steps, 1) if s["client"] == client]
        lines.append(f"  {client}: " + ", ".join(mine))
    return lines


def _hex(data: bytes) -> str:
    return data.hex(" ") if data else "(none)"


def format_mismatch(m: Mismatch) -> list[str]:
    """Expected versus actual bytes around the first wrong one."""
    lines = []
    if m.first_bad is not None:
        i = m.first_bad - m.offset
        lo = max(0, i - 8)
        got = f"0x{m.got[i]:02x}" if i < len(m.got) else "no byte (past the end)"
        lines.append(f"first wrong byte at offset {m.first_bad}: got {got}, allowed "
                     + (", ".join(f"0x{v:02x}" for v in (m.allowed or [])) or "no byte"))
        lines.append(f"  actual   [{m.offset + lo}..]: {_hex(m.got[lo:lo + 16])}")
        lines.append(f"  expected [{m.offset + lo}..]: {_hex(m.expected[lo:lo + 16])}"
                     "  (newest state)")
    elif m.lengths is not None:
        lines.append(f"allowed length {m.lengths[0]}..{m.lengths[1]}, got {len(m.got)} bytes")
        if m.got or m.expected:
            lines.append(f"  actual   [{m.offset}..]: {_hex(m.got[:16])}")
            lines.append(f"  expected [{m.offset}..]: {_hex(m.expected[:16])}  (newest state)")
    return lines


def mismatch_json(m: Mismatch | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {"what": m.what, "offset": m.offset, "first_bad": m.first_bad,
            "allowed": m.allowed, "lengths": list(m.lengths) if m.lengths else None,
            "actual": m.got[:4096].hex(), "expected": m.expected[:4096].hex()}


def to_trace(steps: list[dict[str, Any]], clients: list[str],
             seed: int) -> tuple[Trace, list[str]]:
    """The steps as a trace (one rank per client) and what the trace could not express."""
    names: dict[str, int] = {}
    records: list[Record] = []
    lost: list[str] = []
    rank_of = {c: i for i, c in enumerate(clients)}
    for i, s in enumerate(steps, 1):
        op, a = s["op"], s["args"]
        rank = rank_of.get(s["client"])
        rec = None
        ok = not str(s["result"]).split()[0].startswith("E")
        if rank is None or not ok:
            why = "not a client's step" if ok else "failed: " + s["result"]
            lost.append(f"#{i} {s['op']} ({why})")
        elif op in ("open", "close", "pread", "pwrite", "fsync"):
            fid = names.setdefault(a["name"], len(names))
            if op == "open":
                flags = 0
                for part in str(a["flags"]).split(","):
                    flags |= _FLAG_BITS[part]
                rec = Record(rank, 0.0, Op.OPEN, fid, 0, 0, flags)
            elif op == "close":
                rec = Record(rank, 0.0, Op.CLOSE, fid, 0, 0)
            elif op == "fsync":
                rec = Record(rank, 0.0, Op.FSYNC, fid, 0, 0)
            elif op == "pread":
                rec = Record(rank, 0.0, Op.READ, fid, int(a["offset"]), int(a["length"]))
            else:
                rec = Record(rank, 0.0, Op.WRITE, fid, int(a["offset"]), int(a["length"]),
                             Flag.SYNC if a.get("sync") else 0)
        else:
            lost.append(f"#{i} {op} {_args(s)}")
        if rec is not None:
            records.append(rec)
        for r in range(len(clients)):  # keep the global order: everyone waits
            records.append(Record(r, 0.0, Op.BARRIER, -1, 0, 0))
    files = [FileEntry(fid, name) for name, fid in names.items()]
    trace = Trace(nprocs=len(clients), files=files, records=records,
                  generator={"name": "pvfs-admin check", "params": {"clients": clients},
                             "seed": seed})
    trace.validate()
    return trace, lost


def write_trace(path: str, steps: list[dict[str, Any]], clients: list[str],
                seed: int) -> list[str]:
    """Write the trace to ``path`` and the exact steps to ``path + '.steps.json'``; returns
    what the trace could not express."""
    trace, lost = to_trace(steps, clients, seed)
    save(trace, path)
    with open(path + ".steps.json", "w") as fh:
        json.dump({"clients": clients, "seed": seed, "steps": steps}, fh, indent=1)
    return lost
