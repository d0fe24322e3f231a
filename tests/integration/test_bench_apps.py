"""bench/apps.py end to end on local directories: a clone, an extraction and a removal timed
per target, the working directory on a journaled file system of its own when asked."""

from __future__ import annotations

import json
import subprocess

from pvfs.bench import apps


def test_the_apps_benchmark_times_every_phase_on_a_journaled_scratch(tmp_path, capsys):
    repo, tree = tmp_path / "repo", tmp_path / "tree"
    tree.mkdir()
    for i in range(20):
        (tree / f"m{i}.py").write_text(f"x = {i}\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "README").write_text("hello\n")
    subprocess.run(["git", "-C", str(repo), "add", "README"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-q", "-m", "one"], check=True)
    name = str(tmp_path / "apps")
    assert apps.main(["--target", "a=local", "--target", "b=local", "--subject", "a",
                      "--repo", str(repo), "--tree", str(tree), "--repeats", "1",
                      "--scratch", "journaled", "--json", name]) == 0
    doc = json.loads((tmp_path / "apps.json").read_text())
    assert doc["params"]["scratch"] in ("journaled ext4 (loop)", "/tmp")
    assert doc["params"]["tree_files"] == 20
    for phase in ("git-clone", "tar-x", "rm-r"):
        assert all(v > 0 for v in doc["results"][phase]["median_s"].values())
    assert "best/a" in capsys.readouterr().out
