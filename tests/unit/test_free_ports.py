"""``free_ports`` never hands out a port twice in one process: a test that picks a global
cache's port and then starts a cluster must not find one of the cluster's daemons on it (the
kernel offers a closed probe's port again, and the mount then spoke the global cache's protocol
to an I/O daemon: EINVAL on creates, seen once in CI)."""

from __future__ import annotations

from collections.abc import Iterator

from pvfs.cluster import launch


class _KernelRepeating:
    """A socket whose kernel offers the ports of ``order`` in turn, repeats included."""

    order: Iterator[int]

    def bind(self, address):
        self.port = next(self.order)

    def getsockname(self):
        return ("127.0.0.1", self.port)

    def close(self):
        pass


def test_a_port_handed_out_is_not_handed_out_again(monkeypatch):
    monkeypatch.setattr(launch, "_HANDED_OUT", {})
    _KernelRepeating.order = iter([40001, 40001, 40002, 40001, 40003])
    monkeypatch.setattr(launch.socket, "socket", _KernelRepeating)
    first = launch.free_ports(1)
    second = launch.free_ports(2)
    assert first == [40001]
    assert second == [40002, 40003]


def test_the_memory_of_handed_out_ports_is_bounded(monkeypatch):
    monkeypatch.setattr(launch, "_HANDED_OUT", {})
    monkeypatch.setattr(launch, "_REMEMBERED", 3)
    _KernelRepeating.order = iter(range(41000, 41010))
    monkeypatch.setattr(launch.socket, "socket", _KernelRepeating)
    launch.free_ports(5)
    assert list(launch._HANDED_OUT) == [41002, 41003, 41004]


def test_real_ports_are_distinct_across_calls():
    seen = launch.free_ports(3) + launch.free_ports(3)
    assert len(set(seen)) == 6
