"""A hypothesis state machine drives the native API against an in-memory model (issue 2)."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from pvfs import Stripe

NAMES = st.sampled_from(["a", "b", "c", "dd", "e e"])
SIZES = st.integers(0, 70_000)
OFFSETS = st.integers(0, 150_000)


@pytest.fixture(scope="module")
def machine_cluster(pvfs_cluster):
    return pvfs_cluster


def make_machine(cluster):
    class NativeAPI(RuleBasedStateMachine):
        """Model: dict path -> bytearray (files) or None (directories)."""

        dirs = Bundle("dirs")

        @initialize(target=dirs)
        def setup(self):
            self.fs = cluster.connect()
            self.root = f"/sm{id(self)}"
            self.fs.mkdir(self.root)
            self.model: dict[str, bytearray | None] = {self.root: None}
            return self.root

        def teardown(self):
            for path in sorted(self.model, key=len, reverse=True):
                try:
                    if self.model[path] is None:
                        self.fs.rmdir(path)
                    else:
                        self.fs.unlink(path)
                except OSError:
                    pass
            self.fs.close()

        def files(self):
            return sorted(p for p, v in self.model.items() if v is not None)

        @rule(target=dirs, parent=dirs, name=NAMES)
        def mkdir(self, parent, name):
            path = f"{parent}/{name}"
            if parent not in self.model:
                with pytest.raises(FileNotFoundError):
                    self.fs.mkdir(path)
                return parent
            if path in self.model:
                with pytest.raises(FileExistsError):
                    self.fs.mkdir(path)
                return path if self.model[path] is None else parent
            self.fs.mkdir(path)
            self.model[path] = None
            return path

        @rule(parent=dirs, name=NAMES, size=SIZES, pcount=st.integers(1, 4),
              ssize=st.sampled_from([4096, 16384]))
        def create(self, parent, name, size, pcount, ssize):
            path = f"{parent}/{name}"
            if parent not in self.model or self.model.get(path, b"") is None:
                with pytest.raises(OSError):
                    self.fs.open(path, "wb", stripe=Stripe(0, pcount, ssize)).close()
                return
            data = bytes([len(path) % 251]) * size
            with self.fs.open(path, "wb", stripe=Stripe(pcount - 1, pcount, ssize)) as f:
                f.write(data)
            self.model[path] = bytearray(data)

        @rule(data=st.data(), off=OFFSETS, size=SIZES)
        def write(self, data, off, size):
            files = self.files()
            if not files:
                return
            path = data.draw(st.sampled_from(files))
            payload = bytes([(off + size) % 256]) * size
            with self.fs.open(path, "r+b") as f:
                f.pwrite(payload, off)
            m = self.model[path]
            if len(m) < off + size and size:
                m.extend(bytes(off + size - len(m)))
            m[off:off + size] = payload

        @rule(data=st.data(), off=OFFSETS, size=SIZES)
        def read(self, data, off, size):
            files = self.files()
            if not files:
                return
            path = data.draw(st.sampled_from(files))
            with self.fs.open(path, "rb") as f:
                assert f.pread(size, off) == bytes(self.model[path][off:off + size])

        @rule(data=st.data(), size=st.integers(0, 200_000))
        def truncate(self, data, size):
            files = self.files()
            if not files:
                return
            path = data.draw(st.sampled_from(files))
            self.fs.truncate(path, size)
            m = self.model[path]
            if size < len(m):
                del m[size:]
            else:
                m.extend(bytes(size - len(m)))

        @rule(data=st.data(), parent=dirs, name=NAMES)
        def rename(self, data, parent, name):
            files = self.files()
            if not files or parent not in self.model:
                return
            src = data.draw(st.sampled_from(files))
            dst = f"{parent}/{name}"
            if dst in self.model and self.model[dst] is None:
                # Linux: EISDIR, or ENOTEMPTY when the directory is an ancestor of the source.
                with pytest.raises(OSError) as exc:
                    self.fs.rename(src, dst)
                assert exc.value.errno in (21, 39)
                return
            self.fs.rename(src, dst)
            if src != dst:
                self.model[dst] = self.model.pop(src)

        @rule(data=st.data())
        def unlink(self, data):
            files = self.files()
            if not files:
                return
            path = data.draw(st.sampled_from(files))
            self.fs.unlink(path)
            del self.model[path]

        @rule(parent=dirs)
        def listdir(self, parent):
            if parent not in self.model:
                return
            expect = sorted(p.rsplit("/", 1)[1] for p in self.model
                            if p.rsplit("/", 1)[0] == parent and p != parent)
            assert sorted(self.fs.listdir(parent)) == expect

        @invariant()
        def sizes_match(self):
            for path in self.files()[:3]:
                assert self.fs.stat(path).st_size == len(self.model[path])

    return NativeAPI


def test_native_api_matches_model(machine_cluster):
    machine = make_machine(machine_cluster)
    machine.TestCase.settings = settings(
        max_examples=25, stateful_step_count=25, deadline=None)
    machine.TestCase().runTest()
