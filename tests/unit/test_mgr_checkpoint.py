"""The manager's WAL checkpoints: never from a commit, always in another thread."""

from __future__ import annotations

from pvfs.daemons.mgr.store import Cred, MetaStore
from pvfs.layout.stripe import Stripe


def test_commits_never_checkpoint_and_checkpoint_runs_in_another_thread(tmp_path):
    """A commit only appends to the WAL (no fsync on the manager's trio thread); the
    checkpoint the server runs in a worker thread copies it into the database file."""
    import threading

    path = str(tmp_path / "meta.sqlite")
    s = MetaStore(path, 4, Stripe(0, 4, 65536))
    root = Cred(0, 0, ())
    for i in range(600):
        s.mkdir(1, f"d{i}", 0o755, root)
    out: list = []
    t = threading.Thread(target=lambda: out.append(s.txn.checkpoint()))
    t.start()
    t.join()
    log, done = out[0]
    assert log > 1000 and done == log  # SQLite's automatic checkpoint would run at 1000 frames
    s.close()
    s2 = MetaStore(path, 4, Stripe(0, 4, 65536))
    assert s2.lookup(1, "d599", root)["type"] == "dir"
    s2.close()
