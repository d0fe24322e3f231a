"""Byte counts as people write them: one rule for every part that reads or prints a size.

Mount options (``cache_size=256M``), ``pvfs-admin`` arguments (``--ssize 1M``), trace
generator parameters (``block=64K``) and benchmark jobs (``--size 1G``) all read sizes with
:func:`parse_size`, and tables print them with :func:`format_size`, so a size that one part
accepts every other part accepts too.

The rule (units are powers of 1024 everywhere, as fio and the Linux tools read them):

* a number, whole (``4096``) or decimal (``1.5``), optionally followed by white space;
* then optionally a unit letter ``k``, ``m``, ``g``, ``t`` or ``p`` (any case), which may be
  followed by ``i`` (``Ki``, ``MiB``);
* then optionally ``b`` (``KB``, ``KiB``, ``512b``);
* the value must come to a whole number of bytes (``1.5k`` is 1536; ``1.3`` is refused
  rather than silently truncated);
* white space around the whole text is ignored; signs, exponents and hex are refused.

An ``int`` passes through unchanged (typed parameters), a negative one is refused.
"""

from __future__ import annotations

import re

__all__ = ["format_size", "parse_size"]

_SCALE = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:([kmgtp])i?)?b?\s*$", re.IGNORECASE)
_NAMES = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def parse_size(text: str | int) -> int:
    """Bytes for ``4096``, ``64k``, ``64K``, ``1M``, ``2MiB``, ``1.5G``, ``512b``, ``8 m``.

    Args:
        text: the size as written, or an ``int`` that is already a byte count.

    Raises:
        ValueError: the text is not a size by the module's rule, or not whole bytes.
    """
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"not a size: {text!r} (negative)")
        return text
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ValueError(f"not a size: {text!r} (examples: 4096, 64k, 1M, 2GiB)")
    scale = _SCALE[(m.group(2) or "").lower()]
    whole, _, frac = m.group(1).partition(".")
    # Exact integer arithmetic: a float is off by bytes past 2**53 and would decide the
    # whole-bytes check by rounding.
    numerator = int(whole + frac) * scale
    denominator = 10 ** len(frac)
    if numerator % denominator:
        raise ValueError(f"not a whole number of bytes: {text!r}")
    return numerator // denominator


def format_size(n: float | None) -> str:
    """``1536`` -> ``"1.5 KiB"``; exact bytes below 1 KiB; ``"-"`` for None (tables)."""
    if n is None:
        return "-"
    value = float(n)
    for unit in _NAMES:
        if abs(value) < 1024 or unit == _NAMES[-1]:
            if unit == "B":
                return f"{int(value)} B"
            return f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable: the loop returns at the last unit")
