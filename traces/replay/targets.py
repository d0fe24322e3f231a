"""Where a replay runs: any local or mounted directory, or a pvfs file system (native API).

A target is named by a string so every worker process (or MPI rank) can open its own:

- ``pvfs://CONFIG_PATH`` — the native API (``pvfs.connect(CONFIG_PATH)``); an optional
  ``?root=/dir`` puts the trace's files under ``/dir`` instead of ``/``;
- ``mount:PATH``, ``local:PATH``, ``file://PATH`` or a plain ``PATH`` — a directory of any
  file system, e.g. a pvfs FUSE mount, tmpfs, ext4, another parallel file system's mount.

The trace's file names are relative paths below the target's root. Offsets in records are
absolute, so files are never opened with ``O_APPEND`` (that would move every write to the end).
"""

from __future__ import annotations

import errno
import hashlib
import os
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, Protocol, Self
from urllib.parse import parse_qs

from pvfs.traces.format import FileEntry, Flag
from pvfs.traces.replay.data import CHUNK, file_key, iter_pattern


class Handle(Protocol):
    """An open file as the replay engine uses it (the subset of the native ``File`` API)."""

    def pread(self, length: int, offset: int) -> bytes:
        """Up to ``length`` bytes at ``offset`` (short at end of file)."""
        ...

    def pwrite(self, data: bytes, offset: int) -> int:
        """Write ``data`` at ``offset``; the number of bytes written."""
        ...

    def read_list(self, regions: list[tuple[int, int]]) -> bytes:
        """The regions' bytes concatenated (zeros where the file has none)."""
        ...

    def write_list(self, regions: list[tuple[int, int]], data: bytes) -> int:
        """Write ``data`` (the regions' bytes concatenated) to the regions."""
        ...

    def fsync(self) -> None:
        """Flush the file to stable storage."""
        ...

    def close(self) -> None:
        """Close the file."""
        ...


def os_flags(flags: int) -> int:
    """``os.O_*`` flags for a record's :class:`Flag` bits (never ``O_APPEND``)."""
    if flags & Flag.WR:
        out = os.O_RDWR if flags & Flag.RD else os.O_WRONLY
    else:
        out = os.O_RDONLY
    if flags & Flag.CREAT:
        out |= os.O_CREAT
    if flags & Flag.TRUNC:
        out |= os.O_TRUNC
    if flags & Flag.EXCL:
        out |= os.O_EXCL
    if flags & Flag.SYNC:
        out |= os.O_SYNC
    return out


class Target(ABC):
    """A file system a trace can be replayed on."""

    spec: str

    @abstractmethod
    def open(self, name: str, flags: int) -> Handle:
        """Open trace file ``name`` with :class:`Flag` bits ``flags``."""

    @abstractmethod
    def remove(self, name: str) -> None:
        """Remove ``name`` if it exists."""

    @abstractmethod
    def makedirs(self, name: str) -> None:
        """Create the directory ``name`` and its parents (existing ones are fine)."""

    @abstractmethod
    def size(self, name: str) -> int | None:
        """Size of ``name`` in bytes, or None when it does not exist."""

    def counters(self) -> list[dict[str, Any]] | None:
        """The daemons' counters (cache hits, scheduler) when the target has daemons."""
        return None

    def close(self) -> None:
        """Release connections."""

    # ------------------------------------------------------------ shared on top of the above
    def prepare(self, files: Iterable[FileEntry]) -> None:
        """Bring the files to the trace's starting state.

        Parent directories are created; every file is removed; files that exist before the
        program starts are then created with their deterministic content (``size`` bytes).
        """
        for entry in files:
            parent = os.path.dirname(entry.name)
            if parent:
                self.makedirs(parent)
            self.remove(entry.name)
            if entry.pre_exists:
                key = file_key(entry.name)
                handle = self.open(entry.name, Flag.WR | Flag.CREAT | Flag.TRUNC)
                try:
                    for off, chunk in iter_pattern(key, entry.size):
                        handle.pwrite(chunk, off)
                finally:
                    handle.close()

    def digest(self, name: str) -> str | None:
        """SHA-256 of the file's whole content (None when it does not exist)."""
        size = self.size(name)
        if size is None:
            return None
        h = hashlib.sha256()
        handle = self.open(name, Flag.RD)
        try:
            off = 0
            while off < size:
                data = handle.pread(min(CHUNK, size - off), off)
                if not data:
                    break
                h.update(data)
                off += len(data)
        finally:
            handle.close()
        return h.hexdigest()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------- local directory
class LocalHandle:
    """A file of a local or mounted directory, through ``os.pread``/``os.pwrite``."""

    def __init__(self, path: str, flags: int) -> None:
        self.fd = os.open(path, os_flags(flags), 0o644)

    def pread(self, length: int, offset: int) -> bytes:
        """Up to ``length`` bytes at ``offset``."""
        parts, got = [], 0
        while got < length:
            data = os.pread(self.fd, length - got, offset + got)
            if not data:
                break
            parts.append(data)
            got += len(data)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def pwrite(self, data: bytes, offset: int) -> int:
        """Write all of ``data`` at ``offset``."""
        view, done = memoryview(data), 0
        while done < len(view):
            done += os.pwrite(self.fd, view[done:], offset + done)
        return done

    def read_list(self, regions: list[tuple[int, int]]) -> bytes:
        """The regions concatenated; zeros past end of file, as the native API does."""
        out = []
        for off, n in regions:
            data = self.pread(n, off)
            out.append(data if len(data) == n else data + bytes(n - len(data)))
        return b"".join(out)

    def write_list(self, regions: list[tuple[int, int]], data: bytes) -> int:
        """Scatter ``data`` over the regions."""
        view, pos = memoryview(data), 0
        for off, n in regions:
            self.pwrite(view[pos:pos + n], off)
            pos += n
        return pos

    def fsync(self) -> None:
        """``fsync(2)``."""
        os.fsync(self.fd)

    def close(self) -> None:
        """``close(2)`` (idempotent)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class LocalTarget(Target):
    """A directory: local disk, tmpfs, a pvfs mount or any other mounted file system."""

    def __init__(self, root: str, spec: str | None = None) -> None:
        self.root = os.path.abspath(root)
        self.spec = spec or self.root
        os.makedirs(self.root, exist_ok=True)

    def path(self, name: str) -> str:
        """The full path of a trace file name."""
        return os.path.join(self.root, name.lstrip("/"))

    def open(self, name: str, flags: int) -> LocalHandle:
        """Open ``name`` below the root."""
        return LocalHandle(self.path(name), flags)

    def remove(self, name: str) -> None:
        """Unlink ``name`` if present."""
        try:
            os.unlink(self.path(name))
        except FileNotFoundError:
            pass

    def makedirs(self, name: str) -> None:
        """``os.makedirs(exist_ok=True)`` below the root."""
        os.makedirs(self.path(name), exist_ok=True)

    def size(self, name: str) -> int | None:
        """``st_size`` or None."""
        try:
            return os.stat(self.path(name)).st_size
        except FileNotFoundError:
            return None


# ------------------------------------------------------------------------ pvfs (native API)
class PvfsTarget(Target):
    """A pvfs file system through the native API: a small adapter over ``pvfs.connect``."""

    def __init__(self, config_path: str, root: str = "/", spec: str | None = None) -> None:
        import pvfs

        connect = getattr(pvfs, "connect", None)
        if connect is None:
            raise RuntimeError("the pvfs native API (pvfs.connect) is not available")
        self.fs = connect(config_path)
        self.root = "/" + root.strip("/") if root.strip("/") else ""
        self.spec = spec or f"pvfs://{config_path}"
        if self.root:
            self._mkdirs(self.root)

    def path(self, name: str) -> str:
        """The absolute pvfs path of a trace file name."""
        return f"{self.root}/{name.lstrip('/')}"

    def _mkdirs(self, path: str) -> None:
        makedirs = getattr(self.fs, "makedirs", None)
        if makedirs is not None:
            makedirs(path, exist_ok=True)
            return
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            try:
                self.fs.mkdir("/" + "/".join(parts[:i]))
            except FileExistsError:
                pass

    def open(self, name: str, flags: int) -> Handle:
        """``fs.open`` with ``os.O_*`` flags."""
        handle: Handle = self.fs.open(self.path(name), os_flags(flags))
        return handle

    def remove(self, name: str) -> None:
        """``fs.unlink`` if present."""
        try:
            self.fs.unlink(self.path(name))
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise

    def makedirs(self, name: str) -> None:
        """Create ``name`` and its parents."""
        self._mkdirs(self.path(name))

    def size(self, name: str) -> int | None:
        """``st_size`` from the manager, or None."""
        try:
            return int(self.fs.stat(self.path(name)).st_size)
        except FileNotFoundError:
            return None

    def counters(self) -> list[dict[str, Any]] | None:
        """``fs.iod_stats()`` when the client has it."""
        stats = getattr(self.fs, "iod_stats", None)
        if stats is None:
            return None
        try:
            return list(stats())
        except (OSError, RuntimeError):
            return None  # counters are a bonus; the replay's own numbers stand

    def close(self) -> None:
        """Disconnect."""
        self.fs.close()


def parse_spec(spec: str) -> tuple[str, str, dict[str, str]]:
    """``(kind, location, options)`` of a target string; kind is ``pvfs`` or ``local``."""
    options: dict[str, str] = {}
    if spec.startswith("pvfs://"):
        rest = spec[len("pvfs://"):]
        if "?" in rest:
            rest, query = rest.split("?", 1)
            options = {k: v[-1] for k, v in parse_qs(query).items()}
        if not rest:
            raise ValueError("pvfs target needs a config path: pvfs:///path/to/pvfs.toml")
        return "pvfs", rest, options
    for prefix in ("mount:", "local:", "file://"):
        if spec.startswith(prefix):
            return "local", spec[len(prefix):], options
    if "://" in spec:
        raise ValueError(f"unknown target scheme in {spec!r} (pvfs://, mount:, local:, a path)")
    return "local", spec, options


def open_target(spec: str) -> Target:
    """Open the target a string names (see the module docstring).

    Raises:
        ValueError: for a malformed spec.
        RuntimeError: when the pvfs native API is not available.
    """
    kind, location, options = parse_spec(spec)
    if kind == "pvfs":
        return PvfsTarget(location, options.get("root", "/"), spec)
    return LocalTarget(location, spec)
