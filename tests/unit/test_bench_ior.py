"""bench/ior.py's pure parts: mdtest's and IOR's output parsed, their command lines, the
interleaving order, the medians' intervals and the report's ratios (issue 29)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from pvfs.bench.ior_build import fadvise_dontneed, ior_binaries, run_mpi
from pvfs.bench.ior_tools import (
    FULL,
    QUICK,
    STEPS,
    Sizes,
    build_report,
    cpu_report,
    figure_names,
    format_cpu,
    geomean,
    ior_argv,
    ior_bytes,
    issue_target,
    markdown_table,
    mdtest_argv,
    median_interval,
    metadata_geomeans,
    mpiexec_argv,
    parse_ior,
    parse_mdtest,
    report_figure,
    rotation,
    schedule,
    steps_at,
)

# mdtest 4.1.0+dev (hpc/ior 5fcf0ba), 2 ranks, -F -P -N 1 -w 3901 -e 3901
MDTEST_OUT = """\
-- started at 11/28/2026 17:29:22 --

mdtest-4.1.0+dev was launched with 2 total task(s) on 1 node(s)
Command line used: /x/src/mdtest '-n' '100' '-F' '-P' '-N' '1' '-w' '3901' '-e' '3901' '-d' '/t/hard'
Nodemap: 11
Path                : /t/hard
FS                  : 252.0 GiB   Used FS: 4.9%   Inodes: 16.0 Mi   Used Inodes: 2.7%
V-0: Rank   0 Line  2594 Shifting ranks by 1 for each phase.
2 tasks, 200 files

SUMMARY rate (in ops/sec): (of 1 iterations)
   Operation                     Max            Min           Mean        Std Dev
   ---------                     ---            ---           ----        -------
   File creation                 722.797        722.797        722.797          0.000
   File stat                   12494.575      12494.575      12494.575          0.000
   File read                   12487.507      12487.507      12487.507          0.000
   File removal                12347.083      12347.083      12347.083          0.000
   Tree creation                 726.790        726.790        726.790          0.000
   Tree removal                   49.796         49.796         49.796          0.000

SUMMARY time (in ms/op): (of 1 iterations)
   Operation                     Max            Min           Mean        Std Dev
   ---------                     ---            ---           ----        -------
   File creation                   0.277          0.277          0.277          0.000
   File stat                       0.016          0.016          0.016          0.000
   File read                       0.016          0.016          0.016          0.000
   File removal                    0.016          0.016          0.016          0.000
   Tree creation                   0.001          0.001          0.001          0.000
   Tree removal                    0.020          0.020          0.020          0.000
-- finished at 11/28/2026 17:29:23 --
"""

# IOR 4.1.0+dev, 2 ranks, one shared file, 47,008-byte transfers (columns trimmed at the end)
IOR_OUT = """\
IOR-4.1.0+dev: MPI Coordinated Test of Parallel I/O
Results: 

access    bw(MiB/s)  IOPS       Latency(s)  block(KiB) xfer(KiB)  open(s)    wr/rd(s)   close(s)   total(s)   iter
------    ---------  ----       ----------  ---------- ---------  --------   --------   --------   --------   ----
write     171.70     10018      0.000183    45.91      45.91      0.001526   0.019964   0.004547   0.052219   0   

Summary of all tests:
Operation   Max(MiB)   Min(MiB)  Mean(MiB)     StdDev   Max(OPs)   Min(OPs)  Mean(OPs)     StdDev    Mean(s) Stonewall(s) Stonewall(MiB) Test# #Tasks tPN reps fPP reord reordoff reordrand seed segcnt   blksiz    xsize aggs(MiB)   API RefNum
write         175.70     170.70     171.20       0.00    3830.01    3830.01    3830.01       0.00    0.05222         NA            NA     0      2   2    1   0     1        1         0    0    100    47008    47008       9.0 POSIX      0
read          901.00     899.00     900.50       0.00    3830.01    3830.01    3830.01       0.00    0.05222         NA            NA     0      2   2    1   0     1        1         0    0    100    47008    47008       9.0 POSIX      0
Finished            : Sat Nov 28 17:29:24 2026
"""


# ----------------------------------------------------------------------------- parsing
def test_mdtest_rates_are_the_mean_column_of_the_rate_table_not_the_time_table() -> None:
    got = parse_mdtest(MDTEST_OUT)
    assert got == {"create": 722.797, "stat": 12494.575, "read": 12487.507,
                   "remove": 12347.083, "tree-create": 726.79, "tree-remove": 49.796}


def test_mdtest_mean_column_differs_from_max_and_min() -> None:
    text = MDTEST_OUT.replace("722.797        722.797        722.797",
                              "900.000        500.000        722.797")
    assert parse_mdtest(text)["create"] == 722.797


def test_mdtest_output_without_a_summary_is_an_error() -> None:
    with pytest.raises(ValueError, match="SUMMARY rate"):
        parse_mdtest("mdtest: ERROR: unable to create file\n")
    empty = "SUMMARY rate (in ops/sec): (of 1 iterations)\n   Operation  Max Min Mean Std Dev\n\n"
    with pytest.raises(ValueError, match="no rows"):
        parse_mdtest(empty)


def test_ior_bandwidth_is_the_mean_mib_column_of_each_operation() -> None:
    assert parse_ior(IOR_OUT) == {"write": 171.20, "read": 900.50}


def test_ior_output_without_a_summary_or_with_another_header_is_an_error() -> None:
    with pytest.raises(ValueError, match="Summary of all tests"):
        parse_ior("ior ERROR: open64() failed\n")
    with pytest.raises(ValueError, match="header"):
        parse_ior(IOR_OUT.replace("Mean(MiB)", "Avg(MiB)"))
    no_rows = IOR_OUT.split("write         175")[0] + "Finished\n"
    with pytest.raises(ValueError, match="no write or read"):
        parse_ior(no_rows)


# ----------------------------------------------------------------------------- command lines
def test_mdtest_easy_is_empty_files_a_directory_per_rank() -> None:
    argv = mdtest_argv("/b/mdtest", "/m/d", "easy", 2000)
    assert argv[0] == "/b/mdtest"
    assert argv[argv.index("-n") + 1] == "2000"
    assert argv[argv.index("-d") + 1] == "/m/d"
    assert {"-F", "-u", "-L", "-P"} <= set(argv)
    assert argv[argv.index("-N") + 1] == "1"
    assert "-w" not in argv and "-e" not in argv


def test_mdtest_hard_writes_and_reads_3901_bytes_in_one_directory() -> None:
    argv = mdtest_argv("mdtest", "/m/d", "hard", 1000)
    assert argv[argv.index("-w") + 1] == "3901"
    assert argv[argv.index("-e") + 1] == "3901"
    assert "-F" in argv and "-u" not in argv


def test_mdtest_rejects_an_unknown_kind_and_no_files() -> None:
    with pytest.raises(ValueError):
        mdtest_argv("mdtest", "/d", "medium", 10)
    with pytest.raises(ValueError):
        mdtest_argv("mdtest", "/d", "easy", 0)


def test_ior_easy_is_a_file_per_rank_of_1_mib_transfers() -> None:
    sizes = Sizes(easy_files=1, hard_files=1, easy_mib=64, hard_segments=7)
    w = ior_argv("/b/ior", "/m/f", "easy", "write", sizes)
    assert w[:3] == ["/b/ior", "-a", "POSIX"]
    assert "-F" in w
    assert w[w.index("-t") + 1] == "1m" and w[w.index("-b") + 1] == "64m"
    assert {"-w", "-e", "-k", "-C", "-g"} <= set(w) and "-r" not in w
    assert w[w.index("-o") + 1] == "/m/f"
    r = ior_argv("/b/ior", "/m/f", "easy", "read", sizes)
    assert "-r" in r and "-w" not in r and "-k" not in r  # the read removes the files


def test_ior_hard_is_one_shared_file_of_47008_byte_transfers() -> None:
    sizes = Sizes(easy_files=1, hard_files=1, easy_mib=64, hard_segments=7)
    w = ior_argv("ior", "/m/f", "hard", "write", sizes)
    assert "-F" not in w
    assert w[w.index("-t") + 1] == "47008" and w[w.index("-b") + 1] == "47008"
    assert w[w.index("-s") + 1] == "7"
    with pytest.raises(ValueError):
        ior_argv("ior", "/m/f", "hard", "append", sizes)
    with pytest.raises(ValueError):
        ior_argv("ior", "/m/f", "soft", "write", sizes)


def test_mpiexec_line_names_the_rank_count() -> None:
    assert mpiexec_argv("/v/mpiexec", 4, ["ior", "-w"]) == ["/v/mpiexec", "-n", "4", "ior",
                                                             "-w"]
    with pytest.raises(ValueError):
        mpiexec_argv("mpiexec", 0, ["ior"])


def test_quick_sizes_are_smaller_than_full_and_creates_stay_2000() -> None:
    for f in ("easy_files", "hard_files", "easy_mib", "hard_segments"):
        assert getattr(QUICK, f) < getattr(FULL, f)
    assert FULL.creates == QUICK.creates == 2000


def test_ior_binaries_are_in_the_clones_src(tmp_path) -> None:
    assert ior_binaries(tmp_path) == (tmp_path / "src" / "ior", tmp_path / "src" / "mdtest")


# ----------------------------------------------------------------------------- the order
def test_rotation_starts_each_repetition_one_target_later() -> None:
    t = ["pvfs", "gluster", "moosefs", "ceiling"]
    assert rotation(t, 0) == t
    assert rotation(t, 1) == ["gluster", "moosefs", "ceiling", "pvfs"]
    assert rotation(t, 5) == rotation(t, 1)
    assert rotation([], 3) == []


def test_schedule_puts_each_target_in_another_position_every_repetition() -> None:
    targets = ["pvfs", "gluster", "moosefs", "ceiling"]
    sched = schedule(targets, [1, 2, 4], repeats=3)
    for n in (1, 2, 4):
        for step in steps_at(n):
            orders = [o for rep, r, s, o in sched if r == n and s == step]
            assert len(orders) == 3
            for o in orders:
                assert sorted(o) == sorted(targets)  # every target once per step
            for t in targets:
                assert len({o.index(t) for o in orders}) == 3


def test_schedule_runs_ranks_and_steps_in_order_within_a_repetition() -> None:
    sched = schedule(["a", "b"], [1, 2], repeats=2)
    assert [(rep, n, s) for rep, n, s, _ in sched] == (
        [(0, 1, s) for s in STEPS] + [(0, 2, s) for s in STEPS if s != "creates-1p"]
        + [(1, 1, s) for s in STEPS] + [(1, 2, s) for s in STEPS if s != "creates-1p"])


def test_single_process_creates_run_at_one_rank_only() -> None:
    assert "creates-1p" in steps_at(1)
    assert "creates-1p" not in steps_at(2) and "creates-1p" not in steps_at(4)
    figs = figure_names([1, 4])
    assert ("creates-1p-create", 1) in figs and ("creates-1p-create", 4) not in figs
    assert ("mdtest-hard-read", 4) in figs and ("mdtest-easy-read", 4) not in figs


# ----------------------------------------------------------------------------- statistics
def test_three_values_give_the_range_with_its_real_coverage() -> None:
    assert median_interval([5.0, 1.0, 3.0]) == (1.0, 5.0, 0.75)


def test_six_values_reach_95_percent_with_the_range() -> None:
    lo, hi, cov = median_interval([6, 2, 4, 1, 3, 5])
    assert (lo, hi) == (1, 6)
    assert cov == pytest.approx(1 - 2 / 64)


def test_ten_values_give_the_second_order_statistics() -> None:
    lo, hi, cov = median_interval(list(range(1, 11)))
    assert (lo, hi) == (2, 9)
    assert cov == pytest.approx(1 - 2 * 11 / 1024)
    assert cov >= 0.95


def test_missing_values_are_left_out_of_the_interval() -> None:
    assert median_interval([None, 2.0, None]) == (2.0, 2.0, 0.0)
    assert median_interval([]) == (None, None, 0.0)


def test_geomean() -> None:
    assert geomean([0.5, 2.0]) == pytest.approx(1.0)
    assert geomean([None, 4.0]) == pytest.approx(4.0)
    assert geomean([]) is None


# ----------------------------------------------------------------------------- the report
def test_report_picks_the_best_peer_and_pairs_repetitions_for_the_ratio() -> None:
    runs = {"pvfs": [100.0, 200.0, 300.0], "gluster": [400.0, 400.0, 400.0],
            "moosefs": [1000.0, 1000.0, 500.0], "ceiling": [2000.0, 1000.0, 3000.0]}
    got = report_figure(runs)
    assert got["best_peer"] == "moosefs"
    assert got["median"]["moosefs"] == 1000.0
    assert got["ratio_vs_best"] == pytest.approx(0.2)
    # per-repetition ratios 0.1, 0.2, 0.6: range 0.1-0.6 at 75 %
    assert got["ratio_vs_best_interval"] == pytest.approx([0.1, 0.6])
    assert got["ratio_vs_best_coverage"] == 0.75
    assert got["ratio_vs_ceiling"] == pytest.approx(0.1)
    assert got["ratio_vs_ceiling_interval"] == pytest.approx([0.05, 0.2])
    assert got["interval"]["pvfs"] == [100.0, 300.0]


def test_report_without_ceiling_or_with_failed_repetitions() -> None:
    runs = {"pvfs": [None, 200.0], "gluster": [100.0, None], "moosefs": [None, None]}
    got = report_figure(runs)
    assert got["best_peer"] == "gluster"
    assert got["ratio_vs_best"] == pytest.approx(2.0)
    assert got["ratio_vs_best_interval"] is None  # no repetition where both ran
    assert got["ratio_vs_ceiling"] is None and got["ratio_vs_ceiling_interval"] is None


def test_the_issues_target_is_1_5x_the_best_peer_or_0_9x_a_lower_ceiling() -> None:
    assert issue_target(1000.0, None) == pytest.approx(1500.0)
    assert issue_target(1000.0, 2000.0) == pytest.approx(1500.0)
    assert issue_target(1000.0, 1200.0) == pytest.approx(1080.0)
    assert issue_target(None, 1200.0) is None
    got = report_figure({"pvfs": [540.0], "moosefs": [1000.0], "ceiling": [1200.0]})
    assert got["target"] == pytest.approx(1080.0)
    assert got["ratio_vs_target"] == pytest.approx(0.5)


def test_build_report_has_every_figure_with_its_unit() -> None:
    runs = {"pvfs": {"ior-hard-write@2": [40.0]}, "gluster": {"ior-hard-write@2": [200.0]}}
    rep = build_report(runs, [1, 2])
    assert list(rep) == [f"{f}@{n}" for f, n in figure_names([1, 2])]
    assert rep["ior-hard-write@2"]["unit"] == "MiB/s"
    assert rep["creates-1p-create@1"]["unit"] == "ops/s"
    assert rep["ior-hard-write@2"]["ratio_vs_best"] == pytest.approx(0.2)
    assert rep["mdtest-easy-create@1"]["ratio_vs_best"] is None


def test_an_ior_phase_moves_its_shape_times_the_ranks() -> None:
    sizes = Sizes(easy_files=1, hard_files=1, easy_mib=16, hard_segments=200)
    assert ior_bytes("easy", sizes, 4) == 4 * 16 * (1 << 20)
    assert ior_bytes("hard", sizes, 2) == 2 * 200 * 47008
    with pytest.raises(ValueError):
        ior_bytes("medium", sizes, 1)


def test_the_cpu_report_has_the_median_per_ior_figure_and_target() -> None:
    runs = {"pvfs": {"ior-hard-write-cpu@2": [3.0, 1.0, 2.0], "ior-hard-write@2": [40.0]},
            "gluster": {"ior-hard-write-cpu@2": [None, 5.0]}}
    cpu = cpu_report(runs, [2], steps=["mdtest-easy", "ior-hard"])
    assert list(cpu) == ["ior-hard-write@2", "ior-hard-read@2"]  # no mdtest figure
    assert cpu["ior-hard-write@2"] == {"pvfs": 2.0, "gluster": 5.0}
    assert cpu["ior-hard-read@2"] == {"pvfs": None, "gluster": None}
    text = format_cpu(cpu, ["pvfs", "gluster"])
    assert "CPU s/GiB" in text and "2.00" in text and "5.00" in text


def test_metadata_geomean_leaves_out_the_bandwidth_figures() -> None:
    runs = {"pvfs": {"mdtest-easy-create@1": [50.0], "ior-easy-write@1": [1.0]},
            "moosefs": {"mdtest-easy-create@1": [100.0], "ior-easy-write@1": [100.0]}}
    g = metadata_geomeans(build_report(runs, [1]))
    assert g["vs_best"] == pytest.approx(0.5)
    assert g["vs_best@1"] == pytest.approx(0.5)
    assert g["vs_ceiling"] is None


def test_markdown_table_names_the_peer_and_the_ratio() -> None:
    runs = {"pvfs": {"mdtest-hard-stat@2": [500.0, 496.0, 490.0]},
            "moosefs": {"mdtest-hard-stat@2": [8000.0, 8754.0, 9000.0]},
            "ceiling": {"mdtest-hard-stat@2": [20000.0, 20533.0, 21000.0]}}
    table = markdown_table(build_report(runs, [2]))
    row = next(ln for ln in table.splitlines() if ln.startswith("| mdtest hard: stat | 2"))
    assert "MooseFS 8,754" in row and "| 496 |" in row
    assert "0.06×" in row and "20,533" in row and "0.02×" in row
    assert row.endswith("| 13,131 | 0.04× |")  # 1.5 × 8,754


# ----------------------------------------------------------------------------- the runner's tools
def test_run_mpi_raises_with_the_output_on_failure() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        run_mpi(["sh", "-c", "echo boom; exit 3"], timeout=30)
    assert run_mpi(["sh", "-c", "echo fine"], timeout=30) == "fine\n"


def test_run_mpi_ends_the_whole_process_group_on_a_timeout(tmp_path) -> None:
    pidfile = tmp_path / "child"
    with pytest.raises(subprocess.TimeoutExpired):
        run_mpi(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"], timeout=1)
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            break
        time.sleep(0.05)
    stat = Path(f"/proc/{pid}/stat")
    assert not stat.exists() or stat.read_text().split(")")[-1].split()[0] == "Z"


def test_fadvise_touches_every_file_under_the_directory(tmp_path) -> None:
    (tmp_path / "a").write_bytes(b"x" * 10)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b").write_bytes(b"y")
    assert fadvise_dontneed(str(tmp_path)) == 2


@pytest.mark.skipif(not os.environ.get("PVFS_IOR_SRC"), reason="needs $PVFS_IOR_SRC (built)")
def test_the_built_programs_run_every_step_on_a_local_directory(tmp_path) -> None:
    from pvfs.bench.ior import Runner
    from pvfs.bench.ior_build import venv_tool

    ior, mdtest = ior_binaries(Path(os.environ["PVFS_IOR_SRC"]))
    if not (ior.exists() and mdtest.exists()):
        pytest.skip("ior/mdtest not built")
    sizes = Sizes(easy_files=20, hard_files=10, easy_mib=2, hard_segments=10, creates=20)
    runner = Runner(ior, mdtest, venv_tool("mpiexec"), sizes, cold=False, timeout=120)
    for step in STEPS:
        where = tmp_path / step
        where.mkdir()
        got = runner.step(step, str(where), 1 if step == "creates-1p" else 2)
        assert all(v > 0 for v in got.values()), (step, got)


# ----------------------------------------------------------------------------- the loop
class _FakeRunner:
    """Steps that report 1.0 per phase, except where told to fail."""

    def __init__(self, dirs: dict[str, str], fail: set[tuple[str, int]],
                 kill: str | None = None) -> None:
        self.dirs, self.fail, self.kill, self.calls = dirs, fail, kill, []

    def step(self, step: str, where: str, ranks: int) -> dict[str, float]:
        from pvfs.bench.ior_tools import PHASES

        target = next(t for t, d in self.dirs.items() if where.startswith(d + os.sep))
        self.calls.append((target, step, ranks))
        assert Path(where).is_dir()
        if (target, len([c for c in self.calls if c[0] == target])) in self.fail:
            raise RuntimeError("mdtest: ERROR")
        if target == self.kill:
            os.rename(self.dirs[target], self.dirs[target] + ".gone")  # the mount died
        return {p: 1.0 for p in PHASES[step]}


def _record(names: list[str]) -> dict:
    return {"runs": {t: {} for t in names}, "errors": [], "order": [],
            "load": {"at_each_step": []}}


def test_measure_keeps_one_entry_per_repetition_even_after_a_failure(tmp_path) -> None:
    from pvfs.bench.ior import measure

    dirs = {}
    for t in ("a", "b"):
        (tmp_path / t).mkdir()
        dirs[t] = str(tmp_path / t)
    record = _record(["a", "b"])
    measure(_FakeRunner(dirs, fail={("b", 1)}), dirs, [1, 2], 2, record)
    assert record["runs"]["b"]["mdtest-easy-create@1"] == [None, 1.0]
    assert record["runs"]["a"]["mdtest-easy-create@1"] == [1.0, 1.0]
    assert all(len(v) == 2 for r in record["runs"].values() for v in r.values())
    assert [(e["target"], e["step"], e["rep"]) for e in record["errors"]] == [
        ("b", "mdtest-easy", 0)]
    assert [o[3] for o in record["order"][:2]] == [["a", "b"], ["a", "b"]]
    assert record["order"][-1][3] == ["b", "a"]
    assert os.listdir(tmp_path / "a") == []  # the step directories are removed


def test_a_target_whose_file_system_went_away_is_left_out_not_measured(tmp_path) -> None:
    from pvfs.bench.ior import measure

    (tmp_path / "a" / "mnt").mkdir(parents=True)
    (tmp_path / "b" / "mnt").mkdir(parents=True)
    dirs = {"a": str(tmp_path / "a" / "mnt"), "b": str(tmp_path / "b" / "mnt")}
    record = _record(["a", "b"])
    runner = _FakeRunner(dirs, fail=set(), kill="b")
    measure(runner, dirs, [1], 1, record)
    # b's directory vanished during its first step: that number and every later one is None
    assert record["runs"]["b"]["mdtest-easy-create@1"] == [None]
    assert all(v == [None] for v in record["runs"]["b"].values())
    assert [c for c in runner.calls if c[0] == "b"] == [("b", "mdtest-easy", 1)]
    assert record["runs"]["a"]["ior-hard-read@1"] == [1.0]
    assert any("went away" in e["error"] for e in record["errors"])


def test_a_run_of_some_steps_schedules_and_reports_only_those() -> None:
    steps = ["creates-1p", "mdtest-easy"]  # (in any order: they run in STEPS order)
    sched = schedule(["a"], [1, 2], repeats=1, steps=steps)
    assert [(n, s) for _rep, n, s, _ in sched] == [
        (1, "mdtest-easy"), (1, "creates-1p"), (2, "mdtest-easy")]
    figs = figure_names([1, 2], steps)
    assert all(f.startswith(("mdtest-easy-", "creates-1p-")) for f, _n in figs)
    rep = build_report({"a": {}}, [1, 2], steps=steps)
    assert list(rep) == [f"{f}@{n}" for f, n in figs]
