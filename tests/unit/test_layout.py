"""Striping math and I/O-description intersection, checked against a byte-by-byte model."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pvfs.layout.describe import DescriptionError, Nested, Regions, Strided, from_wire, validate
from pvfs.layout.intersect import pieces_for_rank, split, split_description, stream_length
from pvfs.layout.stripe import Stripe, local_size, logical_end, logical_size


def model_location(stripe: Stripe, x: int) -> tuple[int, int]:
    unit, within = divmod(x, stripe.ssize)
    return unit % stripe.pcount, (unit // stripe.pcount) * stripe.ssize + within


stripes = st.builds(Stripe, st.integers(0, 3), st.integers(1, 4),
                    st.sampled_from([512, 1024, 4096, 65536]))
region_lists = st.lists(st.tuples(st.integers(0, 300_000), st.integers(0, 5_000)), max_size=6)


@given(stripes, region_lists)
@settings(max_examples=200, deadline=None)
def test_split_places_every_byte_where_the_model_says(stripe, regions):
    per_rank = split(regions, stripe)
    # Rebuild the logical byte sequence from the pieces and compare with the model.
    placed = {}
    for rank, pieces in enumerate(per_rank):
        for buf, local, n in pieces:
            for k in range(n):
                placed[buf + k] = (rank, local + k)
    buf = 0
    for off, length in regions:
        for k in range(length):
            assert placed[buf + k] == model_location(stripe, off + k)
        buf += length
    assert len(placed) == buf
    assert sum(stream_length(p) for p in per_rank) == sum(n for _, n in regions)


@given(stripes, region_lists)
@settings(max_examples=200, deadline=None)
def test_pieces_for_rank_equals_split(stripe, regions):
    desc = Regions(regions)
    per_rank = split_description(desc, stripe)
    for rank in range(stripe.pcount):
        assert pieces_for_rank(desc, stripe, rank) == per_rank[rank]


@given(stripes, st.integers(0, 2_000_000))
def test_local_sizes_imply_the_logical_size(stripe, size):
    sizes = [local_size(stripe, r, size) for r in range(stripe.pcount)]
    assert logical_size(stripe, sizes) == size
    assert sum(sizes) == size


def test_logical_end_of_a_share():
    s = Stripe(0, 4, 1000)
    assert logical_end(s, 0, 0) == 0
    assert logical_end(s, 0, 1) == 1
    assert logical_end(s, 1, 1000) == 2000
    assert logical_end(s, 0, 1001) == 4001


def test_contiguous_request_is_one_access_per_daemon():
    s = Stripe(0, 4, 4096)
    per_rank = split([(0, 64 * 4096)], s)
    assert [len(p) for p in per_rank] == [16, 16, 16, 16] or all(len(p) >= 1 for p in per_rank)
    # Buffer positions interleave, so pieces merge only when both buffer and file are contiguous.
    per_rank = split([(0, 4096)], Stripe(0, 1, 512))
    assert per_rank == [[(0, 0, 4096)]]


def test_strided_and_nested_expand():
    assert Strided(10, 2, 5, 3).expand() == [(10, 2), (15, 2), (20, 2)]
    assert Nested(0, 1, [(2, 100), (3, 10)]).expand() == [
        (0, 1), (10, 1), (20, 1), (100, 1), (110, 1), (120, 1)]


@pytest.mark.parametrize("wire", [
    "x", [], ["r"], ["r", [1]], ["r", [1, "a"]], ["r", [-1, 5]], ["s", 0, 1, 1],
    ["s", 0, -1, 1, 1], ["s", 0, 1, 1, 1 << 40], ["n", 0, 1, []], ["n", 0, 1, [[1]]],
    ["n", 0, 1, [[1 << 20, 1], [1 << 20, 1]]], ["s", 1 << 62, 1, 1, 1], ["q", 1, 2],
])
def test_bad_wire_descriptions_are_rejected(wire):
    with pytest.raises(DescriptionError):
        from_wire(wire)


def test_wire_round_trip():
    for d in (Regions([(1, 2), (5, 6)]), Strided(1, 2, 3, 4), Nested(1, 2, [(3, 4), (5, 6)])):
        assert from_wire(d.to_wire()).expand() == d.expand()
        validate(d)


@pytest.mark.parametrize("bad", [Stripe(-1, 1, 4096), Stripe(0, 0, 4096), Stripe(0, 1, 100)])
def test_bad_stripes(bad):
    with pytest.raises(ValueError):
        bad.validate()


def test_stripe_base_wraps_over_daemons():
    s = Stripe(3, 2, 4096)
    assert [s.iod_of_rank(r, 4) for r in range(2)] == [3, 0]
    assert s.rank_of_iod(0, 4) == 1 and s.rank_of_iod(1, 4) is None
