"""Topics through Spark: the epic_topic source and sink, exactly once, with markers."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from epic.spark import offsets_from_progress, read_topic, write_topic
from epic.topics import Topic

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("ts", pa.int64()), ("key", pa.string()), ("v", pa.float64())])


def fill(topic, batches, rows, *, eos_marker=True):
    """Append `batches` segments of `rows` rows with watermarks, then a zero-row EOS marker."""
    for i in range(batches):
        ts = pa.array(range(i * rows, (i + 1) * rows), pa.int64())
        b = pa.record_batch([pc.add(ts, 2**60), pa.array([f"k{j % 7}" for j in range(rows)]),
                             pa.array([float(j) for j in range(rows)])], schema=SCHEMA)
        topic.append([b], producer="gen", batch_id=i, watermark=2**60 + (i + 1) * rows)
    if eos_marker:
        topic.append_marker(producer="gen", batch_id=batches, watermark=2**60 + batches * rows,
                            eos=True)


def make_double_v():
    """The stateless node under test (v * 2), built locally so cloudpickle ships it by value:
    Spark's Python workers cannot import test modules."""

    def double_v(batches):
        import pyarrow.compute as pc

        for b in batches:
            yield pa.RecordBatch.from_arrays(
                [b.column(0), b.column(1), pc.multiply(b.column(2), 2)], schema=b.schema)

    return double_v


def run_node(spark, src, dst, ckpt, **read_opts):
    """Run the v*2 node topic->topic with the available-now trigger until drained."""
    df = read_topic(spark, src, **read_opts)
    out = df.mapInArrow(make_double_v(), df.schema)
    q = (write_topic(out, dst, producer="double", checkpoint=ckpt, time_column="ts")
         .trigger(availableNow=True).start())
    q.awaitTermination()
    assert q.exception() is None
    return q


def expected(src):
    """The input table with v doubled, sorted."""
    t = Topic.open(src).read_table()
    t = t.set_column(2, "v", pc.multiply(t.column("v"), 2))
    return t.sort_by([("ts", "ascending")])


@pytest.mark.slow   # ~21 s of the default tier (session 36: 590.8 s of 600)
def test_roundtrip_map_in_arrow(spark, tmp_path):
    """topic -> mapInArrow -> topic equals the input mapped; EOS and watermark flow through."""
    src, dst, ckpt = (str(tmp_path / n) for n in ("in", "out", "ckpt"))
    fill(Topic.create(src, SCHEMA, time_column="ts"), batches=4, rows=500)
    q = run_node(spark, src, dst, ckpt, max_segments_per_trigger=2)
    out = Topic.open(dst)
    got = out.read_table().sort_by([("ts", "ascending")])
    assert got.equals(expected(src))  # int64 beyond 2^53 included, exactly
    st = out.status()
    assert st.eos and st.watermark == 2**60 + 2000
    assert offsets_from_progress(q.lastProgress)[-1].eos
    assert os.listdir(out.tmp_dir) == []


def test_exactly_once_after_replay(spark, tmp_path):
    """Deleting the last commit-log entry makes Spark replay that batch: no duplicate appears."""
    src, dst, ckpt = (str(tmp_path / n) for n in ("in", "out", "ckpt"))
    inp = Topic.create(src, SCHEMA, time_column="ts")
    fill(inp, batches=3, rows=300, eos_marker=False)
    run_node(spark, src, dst, ckpt, max_segments_per_trigger=1)
    commits = sorted(int(f) for f in os.listdir(os.path.join(ckpt, "commits")) if f.isdigit())
    before = Topic.open(dst).read_table().num_rows
    assert before == 900
    os.remove(os.path.join(ckpt, "commits", str(commits[-1])))
    crc = os.path.join(ckpt, "commits", f".{commits[-1]}.crc")
    if os.path.exists(crc):
        os.remove(crc)
    # More input arrives meanwhile; the restarted query replays the last batch, then reads on.
    fill_more = pa.record_batch([pa.array([2**60 + 10_000], pa.int64()), pa.array(["z"]),
                                 pa.array([1.0])], schema=SCHEMA)
    inp.append([fill_more], producer="gen", batch_id=3, eos=True)
    q = run_node(spark, src, dst, ckpt, max_segments_per_trigger=1)
    assert commits[-1] in [p["batchId"] for p in q.recentProgress]  # really replayed
    got = Topic.open(dst).read_table().sort_by([("ts", "ascending")])
    assert got.num_rows == 901
    assert got.equals(expected(src))
    assert Topic.open(dst).status().eos


def test_fresh_checkpoint_on_used_topic_refused(tmp_path):
    """A new checkpoint writing into a topic that has this producer's output fails loudly."""
    from pyspark.sql.types import LongType, StructField, StructType

    from epic.errors import EpicError
    from epic.spark import TopicStreamWriter

    t = Topic.create(tmp_path / "out", pa.schema([("ts", pa.int64())]))
    t.append([pa.record_batch([pa.array([1])], names=["ts"])], producer="node", batch_id=0)
    schema = StructType([StructField("ts", LongType())])
    opts = {"producer": "node", "checkpointLocation": str(tmp_path / "fresh")}
    with pytest.raises(EpicError, match="checkpoint .* is new"):
        TopicStreamWriter(str(tmp_path / "out"), schema, opts)
    TopicStreamWriter(str(tmp_path / "out"), schema, {**opts, "producer": "other"})
