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


def test_a_stripe_file_is_made_by_a_change_that_puts_bytes_or_a_length_in_it(tmp_path) -> None:
    st = PosixStorage(str(tmp_path))
    st.truncate(4, 0)  # to 0: empty already, nothing to make
    st.utime(4, 123)  # a missing share's mtime does not count: nothing made
    assert not st.exists(4) and st.usage(4) == (0, 0, 0) and st.inodes() == []
    assert st.acquire(4, create=False) is None  # a read finds a hole
    st.truncate(5, 100)
    fd = st.acquire(6, create=True)  # a write's open
    assert os.pwrite(fd, b"abc", 0) == 3
    st.unpin(6)
    assert st.inodes() == [5, 6] and [st.usage(i)[0] for i in (4, 5, 6)] == [0, 100, 3]
    st.utime(6, 123)
    assert st.usage(6)[1] == 123
    st.close()
