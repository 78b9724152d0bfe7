"""What a micro-batch costs in Spark's processes, without a JVM: ``freeze_gc_once`` keeps the
reused Python workers' ``gc.collect()`` after every call short, a local deploy's JVM compiles
with C1 only, a worker's malloc keeps batch-sized blocks and serves Arrow's buffers
(``prepare_worker``), and the driver notices a finished file sink with a stat."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import types

import pytest

from epic.spark.executor import freeze_gc_once


def test_freeze_is_redone_when_modules_were_imported(monkeypatch):
    import epic.spark.executor as executor

    calls = []   # the collections and freezes freeze_gc_once makes (not other threads')
    monkeypatch.setattr(executor, "gc", types.SimpleNamespace(
        collect=lambda *a: calls.append("collect") or gc.collect(*a),
        freeze=lambda: calls.append("freeze") or gc.freeze()))
    for _ in range(5):
        freeze_gc_once()
        at, calls[:] = executor._frozen_at, []
        freeze_gc_once()   # nothing new imported: no second collection
        if executor._frozen_at == at:
            assert calls == []
            break
        # another test's leftover thread imported a module in between: the freeze was rightly
        # redone; try again
    else:
        pytest.fail("modules were imported during every attempt")
    frozen = gc.get_freeze_count()
    name = "epic_test_fresh_module"
    mod = types.ModuleType(name)
    mod.table = [[i] for i in range(1000)]   # long-lived (gc-tracked) objects an import brings
    sys.modules[name] = mod
    try:
        freeze_gc_once()
        assert calls == ["collect", "freeze"]
        # (other threads may free a few frozen objects meanwhile: the count is not exact)
        assert gc.get_freeze_count() >= frozen + 900
    finally:
        del sys.modules[name]


def test_local_deploy_jvm_compiles_with_c1_and_collects_serially_unless_told_otherwise(monkeypatch):
    from pyspark import SparkContext

    from epic.spark.runtime import LOCAL_GC, LOCAL_JIT, local_jit

    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    monkeypatch.delenv("JAVA_TOOL_OPTIONS", raising=False)
    opts = "spark.driver.extraJavaOptions"
    both = f"{LOCAL_JIT} {LOCAL_GC}"
    assert local_jit(None, {})[opts] == both
    assert local_jit("local[2]", {opts: "-Dx=1"})[opts] == f"{both} -Dx=1"
    mine = {opts: "-XX:-TieredCompilation"}                    # the user's JIT setting wins
    assert local_jit("local[2]", mine)[opts] == f"{LOCAL_GC} -XX:-TieredCompilation"
    mine = {opts: "-XX:+UseG1GC -XX:TieredStopAtLevel=4"}        # and their collector
    assert local_jit("local[2]", mine) == mine
    assert local_jit("spark://h:7077", {}) == {}                 # a cluster's JVMs: untouched
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=4 -XX:+UseParallelGC")
    assert local_jit("local[2]", {}) == {}
    monkeypatch.delenv("JAVA_TOOL_OPTIONS")
    monkeypatch.setattr(SparkContext, "_active_spark_context", object())
    assert local_jit("local[2]", {}) == {}                       # a running JVM keeps its own


_FAULTS = r"""
import resource, sys
import numpy as np
from epic.spark.executor import tune_malloc
tuned = tune_malloc() if sys.argv[1] == "tune" else None
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def batch():          # a batch's arrays of about 1 MB: made, all alive at once, then freed
    arrays = [np.ones(1_000_000 // 8) for _ in range(8)]
    del arrays
for _ in range(3):    # warm up: the first blocks are faulted in either way
    batch()
f0 = faults()
for _ in range(20):
    batch()
print(tuned, faults() - f0)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
@pytest.mark.parametrize("how", ["tune", "default", "user"])
def test_tuned_malloc_reuses_batch_sized_blocks(how):
    """With :func:`tune_malloc`, a worker's per-batch arrays reuse the pages of the previous
    batch's; without it (or when the user set a threshold, which it then leaves alone) glibc
    maps and unmaps them, faulting every page in anew."""
    env = dict(os.environ)
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    env.pop("MALLOC_TRIM_THRESHOLD_", None)
    if how == "user":
        env["MALLOC_MMAP_THRESHOLD_"] = str(128 << 10)
    out = subprocess.run([sys.executable, "-c", _FAULTS, "default" if how == "default" else "tune"],
                         env=env, capture_output=True, text=True, check=True).stdout.split()
    tuned, faults = out[0], int(out[1])
    pages = 20 * 8_000_000 // 4096
    if how == "tune":
        assert tuned == "True"
        assert faults < pages // 20
    else:
        assert tuned in ("None", "False")
        assert faults > pages // 2


def test_sinks_changed_sees_a_new_commit_record_without_reading_it(tmp_path):
    import json

    from epic.sinks import CsvSink, ParquetSink
    from epic.spark.launcher import Launcher
    from epic.spark.sink_query import sidecar_location

    def record(path, eos):
        side = sidecar_location(str(path)).path
        os.makedirs(os.path.dirname(side), exist_ok=True)
        tmp = side + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"batch": 1, "length": 0, "eos": eos}, f)
        os.replace(tmp, side)

    launcher = Launcher.__new__(Launcher)
    launcher._seen, launcher._local_side, launcher._done = {}, {}, set()
    launcher.deploy_id = None
    a = types.SimpleNamespace(sink=ParquetSink(str(tmp_path / "a.parquet")))
    b = types.SimpleNamespace(sink=CsvSink(str(tmp_path / "b.csv")))
    sinks = [a, b]
    assert launcher.sinks_changed(sinks)              # never checked
    assert not any([launcher.sink_done(n) for n in sinks])
    assert not launcher.sinks_changed(sinks)          # nothing written since
    record(tmp_path / "a.parquet", False)
    assert launcher.sinks_changed(sinks)              # a commit: worth a full check
    assert [launcher.sink_done(n) for n in sinks] == [False, False]
    assert not launcher.sinks_changed(sinks)
    record(tmp_path / "b.csv", True)
    assert not launcher.sinks_changed(sinks)          # a is not done: only a is watched
    assert [launcher.sink_done(n) for n in sinks] == [False, True]
    record(tmp_path / "a.parquet", True)
    assert launcher.sinks_changed(sinks)
    assert all([launcher.sink_done(n) for n in sinks])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
@pytest.mark.parametrize("user_pool", [None, "mimalloc"])
def test_a_worker_allocates_arrow_buffers_with_the_tuned_system_malloc(user_pool):
    env = {k: v for k, v in os.environ.items()
           if k not in ("ARROW_DEFAULT_MEMORY_POOL", "MALLOC_MMAP_THRESHOLD_",
                        "MALLOC_TRIM_THRESHOLD_")}
    if user_pool:
        env["ARROW_DEFAULT_MEMORY_POOL"] = user_pool
    code = ("import pyarrow as pa\n"
            "from epic.spark.executor import prepare_worker\n"
            "prepare_worker()\n"
            "a = pa.array(range(100000))\n"
            "print(pa.default_memory_pool().backend_name, pa.total_allocated_bytes() > 0)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[0] == (user_pool or "system")


def test_workers_keep_their_memory_within_the_deploys_budget(monkeypatch, tmp_path):
    """keep_or_release: up to WORKER_KEEPS a worker always keeps its cache; past it, only while
    the resident memory of the deploy's live workers as it is now (not as they recorded it),
    with its own, stays within the budget of its slots; a worker that exited counts for nothing;
    without slots (a cluster) the threshold alone."""
    import tempfile

    import epic.spark.executor as ex

    mib = 1 << 20
    monkeypatch.setattr(ex, "WORKER_KEEPS", 384 * mib)
    monkeypatch.setattr(ex, "WORKERS_KEEP_PER_SLOT", 500 * mib)
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    rss = {"now": 0}
    released = []

    def release(above=0):
        if above and rss["now"] <= above:
            return
        released.append(rss["now"] // mib)
        rss["now"] = 150 * mib

    monkeypatch.setattr(ex, "_resident_bytes", lambda: rss["now"])
    monkeypatch.setattr(ex, "release_memory", release)
    key = str(tmp_path / "wd")
    d = ex.cpu_slot_dir(key)
    os.makedirs(d)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with open(os.path.join(d, f"keep-{dead.pid}"), "w") as f:   # exited: counts for nothing
        f.write(str(900 * mib))
    # another worker, resident about 210 MB now whatever it recorded
    other = subprocess.Popen([sys.executable, "-c", "import sys, time\nb = b'x' * (200 << 20)\n"
                              "print('ready', flush=True)\ntime.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "ready"
        with open(os.path.join(d, f"keep-{other.pid}"), "w") as f:
            f.write(str(1 * mib))

        def end_task(mb, slots=2):
            rss["now"] = mb * mib
            ex.keep_or_release(key, slots)
            with open(os.path.join(d, f"keep-{os.getpid()}")) as f:
                return int(f.read()) // mib

        assert end_task(380) == 380 and released == []      # under WORKER_KEEPS: kept
        assert end_task(700) == 700 and released == []      # 700 + ~210 <= 2 x 500
        assert not os.path.exists(os.path.join(d, f"keep-{dead.pid}"))
        assert end_task(850) == 150 and released == [850]   # 850 + ~210 > 1000: handed back
        assert end_task(1200, slots=3) == 1200               # three slots: 1500
    finally:
        other.kill()
        other.wait()
    assert end_task(990) == 990                              # the other worker exited
    rss["now"] = 700 * mib
    ex.keep_or_release(None, 0)                              # a cluster: the threshold alone
    assert released[-1] == 700
