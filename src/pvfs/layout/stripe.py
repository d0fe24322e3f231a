"""Striping: round robin of ``ssize``-byte units over ``pcount`` I/O daemons from ``base``.

This is the distribution of thesis table 3.1. Logical unit ``u`` of a file (bytes
``[u*ssize, (u+1)*ssize)``) lives on the file's ``u % pcount``-th daemon, i.e. on I/O daemon
number ``(base + u % pcount) % niods``, at local offset ``(u // pcount) * ssize + (x % ssize)``.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_SSIZE = 512
MAX_SSIZE = 1 << 30
MAX_PCOUNT = 4096


@dataclass(frozen=True, slots=True)
class Stripe:
    """A file's distribution. ``pcount=-1`` (only in defaults) means "all I/O daemons"."""

    base: int = 0
    pcount: int = -1
    ssize: int = 65536

    def validate(self, niods: int | None = None) -> None:
        if not isinstance(self.base, int) or self.base < 0:
            raise ValueError(f"stripe base must be >= 0, got {self.base!r}")
        if not isinstance(self.pcount, int) or not (self.pcount == -1 or 1 <= self.pcount <= MAX_PCOUNT):
            raise ValueError(f"stripe pcount must be -1 or 1..{MAX_PCOUNT}, got {self.pcount!r}")
        if not isinstance(self.ssize, int) or not (MIN_SSIZE <= self.ssize <= MAX_SSIZE):
            raise ValueError(f"stripe ssize must be {MIN_SSIZE}..{MAX_SSIZE} bytes, got {self.ssize!r}")
        if niods is not None:
            if self.base >= niods:
                raise ValueError(f"stripe base {self.base} but only {niods} I/O daemons")
            if self.pcount > niods:
                raise ValueError(f"stripe pcount {self.pcount} but only {niods} I/O daemons")

    def resolved(self, niods: int) -> Stripe:
        """This stripe with ``pcount=-1`` replaced by ``niods`` (and checked against it)."""
        s = self if self.pcount != -1 else Stripe(self.base, niods, self.ssize)
        s.validate(niods)
        return s

    def iod_of_rank(self, rank: int, niods: int) -> int:
        """The I/O daemon index holding the file's ``rank``-th share."""
        return (self.base + rank) % niods

    def rank_of_iod(self, iod: int, niods: int) -> int | None:
        """The share rank I/O daemon ``iod`` holds, or None if it holds none of this file."""
        rank = (iod - self.base) % niods
        return rank if rank < self.pcount else None

    def to_wire(self) -> list[int]:
        return [self.base, self.pcount, self.ssize]

    @classmethod
    def from_wire(cls, value: object) -> Stripe:
        if (not isinstance(value, (list, tuple)) or len(value) != 3
                or not all(type(v) is int for v in value)):
            raise ValueError("stripe must be [base, pcount, ssize] integers")
        s = cls(*value)
        s.validate()
        return s


def local_size(stripe: Stripe, rank: int, logical_size: int) -> int:
    """Size of share ``rank``'s stripe file for a file of ``logical_size`` bytes."""
    ss, pc = stripe.ssize, stripe.pcount
    full_units, rem = divmod(logical_size, ss)
    rounds, extra = divmod(full_units, pc)
    size = rounds * ss
    if rank < extra:
        size += ss
    elif rank == extra:
        size += rem
    return size


def logical_end(stripe: Stripe, rank: int, local_len: int) -> int:
    """Logical file size implied by share ``rank`` holding ``local_len`` bytes (0 if none)."""
    if local_len <= 0:
        return 0
    ss, pc = stripe.ssize, stripe.pcount
    last = local_len - 1
    local_unit, within = divmod(last, ss)
    unit = local_unit * pc + rank
    return unit * ss + within + 1


def logical_size(stripe: Stripe, local_sizes: list[int]) -> int:
    """The file size implied by every share's stripe-file size (index = rank)."""
    return max((logical_end(stripe, r, n) for r, n in enumerate(local_sizes)), default=0)
