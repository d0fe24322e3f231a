"""The I/O daemon's stripe-file store is used from the trio thread and from worker threads
(truncate, unlink, fsync, stat of many files run off the trio thread): its descriptor cache
must never close a descriptor another thread is using."""

from __future__ import annotations

import os
import threading

from pvfs.daemons.iod.storage import PosixStorage


def test_slow_calls_in_threads_while_the_cache_churns(tmp_path) -> None:
    # max_open=2 makes every open evict: the worst case for a descriptor used elsewhere.
    st = PosixStorage(str(tmp_path), max_open=2)
    inos = list(range(1, 9))
    errors: list[BaseException] = []
    stop = threading.Event()

    def worker(seed: int) -> None:
        try:
            n = 0
            while not stop.is_set() and n < 300:
                ino = inos[(seed + n) % len(inos)]
                st.truncate(ino, 4096 * (1 + n % 3))
                size, _, _ = st.usage(ino)
                assert size in (0, 4096, 8192, 12288)  # 0: unlinked by another thread
                st.fsync(ino, data_only=True)
                if n % 7 == 0:
                    st.unlink(ino)
                n += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    try:
        # The "trio thread": opens, pins and unpins as the data path does.
        for n in range(600):
            ino = inos[n % len(inos)]
            fd = st.acquire(ino, create=True)
            os.fstat(fd)  # EBADF here would mean the fd was closed under a pin
            st.unpin(ino)
    finally:
        stop.set()
        for t in threads:
            t.join()
    st.close()
    assert not errors, errors


def test_usage_of_missing_and_present(tmp_path) -> None:
    st = PosixStorage(str(tmp_path))
    assert st.usage(5) == (0, 0, 0)
    st.truncate(5, 10000)
    size, mtime, _ = st.usage(5)
    assert size == 10000 and mtime > 0
    assert st.unlink(5) and not st.unlink(5)
    assert st.usage(5) == (0, 0, 0)
    st.close()


def test_precreate_makes_empty_files_and_leaves_existing_ones(tmp_path) -> None:
    st = PosixStorage(str(tmp_path))
    st.truncate(5, 100)  # an existing stripe file with data
    assert st.precreate([4, 5, 6, 300]) == 3
    assert [st.usage(i)[0] for i in (4, 5, 6, 300)] == [0, 100, 0, 0]
    assert st.precreate([4]) == 0
    st.close()


def test_precreated_files_stay_open_apart_for_their_first_write(tmp_path) -> None:
    st = PosixStorage(str(tmp_path))
    st.spare_max = 3
    assert st.precreate([10, 11, 12, 13]) == 4
    assert len(st._fds) == 0  # the descriptor cache is for files in use
    assert st.lookup(10) is None  # the oldest went when the fourth came
    fd = st.lookup(11)  # from the trio thread: no open
    assert fd is not None and os.pwrite(fd, b"abc", 0) == 3 and st.usage(11)[0] == 3
    st.unpin(11)
    assert 11 in st._fds and 11 not in st._spare
    assert st.unlink(12) and 12 not in st._spare  # closed with its file
    assert st.acquire(13, create=False) is not None  # a worker thread's open takes it too
    st.unpin(13)
    assert not st._spare
    st.close()
