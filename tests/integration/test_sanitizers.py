"""pvfs's C under AddressSanitizer and UBSan, as part of ``make test`` (issue 30).

Both extensions are built with ``PVFS_BUILD=asan`` (setup.py: ``-fsanitize=address,undefined``)
into a temporary folder, and the C front end's and the engine's tests -- the bridge's unit
tests, the front end's request fuzz, the daemons' fast-path fuzz and model, and the mount
tests of the C front end with real daemons and a real mount -- run again in a child pytest
whose every Python process (its daemons and mounts too) loads the sanitized builds
(tests/sanitized/sitecustomize.py) with libasan preloaded. Any report halts its process
(``halt_on_error=1``): a child test then fails, and so does this one, with the report.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "tests" / "sanitized"
RUNS = {
    "front end": ["tests/unit/test_fusefront.py", "tests/unit/test_fusefront_answers.py",
                  "tests/unit/test_fusefront_creates.py", "tests/unit/test_fusefront_unlinks.py",
                  "tests/unit/test_fusefront_serve.py", "tests/property/test_fusefront_bridge.py",
                  "tests/integration/test_fusefront_streams.py"],
    "engine": ["tests/unit/test_native_fast.py", "tests/unit/test_native_engine.py",
               "tests/unit/test_native_transfer.py", "tests/unit/test_native_stripe.py",
               "tests/unit/test_native_conn_streams.py", "tests/property/test_native_model.py",
               "tests/property/test_fuzz_daemons.py", "tests/unit/test_pipeline_refusals.py",
               "tests/integration/test_native_pipeline.py"],
    "mounts": ["tests/integration/test_mount_front.py",
               "tests/integration/test_mount_front_writes.py",
               "tests/integration/test_mount_worker_creates.py",
               "tests/integration/test_mount_worker_unlinks.py",
               "tests/integration/test_mount_served_reads.py",
               "tests/integration/test_mount_stream_reads.py"],
}


def _libasan() -> str:
    try:
        out = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                             text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return out if os.path.isabs(out) and os.path.exists(out) else ""


@pytest.fixture(scope="module")
def sanitized(tmp_path_factory) -> dict[str, str]:
    """The sanitized build and the environment that loads it."""
    libasan = _libasan()
    if not libasan:
        pytest.skip("gcc has no libasan here")
    base = tmp_path_factory.mktemp("asan")
    built = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "-b", str(base / "lib"),
         "-t", str(base / "tmp")],
        cwd=ROOT, env={**os.environ, "PVFS_BUILD": "asan"}, capture_output=True, text=True,
        check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    lib = base / "lib" / "pvfs"
    assert any(p.name.startswith("_native.") for p in lib.iterdir()), list(lib.iterdir())
    return {**os.environ, "LD_PRELOAD": libasan,
            "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:abort_on_error=0",
            "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
            "PYTHONPATH": os.pathsep.join([str(HOOK), os.environ.get("PYTHONPATH", "")]),
            "PVFS_SANITIZED_LIB": str(lib), "PVFS_SANITIZED_LOADS": str(base / "loads")}


def _report(out: str) -> str:
    """The first sanitizer report in a run's output (or its tail): what a failure shows."""
    for key in ("runtime error", "ERROR: AddressSanitizer"):
        at = out.find(key)
        if at >= 0:
            return out[max(0, at - 300):at + 4000]
    return out[-6000:]


def _python(env: dict, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_the_sanitized_builds_are_loaded_and_a_report_fails_the_process(sanitized):
    done = _python(sanitized, "import pvfs._native as n, pvfs._fusefront as f; "
                              "print(n.__file__); print(f.__file__)")
    assert done.returncode == 0, done.stderr
    lib = sanitized["PVFS_SANITIZED_LIB"]
    assert all(line.startswith(lib) for line in done.stdout.split()), done.stdout
    for so in Path(lib).glob("*.so"):
        assert b"__asan_init" in so.read_bytes()  # (built instrumented)
    # a use after free in any of those processes is reported and ends it
    bad = _python(sanitized, "import ctypes; libc = ctypes.CDLL(None); "
                             "libc.malloc.restype = ctypes.c_void_p; p = libc.malloc(64); "
                             "libc.free(ctypes.c_void_p(p)); ctypes.memset(p, 0, 8)")
    assert bad.returncode != 0 and "heap-use-after-free" in bad.stderr, bad.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("run", list(RUNS))
def test_the_c_tests_pass_under_asan_and_ubsan(sanitized, run):
    loads = Path(sanitized["PVFS_SANITIZED_LOADS"])
    loads.unlink(missing_ok=True)
    # --capture=sys: a report is written to fd 2 by the process it ends; with pytest's fd
    # capture it would be lost with that process
    child = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--capture=sys",
         "-x", *RUNS[run]],
        cwd=ROOT, env=sanitized, capture_output=True, text=True, timeout=1400, check=False)
    out = child.stdout + child.stderr
    assert child.returncode == 0, _report(out)
    assert "runtime error" not in out and "Sanitizer" not in out, _report(out)
    seen = loads.read_text().split("\n") if loads.exists() else []
    pids = {line.split()[0] for line in seen if line.endswith("pvfs._fusefront")}
    if run == "mounts":  # the mounts' processes ran the sanitized front end, not only pytest
        assert len(pids) >= 2, seen
    else:
        assert pids or any(line.endswith("pvfs._native") for line in seen), seen
