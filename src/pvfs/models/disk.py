"""Emulated-disk presets and the ``[storage]`` table of the config (SPEC §2).

The timing model itself is C (``csrc/disk.c``, ``pvfs._native.Disk``) because it acts inside
the engine's data path. This module names its parameter sets and says which I/O daemon uses
which storage kind, so the daemon, the tools and the tests build the same disk:

    [storage]
    default = "posix"                  # posix | emulated | emulated:PRESET (every I/O daemon)
    iod1 = "emulated:ide-2000"         # per-daemon choice, by index in the [[iod]] list

``emulated`` alone means ``emulated:ide-2000``. Any field of ``DiskParams`` set in the table
(``read_bps = 2e7``, ``cache_bytes = 8388608``, ...) overrides the preset's value for every
emulated daemon (calibration tests use a disk with known parameters).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from pvfs import _native

DEFAULT_PRESET = "ide-2000"
STORAGE_KINDS = ("posix", "emulated")


@dataclass(frozen=True)
class DiskParams:
    """Parameters of ``pvfs._native.Disk`` (seconds, bytes, bytes per second)."""

    read_bps: float
    write_bps: float
    seek_min: float      # track-to-track seek
    seek_max: float      # full-stroke seek
    rotation: float      # one revolution; a repositioning waits half of it
    span: int            # bytes under the full stroke
    cache_bytes: int     # page cache in front of the disk
    readahead: int = 128 << 10
    # Write-back (csrc/writeback.c), Linux's defaults: the flusher starts above 10 % of the
    # cache dirty, writers are throttled above 20 %, a page dirty for 30 s is written back.
    dirty_background_ratio: float = 0.10
    dirty_ratio: float = 0.20
    dirty_expire: float = 30.0

    @property
    def avg_seek(self) -> float:
        """Mean seek between two uniformly random positions: E[sqrt(d/span)] = 8/15."""
        return self.seek_min + (self.seek_max - self.seek_min) * 8 / 15

    def build(self) -> _native.Disk:
        return _native.Disk(**asdict(self))


PRESETS: dict[str, DiskParams] = {
    # The thesis' nodes (§4.1): a 2.1 GB IDE disk, 4.2 MB/s sustained reads and 4.5 MB/s
    # writes (Bonnie), 56 MB of memory left for I/O buffers. Seek: ~9 ms on average for a
    # drive of that class (1 ms track to track, 16 ms full stroke: 1 + 15*8/15 = 9 ms), 5400
    # rpm (11.1 ms per revolution, 5.6 ms average rotational delay).
    "ide-2000": DiskParams(read_bps=4.2e6, write_bps=4.5e6, seek_min=0.001, seek_max=0.016,
                           rotation=60 / 5400, span=2_100_000_000, cache_bytes=56 << 20),
    # This machine's disk (virtio /dev/vda), measured 2026-11-23 with fio, O_DIRECT, 8 s each:
    # sequential 1 MiB reads 1008 MB/s, writes 2259 MB/s, random 4 KiB reads 0.063 ms mean
    # latency (0.058 ms of it positioning: no rotation, no seek curve to speak of). Cache: 8
    # GiB, a third of the machine's 24 GB (its page cache is that order of size).
    "today": DiskParams(read_bps=1.008e9, write_bps=2.259e9, seek_min=58e-6, seek_max=58e-6,
                        rotation=0.0, span=256 << 30, cache_bytes=8 << 30),
}


def preset(name: str, **overrides) -> DiskParams:
    """A named preset, with any field overridden (tests use small caches)."""
    try:
        base = PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown disk preset {name!r} (known: {', '.join(PRESETS)})") from None
    return replace(base, **overrides)


def parse_kind(text: str) -> tuple[str, str | None]:
    """``posix`` -> ("posix", None); ``emulated[:PRESET]`` -> ("emulated", PRESET)."""
    kind, _, name = str(text).partition(":")
    if kind not in STORAGE_KINDS:
        raise ValueError(f"storage kind must be one of {', '.join(STORAGE_KINDS)}, not {kind!r}")
    if kind == "posix":
        if name:
            raise ValueError("posix storage takes no preset")
        return "posix", None
    name = name or DEFAULT_PRESET
    preset(name)
    return "emulated", name


def storage_of(config, index: int) -> tuple[str, DiskParams | None]:
    """The storage kind of I/O daemon ``index`` and its disk's parameters (emulated only),
    from ``[storage]``."""
    table = config.extra.get("storage", {})
    if not isinstance(table, dict):
        raise ValueError("[storage] must be a table")  # noqa: TRY004 - a config error
    kind, name = parse_kind(table.get(f"iod{index}", table.get("default", "posix")))
    if kind == "posix":
        return kind, None
    fields = DiskParams.__dataclass_fields__
    over = {k: v for k, v in table.items() if k in fields}
    for k, v in over.items():
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise ValueError(f"[storage].{k} must be a number")  # noqa: TRY004 - config error
        over[k] = int(v) if fields[k].type == "int" else float(v)
    return kind, preset(name, **over)
