"""The Python side of the C workers' creates (fuse/workercreates.py) with a fake session:
directories turned off before what was made in them is applied, numbers lent when low."""

from __future__ import annotations

from pvfs.fuse.workercreates import LEND, WorkerCreates


class FakeSession:
    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.lent: list[int] = []

    def create_dir(self, parent, on):
        self.calls.append(("dir", parent, on))

    def create_dirs_off(self):
        self.calls.append(("all off",))

    def numbers_left(self):
        return len(self.lent)

    def lend_numbers(self, inos):
        self.lent += inos

    def take_numbers(self):
        back, self.lent = self.lent, []
        return back


def test_a_directory_is_turned_off_before_its_records_are_applied():
    s = FakeSession()
    w = WorkerCreates(s, lambda: s.calls.append(("catch up",)))
    w.dir_on(5)
    w.dir_on(5)  # once
    w.dirs_off([5, 6])
    assert s.calls == [("dir", 5, True), ("dir", 5, False), ("catch up",)]
    w.dirs_off([5])  # nothing on there: nothing to apply
    assert s.calls[-1] == ("catch up",) and len(s.calls) == 3
    w.dir_on(7)
    w.dirs_off(None)
    assert s.calls[-2:] == [("all off",), ("catch up",)]


def test_numbers_are_lent_from_the_end_when_the_workers_run_low():
    s = FakeSession()
    w = WorkerCreates(s, lambda: None)
    mine = list(range(1, 101))
    w.lend(mine)
    assert s.lent == list(range(101 - LEND, 101)) and mine == list(range(1, 101 - LEND))
    w.lend(mine)  # still plenty: nothing more
    assert len(s.lent) == LEND and w.left() == LEND
    assert len(w.take_back()) == LEND and w.left() == 0
    w.close()
    w.dir_on(3)
    w.dirs_off(None)
    w.lend(mine)
    assert w.take_back() == [] and ("dir", 3, True) not in s.calls
