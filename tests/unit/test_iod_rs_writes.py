"""rs decides writes on the model's write part (issue 31; daemons/iod/rs.py ``on_write``)."""

from __future__ import annotations

from test_iod_rs import server  # tests/unit is on sys.path

from pvfs.daemons.iod.rs import ReactiveSelector
from pvfs.daemons.iod.stats import JobRecord
from pvfs.models import rs


def _request(srv, sel, job_id: int, op: str, lo: int, n: int) -> None:
    rec = JobRecord(5, op, n, 1, lo, lo + n)
    srv.stats.begin(job_id, rec)
    (sel.on_write if op == "write" else sel.on_read)(5, [(0, lo, n)], 1, None, rec)


def _selector(write: rs.Params | None):
    # reads: everything "~0" (opt2); the write part: opt3 below its threshold
    reads = rs.Params(zero_s=1e9, small_alg="opt2", write=write)
    srv = server(resident=0.0)
    sel = ReactiveSelector(srv)
    sel.params = reads
    sel.active = True
    sel.nfile[5] = (1, 1e18)
    return srv, sel


def test_a_write_is_decided_on_the_write_part():
    srv, sel = _selector(rs.Params(zero_s=1e9, small_alg="opt3"))
    _request(srv, sel, 1, "write", 0, 65536)
    assert srv.engine.algorithm == "opt3"
    assert sel.decisions == {"write:ideal/uncached->opt3": 1}
    assert sel.last["pick"] == "opt3"


def test_without_a_write_part_writes_are_not_decided():
    srv, sel = _selector(None)
    _request(srv, sel, 1, "write", 0, 65536)
    assert srv.engine.algorithm == "opt1" and not sel.decisions and not sel.last


def test_reads_after_writes_are_a_new_operation_decided_on_the_read_model():
    srv, sel = _selector(rs.Params(zero_s=1e9, small_alg="opt3"))
    _request(srv, sel, 1, "write", 0, 65536)
    srv.stats.end(1, 5, 0, 65536, 0.0, 0.001)
    _request(srv, sel, 2, "read", 0, 65536)      # at once: no idle gap needed
    assert srv.engine.algorithm == "opt2"
    assert sel.decisions["ideal/uncached->opt2"] == 1
    assert sel.files[5].kind == "read"


def test_the_write_part_comes_from_the_config_table():
    p = rs.Params(B_dr=1e6, write=rs.Params(B_dr=2e6, small_alg="opt3"))
    sel = ReactiveSelector(server(model=p.to_table()))
    assert sel.params == p and sel.params.write.small_alg == "opt3"
