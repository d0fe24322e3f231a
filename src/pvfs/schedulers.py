"""The I/O daemons' scheduling algorithms, named once (pure Python: no C extension needed).

The fixed algorithms are the C engine's policies (``csrc/sched.c``, one ops table each, in
``pv_sched_all``'s order, exported as ``pvfs._native.ALGORITHMS``); ``rs`` is no engine
policy but the reactive selector (``pvfs.models.rs``, ``daemons/iod/rs.py``) that switches
the engine among them. The config, the model, ``pvfs-admin init``/``sched`` and the studies
take the names from here; ``tests/unit/test_sched_names.py`` holds this list equal to the
engine's.
"""

from __future__ import annotations

__all__ = ["ALGORITHMS", "DEFAULT", "DESCRIPTIONS", "FIXED", "SELECTOR", "describe"]

#: The engine's policies, in its order (thesis §4.2). Ties of the selector go to the earlier.
FIXED: tuple[str, ...] = ("opt1", "opt2", "opt3", "opt4")
#: The reactive selector (thesis ch. 5): a config and ``sched set`` value, not an engine policy.
SELECTOR = "rs"
#: Everything ``[scheduler].algorithm`` and ``pvfs-admin sched set`` accept.
ALGORITHMS: tuple[str, ...] = (*FIXED, SELECTOR)
#: What a file system runs when its config names no algorithm (PVFS's own).
DEFAULT = "opt1"

DESCRIPTIONS: dict[str, str] = {
    "opt1": "network-oriented",
    "opt2": "CSCAN",
    "opt3": "window scan",
    "opt4": "SSTF/disk-directed",
    SELECTOR: "reactive: per request, the one the model predicts fastest",
}


def describe(sep: str = ", ") -> str:
    """Every algorithm with its one-line description, e.g. for ``--help``."""
    return sep.join(f"{a} {DESCRIPTIONS[a]}" for a in ALGORITHMS)
