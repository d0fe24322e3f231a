"""Hypothesis state machines over two nodes' cache stacks and a global cache daemon.

* ``SyncCoherence``: two nodes (local cache each) share a global cache in ``coherence=sync``
  mode; every write is a sync write; every read, from either node, must return the bytes of
  an in-memory model (reads after sync writes see the new bytes at both levels).
* ``KilledGcache``: one node writes behind (local and global caches; the global cache writes
  back only every 30 s, so it holds dirty data), fsyncs now and then, and
  the global cache daemon is killed (SIGKILL) and restarted at any point: after the node's
  next fsync the I/O daemons hold every byte it wrote — nothing fsync'd (nor anything written
  since) is lost with the daemon. Segments change route between the levels meanwhile (the
  bypass bits), and every read returns what the node wrote last.

The stacks are async; they live in a trio loop on a helper thread and the rules call into it.
"""

from __future__ import annotations

import signal
import threading

import pytest
import trio
from conftest import start_cluster
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pvfs.cluster.launch import down, free_ports, up
from pvfs.gcache.config import gcache_table
from pvfs.gcache.stack import CacheStack
from pvfs.layout.stripe import Stripe

STRIPE = Stripe(0, 2, 8192)
FILE_MAX = 64 << 10
SETTINGS = settings(max_examples=8, stateful_step_count=14, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

pytestmark = pytest.mark.slow


class Portal:
    """A trio loop on a thread holding ``n`` cache stacks; ``call`` runs a coroutine there."""

    def __init__(self, config, n: int, **kw) -> None:
        self.config, self.n, self.kw = config, n, kw
        self.nodes: list[CacheStack] = []
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.ready.wait(30)
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            self.error = exc
            self.ready.set()

    async def _main(self) -> None:
        self.token = trio.lowlevel.current_trio_token()
        self.stop = trio.Event()
        async with CacheStack.open(self.config, **self.kw) as a:
            self.nodes.append(a)
            if a.gbackend is not None:
                a.gbackend.failover.retry_after = 0.05  # back to a restarted daemon at once
            if self.n > 1:
                async with CacheStack.open(self.config, **self.kw) as b:
                    self.nodes.append(b)
                    self.ready.set()
                    await self.stop.wait()
            else:
                self.ready.set()
                await self.stop.wait()

    def call(self, fn, *args, **kw):
        async def go():
            return await fn(*args, **kw)

        return trio.from_thread.run(go, trio_token=self.token)

    def close(self) -> None:
        trio.from_thread.run_sync(self.stop.set, trio_token=self.token)
        self.thread.join(60)


@pytest.fixture(scope="module")
def gcluster(tmp_path_factory):
    port = free_ports(1)[0]
    cluster = start_cluster(tmp_path_factory.mktemp("gcm"), iods=2, connect_timeout=1.0,
                            request_timeout=3.0,
                            extra={"gcache": gcache_table([f"127.0.0.1:{port}"],
                                                          capacity=256 << 10,
                                                          flush_interval=30.0)})
    try:
        yield cluster
    finally:
        down(cluster.config)


_counter = iter(range(1 << 30))

offsets = st.integers(0, FILE_MAX - 1)
SEGMENTS = FILE_MAX // (4 * 4096)  # bypass segments of 4 blocks
ROUTES = ("none", "wg", "rl,wl,wg", "wl,wg", "rg,wg", "all")
payloads = st.binary(min_size=1, max_size=12_000)


def test_sync_coherence_between_two_nodes(gcluster):
    portal = Portal(gcluster.config, 2, sync=True, local_size=64 << 10)

    class SyncCoherence(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.model = bytearray()
            name = f"/sync{next(_counter)}"
            a, b = portal.nodes
            self.files = [portal.call(a.open_file, name, create=True, stripe=STRIPE)]
            self.files.append(portal.call(b.open_file, name))

        @rule(node=st.integers(0, 1), off=offsets, data=payloads)
        def sync_write(self, node, off, data):
            stack, f = portal.nodes[node], self.files[node]

            async def go():
                await stack.write(f, off, data, sync=True)

            portal.call(go)
            if len(self.model) < off:
                self.model.extend(bytes(off - len(self.model)))
            self.model[off:off + len(data)] = data

        @rule(node=st.integers(0, 1), off=offsets, n=st.integers(1, 20_000))
        def read(self, node, off, n):
            stack, f = portal.nodes[node], self.files[node]

            async def go():
                await stack.refresh(f)
                return await stack.read(f, off, n)

            assert portal.call(go) == bytes(self.model[off:off + n])

        @rule(node=st.integers(0, 1))
        def fsync(self, node):
            portal.call(portal.nodes[node].fsync, self.files[node])

    SyncCoherence.TestCase.settings = SETTINGS
    try:
        SyncCoherence.TestCase().runTest()
    finally:
        portal.close()


def test_killed_gcache_loses_nothing(gcluster):
    portal = Portal(gcluster.config, 1, local_size=64 << 10)

    class KilledGcache(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.model = bytearray()
            self.name = f"/kill{next(_counter)}"
            self.node = portal.nodes[0]
            self.f = portal.call(self.node.open_file, self.name, create=True, stripe=STRIPE)
            self.killed = False

        @rule(off=offsets, data=payloads)
        def write(self, off, data):
            portal.call(self.node.write, self.f, off, data)
            if len(self.model) < off:
                self.model.extend(bytes(off - len(self.model)))
            self.model[off:off + len(data)] = data

        @rule(off=offsets, n=st.integers(1, 20_000))
        def read(self, off, n):
            assert portal.call(self.node.read, self.f, off, n) == bytes(self.model[off:off + n])

        @rule()
        def push(self):
            # local write-behind data to the global cache, which holds it dirty (its flusher
            # runs every 30 s here): only the daemon and the client's journal have it now
            portal.call(self.node.cache.flush, self.f.ino)

        @rule()
        def fsync(self):
            portal.call(self.node.fsync, self.f)
            self.check_servers()

        @precondition(lambda self: not self.killed)
        @rule()
        def kill_gcache(self):
            gcluster.kill("gcache0", signal.SIGKILL)
            self.killed = True

        @precondition(lambda self: self.killed)
        @rule()
        def restart_gcache(self):
            up(gcluster.config)
            self.killed = False

            async def fresh():  # no dead pooled connection gives the restart away
                for ch in self.node.gbackend.channels:
                    ch._drop_idle()

            portal.call(fresh)

        @rule(flags=st.sampled_from(ROUTES), seg=st.one_of(st.none(), st.integers(0, SEGMENTS - 1)))
        def route(self, flags, seg):
            """The file's reads and writes (``seg`` None) or one segment's change route (the
            API/xattr/plan bits) while the caches hold copies, dirty or clean."""
            self.node.set_bypass(self.f, f"{'*' if seg is None else seg}:{flags}")

        @precondition(lambda self: not self.killed)
        @rule()
        def crash_gcache(self):
            """With dirty data in it, killed and back before this client sends it anything."""
            self.push()
            self.kill_gcache()
            self.restart_gcache()

        def check_servers(self) -> None:
            with gcluster.connect() as fs, fs.open(self.name, "rb") as fh:
                assert fh.read() == bytes(self.model)

        @invariant()
        def sizes_agree(self):
            assert self.node.sizes[self.f.ino] >= len(self.model) or not self.model

        def teardown(self) -> None:
            if self.killed:
                up(gcluster.config)

    KilledGcache.TestCase.settings = settings(SETTINGS, max_examples=10, stateful_step_count=16)
    try:
        KilledGcache.TestCase().runTest()
    finally:
        portal.close()
