"""A hypothesis state machine: pipelined writes (``open(..., pipeline=True)``) mixed with
plain writes, reads in order (read ahead), sizes, truncations and fsyncs of other handles of
the same client, against an in-memory model. Every read or size must see every write whose
``pwrite`` returned, whichever handle made it (``pvfs.client.pipeline``: settled first; a
read-ahead dropped first, ``pvfs.client.readahead``)."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from pvfs import Stripe

FILES = st.sampled_from(["f0", "f1"])
SIZES = st.integers(1, 300_000)
OFFSETS = st.integers(0, 400_000)


def make_machine(cluster):
    class Pipelined(RuleBasedStateMachine):
        """Model: name -> bytearray; at most one pipelined handle per file, kept open."""

        @initialize()
        def setup(self):
            self.fs = cluster.connect()
            self.root = f"/pm{id(self)}"
            self.fs.mkdir(self.root)
            self.model: dict[str, bytearray] = {}
            self.pipes: dict[str, object] = {}
            self.readers: dict[str, object] = {}  # open throughout: no manager call first
            self.resume: dict[str, tuple[int, int]] = {}  # where each reader's order goes on
            for i, name in enumerate(("f0", "f1")):
                with self.fs.open(self.path(name), "wb", stripe=Stripe(i, 2 + i, 16384)):
                    pass
                self.model[name] = bytearray()
                self.readers[name] = self.fs.open(self.path(name), "rb", pipeline=True)

        def path(self, name: str) -> str:
            return f"{self.root}/{name}"

        def teardown(self):
            for f in [*self.pipes.values(), *self.readers.values()]:
                f.close()
            for name in self.model:
                self.fs.unlink(self.path(name))
            self.fs.rmdir(self.root)
            self.fs.close()

        def put(self, name: str, off: int, data: bytes) -> None:
            m = self.model[name]
            if len(m) < off + len(data):
                m.extend(bytes(off + len(data) - len(m)))
            m[off:off + len(data)] = data

        def pipe(self, name: str):
            if name not in self.pipes:
                self.pipes[name] = self.fs.open(self.path(name), "r+b", pipeline=True)
            return self.pipes[name]

        @rule(name=FILES, off=OFFSETS, size=SIZES, byte=st.integers(1, 255))
        def pipelined_write(self, name, off, size, byte):
            data = bytes([byte]) * size
            assert self.pipe(name).pwrite(data, off) == size
            self.put(name, off, data)
            assert not self.readers[name]._ahead.owing  # dropped by the write

        @rule(name=FILES, off=OFFSETS, size=SIZES, byte=st.integers(1, 255))
        def plain_write(self, name, off, size, byte):
            data = bytes([byte]) * size
            with self.fs.open(self.path(name), "r+b") as f:
                f.pwrite(data, off)
            self.put(name, off, data)
            assert not self.readers[name]._ahead.owing

        @rule(name=FILES, off=OFFSETS, size=SIZES)
        def read_elsewhere(self, name, off, size):
            got = self.readers[name].pread(size, off)
            assert got == bytes(self.model[name][off:off + size])
            # (settled before the read, not merely fast enough: nothing owed any more)
            assert name not in self.pipes or not self.pipes[name]._pipe.owing

        @rule(name=FILES, off=OFFSETS, size=st.integers(1, 100_000), count=st.integers(2, 4))
        def read_in_order(self, name, off, size, count):
            for i in range(count):  # the third and later pieces come from the read-ahead
                at = off + i * size
                got = self.readers[name].pread(size, at)
                assert got == bytes(self.model[name][at:at + size])
            self.resume[name] = (off + count * size, size)

        @precondition(lambda self: self.resume)
        @rule(data=st.data())
        def read_on(self, data):
            """The next piece in order: the read-ahead's, unless a change dropped it."""
            name = data.draw(st.sampled_from(sorted(self.resume)))
            at, size = self.resume[name]
            got = self.readers[name].pread(size, at)
            assert got == bytes(self.model[name][at:at + size])
            self.resume[name] = (at + size, size)

        @precondition(lambda self: self.pipes)
        @rule(data=st.data())
        def read_own(self, data):
            name = data.draw(st.sampled_from(sorted(self.pipes)))
            f = self.pipes[name]
            assert f.pread(len(self.model[name]), 0) == bytes(self.model[name])

        @rule(name=FILES, size=st.integers(0, 400_000))
        def truncate(self, name, size):
            self.fs.truncate(self.path(name), size)   # a manager call: settles the pipes
            m = self.model[name]
            if size < len(m):
                del m[size:]
            else:
                m.extend(bytes(size - len(m)))

        @precondition(lambda self: self.pipes)
        @rule(data=st.data(), close=st.booleans())
        def fsync_or_close(self, data, close):
            name = data.draw(st.sampled_from(sorted(self.pipes)))
            if close:
                self.pipes.pop(name).close()
            else:
                self.pipes[name].fsync()

        @rule()  # (a rule, not an invariant: a manager call after every step would settle
        def sizes(self):  # every pipe before the reads could find one owing)
            for name, m in self.model.items():
                assert self.fs.stat(self.path(name)).st_size == len(m)
                assert name not in self.pipes or not self.pipes[name]._pipe.owing

    return Pipelined


def test_pipelined_writes_match_the_model(pvfs_cluster):
    machine = make_machine(pvfs_cluster)
    machine.TestCase.settings = settings(max_examples=20, stateful_step_count=20, deadline=None)
    machine.TestCase().runTest()
