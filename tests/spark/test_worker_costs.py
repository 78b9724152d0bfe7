"""What a micro-batch costs in Spark's processes, without a JVM: ``freeze_gc_once`` keeps the
reused Python workers' ``gc.collect()`` after every call short, and a local deploy's JVM compiles
with C1 only."""

from __future__ import annotations

import gc
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
