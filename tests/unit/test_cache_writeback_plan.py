"""A write-back's plan per backend call (``Flusher._runs``/``_first_batch``): the runs of
each call, cut as the call needs them, are those that cutting all the dirty blocks and
taking the first group would give."""

from __future__ import annotations

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from pvfs.cache import BlockCache, WritebackPolicy
from pvfs.cache._table import gather
from pvfs.cache.testing import MemoryBackend, PlainBackend

BS = 64


@settings(max_examples=60, deadline=None)
@given(writes=st.lists(st.tuples(st.integers(0, 300 * BS), st.integers(1, 3 * BS)),
                       min_size=1, max_size=60),
       max_list=st.integers(BS, 12 * BS), max_regions=st.integers(1, 9),
       listio=st.booleans())
def test_each_call_is_planned_as_the_first_group_of_all_the_runs(
        writes: list[tuple[int, int]], max_list: int, max_regions: int, listio: bool) -> None:
    # A write-back plans each backend call from the runs it needs (fortieth session; cutting
    # every dirty block for each call made it quadratic): the call must be what cutting them
    # all and taking the first group would give, whatever the dirty ranges.
    be = MemoryBackend(stripe=4 * BS)
    cache = BlockCache(be if listio else PlainBackend(be), block_size=BS,
                       capacity=1024 * BS,
                       writeback=WritebackPolicy(max_list_bytes=max_list,
                                                 max_regions=max_regions))

    async def main() -> None:
        for off, n in writes:
            await cache.write(1, off, b"w" * n)

    trio.run(main)
    fl = cache.flusher
    blocks = sorted(cache.store.files[1].dirty)
    runs = list(fl._runs(1, blocks))
    if listio:
        sizes = [sum(hi - lo for _, lo, hi in pieces) for _, pieces in runs]
        first = runs[gather(sizes, max_list, max_regions)[0]]
    else:
        first = runs[:1]
    assert fl._first_batch(fl._runs(1, iter(blocks))) == first
