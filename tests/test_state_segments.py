"""A deploy's state store with frozen segments (epic.serde.Frozen): snapshots refer to segment
files written once, every kept snapshot restores, and segment files nothing refers to go."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

import epic.aggregates as A
from epic import serde
from epic.errors import StateError
from epic.spark.tasks import KEEP_SNAPSHOTS, StateStore
from epic.windows import PrefixWindowOperator, few_time


def _op():
    sch = pa.schema([("k", pa.int64()), ("ts", pa.int64()), ("v", pa.int64())])
    return PrefixWindowOperator(few_time(300, 1, 1, origin=0), [A.count()], sch,
                                "ts", "s", "k")


def _batch(t0, t1):
    ts = np.repeat(np.arange(t0, t1), 2)
    k = np.tile([0, 1], t1 - t0)
    return pa.record_batch([pa.array(k), pa.array(ts), pa.array(ts % 5)],
                           names=["k", "ts", "v"])


def _save(store, op, b):
    sink = store.segment_sink(b)
    with serde.segments(sink=sink):
        data = op.snapshot()
    store.save(b, serde.pack_large({"op": serde.Blob(data)}, join=False), summary=(None, False, b),
               segments=sink)


def _restore(store, b):
    op = _op()
    st = serde.unpackb(store.load_before(b))
    with serde.segments(source=store.segment_source()):
        op.restore(st["op"])
    return op


def test_segment_files_follow_the_kept_snapshots(tmp_path, monkeypatch):
    from epic.windows import prefix

    monkeypatch.setattr(prefix, "SEG_ENTRIES", 32)
    store = StateStore(str(tmp_path), 0)
    whole = _op()
    out_whole, out_store = [], []
    op = None
    for b in range(40):
        batch = _batch(b * 25, (b + 1) * 25)
        out_whole += whole.on_batch(batch)
        op = _op() if b == 0 else _restore(store, b)
        out_store += op.on_batch(batch)
        _save(store, op, b)
        names = sorted(os.listdir(store.dir))
        states = sorted(int(n[:-6]) for n in names if n.endswith(".state"))
        segs = {n for n in names if n.endswith(".seg")}
        assert states == list(range(max(0, b - KEEP_SNAPSHOTS + 1), b + 1))
        used = set().union(*(store._refs(i) for i in states))
        assert segs == used, (b, segs ^ used)      # none missing, none left behind
        for i in states:                           # every kept snapshot restores
            _restore(store, i + 1)
    # a window of 300 units at 2 rows a unit: segments were frozen and later dropped
    assert b > 300 // 25 and used
    out_whole += whole.on_end()
    out_store += _restore(store, 40).on_end()
    assert (pa.Table.from_batches(out_store).to_pylist()
            == pa.Table.from_batches(out_whole).to_pylist())


def test_a_missing_segment_file_is_named(tmp_path, monkeypatch):
    from epic.windows import prefix

    monkeypatch.setattr(prefix, "SEG_ENTRIES", 32)
    store = StateStore(str(tmp_path), 0)
    op = _op()
    op.on_batch(_batch(0, 600))   # more than COLLAPSE_MIN elements per key: scanned
    _save(store, op, 0)
    seg = [n for n in os.listdir(store.dir) if n.endswith(".seg")]
    assert seg == ["0.seg"]
    os.remove(os.path.join(store.dir, "0.seg"))
    with pytest.raises(StateError, match=r"segment file '0.seg' is missing"):
        _restore(store, 1)
