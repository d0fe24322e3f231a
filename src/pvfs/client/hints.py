"""Access hints: a client tells the I/O daemons what collective operation its reads belong to.

The reactive selector (thesis §5.5) has to *estimate* the operation in progress from the
requests it has seen so far (eq. 5.7-5.10): at the start of a collective only a few of the
tasks' requests have arrived, at its end only the stragglers remain, and the number of tasks
comes from the manager a round trip later. The thesis' future work (§5.8) proposes hints that
"provide exact values for S_req, N_req, D_req and R_req for a parallel operation directly".
An ``AccessHint`` is that: set on an open file (``File.set_hint``), it travels with every
read of that handle in the request's header (``"hint"``, validated by the daemon's schema,
``pvfs.protocol.schema.collective_hint``) and replaces the daemon's estimate while the read is
in service. The numbers describe the whole operation, all tasks and all daemons together;
each daemon takes its share. Only a daemon running ``rs`` looks at them; a wrong hint costs
performance, never correctness.

Example -- 14 tasks each reading its own 1 MiB block of a 14 MiB file at once::

    hint = AccessHint.collective(tasks=14, per_task=1 << 20)
    f.set_hint(hint)
    f.pread(1 << 20, rank << 20)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from pvfs.protocol.schema import collective_hint


@dataclass(frozen=True)
class AccessHint:
    """One collective operation, seen whole.

    Args:
        size: bytes all the tasks' requests ask for together (``S_req``).
        requests: requests in service at once, one per task in the usual case (``N_req``).
        regions: disjoint regions in those requests (``D_req``; = ``requests`` when each
            request is one contiguous region).
        range: bytes from the lowest to the highest file position they touch (``R_req``).

    Raises:
        ValueError: a field is not an integer, negative, beyond the largest offset, or
            ``requests`` is below 1 -- the same rules the daemons apply.
    """

    size: int
    requests: int
    regions: int
    range: int

    def __post_init__(self) -> None:
        collective_hint(asdict(self))

    def to_wire(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def collective(cls, tasks: int, per_task: int, regions_per_task: int = 1,
                   extent: int | None = None, at_once: int = 1) -> AccessHint:
        """The hint of ``tasks`` tasks each reading ``per_task`` bytes in ``at_once`` equal
        requests one after the other (the thesis' random-block tasks read one block at a
        time: ``at_once`` = blocks per task), each request of ``regions_per_task`` regions,
        over ``extent`` bytes of the file (default: the data is dense, ``tasks * per_task``).
        """
        if tasks < 1 or at_once < 1 or regions_per_task < 1 or per_task < 0:
            raise ValueError("tasks, at_once and regions_per_task must be >= 1, per_task >= 0")
        total = tasks * per_task
        return cls(size=total // at_once, requests=tasks, regions=tasks * regions_per_task,
                   range=total if extent is None else extent)
