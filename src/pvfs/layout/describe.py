"""I/O descriptions: which logical bytes of a file a request touches, in stream order.

Three forms, as in thesis §3.2.3 and SPEC §2 — all expand to a list of regions in the order
their bytes appear in the caller's buffer (and on the wire):

* ``Regions([(off, len), ...])`` — list I/O.
* ``Strided(offset, gsize, stride, count)`` — the simple-strided PVFS partition (fig. 3.4):
  ``count`` regions of ``gsize`` bytes, ``stride`` apart, from ``offset``.
* ``Nested(offset, gsize, dims)`` — nested strides, ``dims = [(count, stride), ...]`` from the
  outermost dimension to the innermost; region ``(i1, ..., ik)`` starts at
  ``offset + sum(i_j * stride_j)``. A 2-D block of a row-major matrix is one ``Nested``.

On the wire a description is a short list: ``["r", [off0, len0, off1, len1, ...]]``,
``["s", offset, gsize, stride, count]`` or ``["n", offset, gsize, [[count, stride], ...]]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

MAX_OFFSET = 1 << 62  # no byte at or past 4 EiB
MAX_REGIONS = 1 << 20  # expanded regions per request
MAX_DIMS = 8


class DescriptionError(ValueError):
    """A description that is malformed or out of range (EINVAL on the wire)."""


@dataclass(frozen=True, slots=True)
class Regions:
    regions: tuple[tuple[int, int], ...]

    def __init__(self, regions) -> None:
        object.__setattr__(self, "regions", tuple((int(o), int(n)) for o, n in regions))

    def expand(self) -> list[tuple[int, int]]:
        return list(self.regions)

    def count(self) -> int:
        return len(self.regions)

    def total(self) -> int:
        return sum(n for _, n in self.regions)

    def to_wire(self) -> list:
        flat: list[int] = []
        for o, n in self.regions:
            flat += (o, n)
        return ["r", flat]


@dataclass(frozen=True, slots=True)
class Strided:
    offset: int
    gsize: int
    stride: int
    count: int

    def expand(self) -> list[tuple[int, int]]:
        o, g, s = self.offset, self.gsize, self.stride
        return [(o + i * s, g) for i in range(self.count)]

    def count_regions(self) -> int:
        return self.count

    def total(self) -> int:
        return self.gsize * self.count

    def to_wire(self) -> list:
        return ["s", self.offset, self.gsize, self.stride, self.count]


@dataclass(frozen=True, slots=True)
class Nested:
    offset: int
    gsize: int
    dims: tuple[tuple[int, int], ...]

    def __init__(self, offset: int, gsize: int, dims) -> None:
        object.__setattr__(self, "offset", int(offset))
        object.__setattr__(self, "gsize", int(gsize))
        object.__setattr__(self, "dims", tuple((int(c), int(s)) for c, s in dims))

    def expand(self) -> list[tuple[int, int]]:
        starts = [self.offset]
        for count, stride in self.dims:
            starts = [b + i * stride for b in starts for i in range(count)]
        return [(b, self.gsize) for b in starts]

    def total(self) -> int:
        return self.gsize * prod(c for c, _ in self.dims)

    def to_wire(self) -> list:
        return ["n", self.offset, self.gsize, [[c, s] for c, s in self.dims]]


Description = Regions | Strided | Nested


def region_count(desc: Description) -> int:
    if isinstance(desc, Regions):
        return len(desc.regions)
    if isinstance(desc, Strided):
        return desc.count
    return prod(c for c, _ in desc.dims)


def _int(v: object, what: str, lo: int = 0, hi: int = MAX_OFFSET) -> int:
    if type(v) is not int or not lo <= v <= hi:
        raise DescriptionError(f"{what} must be an integer in [{lo}, {hi}], got {v!r}")
    return v


def validate(desc: Description) -> Description:
    """Check ranges so that every expanded region lies in ``[0, MAX_OFFSET)``."""
    if isinstance(desc, Regions):
        if len(desc.regions) > MAX_REGIONS:
            raise DescriptionError(f"more than {MAX_REGIONS} regions")
        for o, n in desc.regions:
            _int(o, "region offset")
            _int(n, "region length")
            if o + n > MAX_OFFSET:
                raise DescriptionError("region ends past the largest file offset")
        return desc
    if isinstance(desc, Strided):
        _int(desc.offset, "offset")
        _int(desc.gsize, "gsize")
        _int(desc.stride, "stride", 0)
        _int(desc.count, "count", 0, MAX_REGIONS)
        last = desc.offset + desc.stride * max(desc.count - 1, 0) + desc.gsize
        if last > MAX_OFFSET:
            raise DescriptionError("strided description ends past the largest file offset")
        return desc
    if isinstance(desc, Nested):
        _int(desc.offset, "offset")
        _int(desc.gsize, "gsize")
        if not 1 <= len(desc.dims) <= MAX_DIMS:
            raise DescriptionError(f"nested description needs 1..{MAX_DIMS} dimensions")
        end = desc.offset + desc.gsize
        for c, s in desc.dims:
            _int(c, "dimension count", 0, MAX_REGIONS)
            _int(s, "dimension stride")
            end += s * max(c - 1, 0)
        if region_count(desc) > MAX_REGIONS:
            raise DescriptionError(f"more than {MAX_REGIONS} regions")
        if end > MAX_OFFSET:
            raise DescriptionError("nested description ends past the largest file offset")
        return desc
    raise DescriptionError(f"not a description: {desc!r}")


def from_wire(value: object) -> Description:
    """Parse and validate a wire description; raises DescriptionError."""
    if not isinstance(value, list) or not value or not isinstance(value[0], str):
        raise DescriptionError("description must be a list starting with its kind")
    kind = value[0]
    if kind == "r" and len(value) == 2 and isinstance(value[1], list):
        flat = value[1]
        if len(flat) % 2 or len(flat) > 2 * MAX_REGIONS:
            raise DescriptionError("region list must hold (offset, length) pairs")
        return validate(Regions(zip(flat[0::2], flat[1::2])) if all(
            type(x) is int for x in flat) else _bad("region values must be integers"))
    if kind == "s" and len(value) == 5:
        return validate(Strided(*value[1:]))
    if kind == "n" and len(value) == 4 and isinstance(value[3], list):
        dims = value[3]
        if not all(isinstance(d, list) and len(d) == 2 for d in dims):
            raise DescriptionError("nested dims must be [count, stride] pairs")
        if type(value[1]) is not int or type(value[2]) is not int:
            raise DescriptionError("nested offset and gsize must be integers")
        if not all(type(x) is int for d in dims for x in d):
            raise DescriptionError("nested dims must be integers")
        return validate(Nested(value[1], value[2], dims))
    raise DescriptionError(f"unknown description kind {kind!r} or wrong arity")


def _bad(msg: str):
    raise DescriptionError(msg)


def contiguous(offset: int, length: int) -> Regions:
    return Regions(((offset, length),))
