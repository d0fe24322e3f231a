"""pvfs._native.Engine scheduling: opt1..opt4 serving concurrent jobs, and their order.

Order is made deterministic by controlling readiness, never by timing: under opt4 the
engine waits for a "blocker" job whose socket is full of junk, while the test makes the other
jobs ready in a chosen order; then it switches the algorithm and reads the service order off
the completions' t_start. A small Python model of each policy gives the expected order.
"""

from __future__ import annotations

import os
import random
import socket
import threading
import time

import pytest
from test_native_engine import (  # tests/unit is on sys.path (rootdir-less layout)
    DISCARD,
    FILE,
    INODE,
    JOB,
    READ,
    WRITE,
    ZERO,
    acc,
    expected_read,
    fill,
    recv_exact,
    tcp_pair,
    wait_done,
)

from pvfs import _native as nat

PRIMER = 400 << 10
OFFSETS = [k * (64 << 10) for k in range(1, 13)]


@pytest.fixture
def data():
    return random.Random(3).randbytes(2 << 20)


@pytest.fixture
def fd(tmp_path, data):
    path = tmp_path / "stripe"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    yield fd
    os.close(fd)


# -- a model of the policies for jobs that are all ready and each served in one turn ---------

def _cscan(last: int, cands: list[int]) -> int:
    ahead = [o for o in cands if o >= last]
    return min(ahead) if ahead else min(cands)


def _nearest(last: int, cands: list[int]) -> int:
    # shorter distance, then ahead of the last position, then arrival order
    return min(cands, key=lambda o: (abs(o - last), o < last, cands.index(o)))


def model(alg: str, last: int, offsets: list[int], window: int, ready_order: list[int]):
    pending, order = list(offsets), []
    while pending:
        if alg == "opt1":
            pick = next(o for o in ready_order if o in pending)
        elif alg == "opt2":
            pick = _cscan(last, pending)
        elif alg == "opt3":
            inside = [o for o in pending if abs(o - last) <= window // 2]
            pick = _cscan(last, inside) if inside else _nearest(last, pending)
        else:
            pick = _nearest(last, pending)
        order.append(pick)
        pending.remove(pick)
        last = pick + JOB
    return order


@pytest.mark.parametrize("alg", ["opt1", "opt2", "opt3", "opt4"])
def test_service_order(fd, data, alg):
    window = 256 << 10
    rnd = random.Random(alg)
    eng = nat.Engine(algorithm="opt1", window=window)
    socks = []
    try:
        # 1. Serve a primer job so that the last position is PRIMER + JOB.
        a, b = socket.socketpair()
        socks += [a, b]
        eng.submit(0, a.fileno(), fd, READ, acc((FILE, PRIMER, JOB)), inode=INODE)
        assert recv_exact(b, JOB) == data[PRIMER:PRIMER + JOB]
        wait_done(eng, 1)

        # 2. opt4 waits for the blocker: nearest (distance 0) and not ready.
        eng.algorithm = "opt4"
        blk_a, blk_b = socket.socketpair()
        socks += [blk_a, blk_b]
        blk_junk = fill(blk_a)
        eng.submit(1, blk_a.fileno(), fd, READ, acc((FILE, PRIMER + JOB, JOB)), inode=INODE)

        # 3. Jobs at OFFSETS, not ready either (full send buffers), submitted in random order.
        jobs = {}
        for i, off in enumerate(rnd.sample(OFFSETS, len(OFFSETS))):
            ja, jb = socket.socketpair()
            socks += [ja, jb]
            jobs[100 + i] = (off, jb, fill(ja))
            eng.submit(100 + i, ja.fileno(), fd, READ, acc((FILE, off, JOB)), inode=INODE)
        while eng.info()["queued"] != 1 + len(jobs):
            time.sleep(0.01)

        # 4. Make them ready one by one, in a random order; nothing is served meanwhile.
        ready_order = rnd.sample(sorted(jobs), len(jobs))
        for jid in ready_order:
            off, jb, junk = jobs[jid]
            recv_exact(jb, junk)
            time.sleep(0.02)  # separate readiness edges (only opt1's expectation uses them)
        time.sleep(0.05)
        assert eng.info()["queued"] == 1 + len(jobs) and eng.info()["active"] == 0

        if alg == "opt4":
            # Release the blocker: served first, then the nearest job each time.
            recv_exact(blk_b, blk_junk)
            assert recv_exact(blk_b, JOB) == data[PRIMER + JOB:PRIMER + 2 * JOB]
            last = PRIMER + 2 * JOB
        else:
            eng.algorithm = alg
            last = PRIMER + JOB
        done = wait_done(eng, len(jobs) + (alg == "opt4"))
        if alg != "opt4":
            recv_exact(blk_b, blk_junk)
            assert recv_exact(blk_b, JOB) == data[PRIMER + JOB:PRIMER + 2 * JOB]
            done.update(wait_done(eng, 1))
        for jid, (off, jb, _) in jobs.items():
            assert recv_exact(jb, JOB) == data[off:off + JOB]
            assert done[jid][1:3] == (0, JOB)
    finally:
        eng.close()
        for s in socks:
            s.close()

    served = [jobs[jid][0] for jid in sorted(jobs, key=lambda j: done[j][4])]
    expect = model(alg, last, OFFSETS, window, [jobs[j][0] for j in ready_order])
    assert served == expect
    if alg == "opt2":
        # CSCAN: up from the last position, then wrap to the start.
        assert served == sorted(o for o in OFFSETS if o >= last) + \
            sorted(o for o in OFFSETS if o < last)
    if alg == "opt4":
        assert done[1][4] < min(done[j][4] for j in jobs)


# -- many concurrent mixed jobs --------------------------------------------------------------

def run_mixed(eng, fd, data, tmp_path, n=20, switch=None):
    out_path = tmp_path / "out"
    size = (n // 2 + 1) * (400 << 10)
    out_path.write_bytes(bytes(size))
    wfd = os.open(out_path, os.O_RDWR)
    rnd = random.Random(n)
    expect_out = bytearray(size)
    threads, errors, pairs = [], [], []

    def reader(sock, expect):
        try:
            assert recv_exact(sock, len(expect)) == expect
        except (OSError, AssertionError) as exc:  # reported by the main thread
            errors.append(exc)

    def writer(sock, payload):
        try:
            sock.sendall(payload)
        except OSError as exc:
            errors.append(exc)

    try:
        for i in range(n):
            srv, cli = tcp_pair()
            pairs += [srv, cli]
            if i % 2 == 0:
                off = rnd.randrange(0, 1 << 20)
                accs = [(FILE, off, rnd.randrange(1, 600_000)), (ZERO, 0, 1000),
                        (FILE, rnd.randrange(0, 2 << 20), 70_000)]
                prefix = b"reply-%d" % i
                eng.submit(i, srv.fileno(), fd, READ, acc(*accs), prefix=prefix, inode=INODE)
                t = threading.Thread(target=reader,
                                     args=(cli, prefix + expected_read(data, accs)))
            else:
                base = (i // 2) * (400 << 10)
                accs = [(FILE, base, 150_000), (DISCARD, 0, 777), (FILE, base + 200_000, 90_000)]
                payload = [rnd.randbytes(a[2]) for a in accs]
                for (kind, off, ln), p in zip(accs, payload):
                    if kind == FILE:
                        expect_out[off:off + ln] = p
                eng.submit(i, srv.fileno(), wfd, WRITE, acc(*accs), inode=INODE + 1)
                t = threading.Thread(target=writer, args=(cli, b"".join(payload)))
            threads.append(t)
        for t in threads:
            t.start()
        got: dict[int, tuple] = {}
        algs = ["opt1", "opt2", "opt3", "opt4"]
        deadline = time.monotonic() + 60
        while len(got) < n:
            assert time.monotonic() < deadline, got
            if switch:
                eng.algorithm = algs[len(got) % 4]
                eng.window = rnd.choice([1 << 16, 1 << 20, 256 << 20])
            got.update(wait_done(eng, 1))
        for t in threads:
            t.join()
    finally:
        for s in pairs:
            s.close()
        os.close(wfd)
    assert not errors, errors
    assert all(c[1] == 0 for c in got.values()), got
    assert out_path.read_bytes() == bytes(expect_out)
    info = eng.info()
    assert info["completed"] == n and info["queued"] == 0 and info["active"] == 0
    return got


@pytest.mark.parametrize("alg", ["opt1", "opt2", "opt3", "opt4"])
@pytest.mark.parametrize("modes", [("sendfile", "pwrite"), ("mmap", "splice")])
def test_twenty_concurrent_mixed_jobs(fd, data, tmp_path, alg, modes):
    with nat.Engine(algorithm=alg, window=1 << 20, read_mode=modes[0],
                    write_mode=modes[1]) as eng:
        got = run_mixed(eng, fd, data, tmp_path)
    starts = sorted(c[4] for c in got.values())
    assert len(set(starts)) == len(starts)  # t_start is strictly increasing per engine


def test_switch_algorithm_while_serving(fd, data, tmp_path):
    with nat.Engine() as eng:
        run_mixed(eng, fd, data, tmp_path, n=24, switch=True)
        assert eng.algorithm in nat.ALGORITHMS
    assert nat.ALGORITHMS == ("opt1", "opt2", "opt3", "opt4")


def test_opt4_waits_but_new_job_reevaluated(fd, data):
    """opt4 waits for the nearest job; a newly submitted nearer ready job is taken at once."""
    with nat.Engine(algorithm="opt4") as eng:
        a, b = socket.socketpair()
        c, d = socket.socketpair()
        with a, b, c, d:
            junk = fill(a)
            eng.submit(1, a.fileno(), fd, READ, acc((FILE, 1 << 20, JOB)), inode=INODE)
            time.sleep(0.05)
            # Nearer to the start (last position is (0, 0)), and ready: served while 1 waits.
            eng.submit(2, c.fileno(), fd, READ, acc((FILE, 0, JOB)), inode=INODE)
            assert recv_exact(d, JOB) == data[:JOB]
            assert wait_done(eng, 1)[2][1] == 0
            assert eng.info()["queued"] == 1
            recv_exact(b, junk)
            assert recv_exact(b, JOB) == data[1 << 20:(1 << 20) + JOB]
            assert wait_done(eng, 1)[1][1] == 0


def test_replies_are_served_ahead_of_the_policy(fd):
    """A job without accesses (a small reply, e.g. a zero-byte read answer) has no position
    and costs no disk: it must not wait behind opt4's blocker -- it used to, at (inode 0, 0),
    far from every data job, until the blocker's peer drained."""
    eng = nat.Engine(algorithm="opt4", idle_timeout=60.0)
    ps, pc = tcp_pair()
    bs, bc = tcp_pair()
    rs_, rc = tcp_pair()
    try:
        # A first job moves the engine's last position to (INODE, 4096).
        eng.submit(9, ps.fileno(), fd, READ, acc((FILE, 0, 4096)), inode=INODE)
        recv_exact(pc, 4096)
        wait_done(eng, 1)
        fill(bs)                                    # the blocker cannot move: not ready
        eng.submit(1, bs.fileno(), fd, READ, acc((FILE, 4096, 4096)), inode=INODE)
        time.sleep(0.05)                            # opt4 now waits for job 1 (distance 0)
        eng.submit(2, rs_.fileno(), fd, READ, b"", prefix=b"REPLY")
        rc.settimeout(10)
        assert recv_exact(rc, 5) == b"REPLY"
        done = wait_done(eng, 1)
        assert 2 in done and 1 not in done
    finally:
        eng.close()
        for s in (ps, pc, bs, bc, rs_, rc):
            s.close()


def test_opt4_enters_another_file_at_its_start(fd, data):
    """Offsets of different files are not comparable: coming from another file, opt4 (and
    opt3's fallback) takes the job nearest the new file's start. It used to compare offsets
    across files, so two daemons entering the same striped file from different places
    served its tasks in different orders and every task waited for its slower half."""
    eng = nat.Engine(algorithm="opt4", idle_timeout=60.0)
    socks = []
    try:
        a, b = socket.socketpair()
        socks += [a, b]
        eng.submit(0, a.fileno(), fd, READ, acc((FILE, 1 << 20, JOB)), inode=INODE)
        assert recv_exact(b, JOB) == data[1 << 20:(1 << 20) + JOB]
        wait_done(eng, 1)                    # last position: (INODE, 1 MiB + JOB)
        jobs = {}
        for jid, off in ((1, 1 << 20), (2, 512 << 10), (3, 0)):
            ja, jb = socket.socketpair()
            socks += [ja, jb]
            jobs[jid] = (off, jb, fill(ja))  # not ready: opt4 waits for its pick
            eng.submit(jid, ja.fileno(), fd, READ, acc((FILE, off, JOB)), inode=INODE + 1)
        while eng.info()["queued"] != 3:
            time.sleep(0.01)
        for jid in (1, 2, 3):                # ready in the old rule's order
            off, jb, junk = jobs[jid]
            recv_exact(jb, junk)
        done = wait_done(eng, 3)
        for jid, (off, jb, _) in jobs.items():
            assert recv_exact(jb, JOB) == data[off:off + JOB]
    finally:
        eng.close()
        for s in socks:
            s.close()
    assert sorted(jobs, key=lambda j: done[j][4]) == [3, 2, 1]


@pytest.mark.parametrize("gather, order", [(0.0, [1, 2]), (0.5, [2, 1])])
def test_opt4_gathers_the_requests_of_a_busy_period(fd, data, gather, order):
    """With ``gather``, opt4 lets the first request of a busy period wait for the others that
    come with it and then enters the file at its start, so two daemons of a striped file
    serve a collective's tasks in the same order. Without it, SSTF begins with whichever
    request arrived first (job 1, far from the start)."""
    with nat.Engine(algorithm="opt4", gather=gather, idle_timeout=60.0) as eng:
        assert eng.gather == gather
        a, b = socket.socketpair()
        c, d = socket.socketpair()
        with a, b, c, d:
            eng.submit(1, a.fileno(), fd, READ, acc((FILE, 1 << 20, JOB)), inode=INODE)
            time.sleep(0.1)
            eng.submit(2, c.fileno(), fd, READ, acc((FILE, 0, JOB)), inode=INODE)
            done = wait_done(eng, 2)
            assert recv_exact(b, JOB) == data[1 << 20:(1 << 20) + JOB]
            assert recv_exact(d, JOB) == data[:JOB]
    assert sorted(done, key=lambda j: done[j][4]) == order


@pytest.mark.parametrize("gather, order", [(0.0, [1, 2, 3]), (0.2, [3, 2, 1])])
def test_opt4_after_gathering_enters_the_file_at_its_start(fd, data, gather, order):
    """After the gathering, opt4's first pick is nearest the start of the file, not nearest
    where this daemon stopped: two daemons that stopped at different places (they served
    the last run's tasks in different orders) still agree on the next run's order."""
    with nat.Engine(algorithm="opt4", gather=gather, idle_timeout=60.0) as eng:
        a, b = socket.socketpair()
        with a, b:
            eng.submit(0, a.fileno(), fd, READ, acc((FILE, 1 << 20, JOB)), inode=INODE)
            assert recv_exact(b, JOB) == data[1 << 20:(1 << 20) + JOB]
            wait_done(eng, 1)                # stopped at (INODE, 1 MiB + JOB); idle now
        time.sleep(gather + 0.05)            # a pause: what comes next is a new collective
        pairs = {jid: socket.socketpair() for jid in (1, 2, 3)}
        try:
            for jid, off in ((1, 1 << 20), (2, 512 << 10), (3, 0)):
                eng.submit(jid, pairs[jid][0].fileno(), fd, READ, acc((FILE, off, JOB)),
                           inode=INODE)
            done = wait_done(eng, 3)
            for jid, off in ((1, 1 << 20), (2, 512 << 10), (3, 0)):
                assert recv_exact(pairs[jid][1], JOB) == data[off:off + JOB]
        finally:
            for x, y in pairs.values():
                x.close()
                y.close()
    assert sorted(done, key=lambda j: done[j][4]) == order


def test_opt4_does_not_gather_after_a_short_pause(fd, data):
    """A pause shorter than ``gather`` is a task's turnaround between requests it sends one
    after the other, not a new collective: the next request is served at once (gathering
    there cost opt4 10 ms per cached 2 KiB block of the random-block workloads)."""
    with nat.Engine(algorithm="opt4", idle_timeout=60.0) as eng:
        a, b = socket.socketpair()
        with a, b:
            eng.submit(0, a.fileno(), fd, READ, acc((FILE, 512 << 10, JOB)), inode=INODE)
            assert recv_exact(b, JOB) == data[512 << 10:(512 << 10) + JOB]
            wait_done(eng, 1)
        eng.gather = 2.0                     # far longer than the pause that follows
        pairs = {jid: socket.socketpair() for jid in (1, 2)}
        try:
            eng.submit(1, pairs[1][0].fileno(), fd, READ, acc((FILE, 1 << 20, JOB)),
                       inode=INODE)
            time.sleep(0.1)
            eng.submit(2, pairs[2][0].fileno(), fd, READ, acc((FILE, 0, JOB)), inode=INODE)
            done = wait_done(eng, 2)
            assert recv_exact(pairs[1][1], JOB) == data[1 << 20:(1 << 20) + JOB]
            assert recv_exact(pairs[2][1], JOB) == data[:JOB]
        finally:
            for x, y in pairs.values():
                x.close()
                y.close()
    assert sorted(done, key=lambda j: done[j][4]) == [1, 2]
    assert done[1][4] < done[2][4]


def test_gather_is_checked_and_can_change():
    with pytest.raises(ValueError, match="gather"):
        nat.Engine(algorithm="opt4", gather=-0.1)
    with pytest.raises(ValueError, match="gather"):
        nat.Engine(algorithm="opt4", gather=11.0)
    with nat.Engine(algorithm="opt4") as eng:
        assert eng.gather == 0.0               # the engine's default: the thesis' opt4
        eng.gather = 0.02
        assert eng.gather == pytest.approx(0.02)
        with pytest.raises(ValueError, match="gather"):
            eng.gather = float("nan")
