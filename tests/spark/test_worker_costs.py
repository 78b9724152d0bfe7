"""What a micro-batch costs in Spark's reused Python workers, without a JVM: the planner and the
committer are pickled by cloudpickle once per process (epic/spark/direct.py, "Pickled once"), and
``freeze_gc_once`` keeps the workers' ``gc.collect()`` after every call short."""

from __future__ import annotations

import gc
import pickle
import sys
import types

import pyarrow as pa

from epic.spark import direct
from epic.spark.direct import Committer, GroupPlanner
from epic.spark.executor import freeze_gc_once


class _Plan:
    """Stands in for a GroupPlan: what is pickled, and a counter of how often."""

    pickled = 0

    def __init__(self, name):
        self.name = name
        self.trace = ""
        self.payload = pa.schema([("x", pa.int64())])

    def __reduce__(self):
        _Plan.pickled += 1
        return (_Plan, (self.name,))


def test_committer_is_pickled_once_and_restored_afresh():
    c = Committer([], "q", "")
    c.extra = _Plan("c")
    before = _Plan.pickled
    a = pickle.dumps(c)
    assert pickle.dumps(c) == a
    assert _Plan.pickled == before + 1, "the committer was pickled again"
    r1, r2 = pickle.loads(a), pickle.loads(a)
    assert r1 is not r2 and r1.extra is not r2.extra     # a commit never shares a writer
    assert r1.name == "q" and r1.extra.name == "c"
    # what was restored is handed on as the same bytes (the writer Spark pickles to the tasks)
    assert pickle.dumps(r1) == a
    assert _Plan.pickled == before + 1


def test_task_planner_is_restored_once_per_process():
    g = GroupPlanner(_Plan("g"), [], 100)
    before = _Plan.pickled
    blob = pickle.dumps(g)
    assert pickle.dumps(g) == blob and _Plan.pickled == before + 1
    r1, r2 = pickle.loads(blob), pickle.loads(blob)
    assert r1 is r2 and r1.plan.name == "g" and r1.inputs is None and r1.batch_rows == 100
    other = pickle.loads(pickle.dumps(GroupPlanner(_Plan("h"), [], 100)))
    assert other is not r1 and other.plan.name == "h"
    assert len(direct._SHARED) <= direct._SHARED_MAX


def test_freeze_is_redone_when_modules_were_imported():
    freeze_gc_once()
    frozen = gc.get_freeze_count()
    freeze_gc_once()   # nothing new imported: no second collection
    assert gc.get_freeze_count() == frozen
    name = "epic_test_fresh_module"
    mod = types.ModuleType(name)
    mod.table = [[i] for i in range(1000)]   # long-lived (gc-tracked) objects an import brings
    sys.modules[name] = mod
    try:
        freeze_gc_once()
        assert gc.get_freeze_count() >= frozen + 1000
    finally:
        del sys.modules[name]


def test_local_deploy_jvm_compiles_with_c1_unless_told_otherwise(monkeypatch):
    from pyspark import SparkContext

    from epic.spark.runtime import LOCAL_JIT, _local_jit

    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    monkeypatch.delenv("JAVA_TOOL_OPTIONS", raising=False)
    opts = "spark.driver.extraJavaOptions"
    assert _local_jit(None, {})[opts] == LOCAL_JIT
    assert _local_jit("local[2]", {opts: "-Dx=1"})[opts] == f"{LOCAL_JIT} -Dx=1"
    mine = {opts: "-XX:-TieredCompilation"}
    assert _local_jit("local[2]", mine) == mine                  # the user's JIT setting wins
    assert _local_jit("spark://h:7077", {}) == {}                 # a cluster's JVMs: untouched
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=4")
    assert _local_jit("local[2]", {}) == {}
    monkeypatch.delenv("JAVA_TOOL_OPTIONS")
    monkeypatch.setattr(SparkContext, "_active_spark_context", object())
    assert _local_jit("local[2]", {}) == {}                       # a running JVM keeps its own
