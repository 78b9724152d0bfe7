"""`epic deploy`'s direct I/O gives `epic run`'s output; its work directory.

Tasks read their input files and write their outputs, Spark carrying one commit message per task
(the only I/O path; work directories of the retired `--io rows` are refused). Reuses
test_deploy's helpers (example topologies, CSV and row comparison).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import epic
from epic.spark.runtime import deploy
from epic.spark.source_query import key_partition
from epic.testing import rows_key
from epic.topics import Topic

from test_deploy import _same_rows

pytestmark = pytest.mark.spark

SCHEMA = {"k": "int64", "ts": "int64", "v": "int64"}
KEYS = 6
#: Rows per micro-batch of the split and window deploys: three data batches of 200 rows.
BATCH_ROWS = 200


def _all_events() -> list[dict]:
    """The events source's rows: 600 rows over KEYS keys, one per 10 ms."""
    return [{"k": i % KEYS, "ts": i * 10, "v": (i * 7) % 23} for i in range(600)]


def _events(t: epic.Topology) -> epic.Stream:
    """The events source (``_all_events``), batched 100 rows at a time."""
    # Functions a topology uses are defined inside the builders: Python workers cannot import
    # this test module, and nested functions are pickled by value.
    def gen():
        for i in range(600):
            yield {"k": i % 6, "ts": i * 10, "v": (i * 7) % 23}

    return t.source("events", epic.iterator_source(gen, schema=SCHEMA, time="ts", unit="ms",
                                                   batch_rows=100))


#: The rows each output of the route gets: ports 0 and 1 split the rows by parity of ``v``, port
#: 2 gets the even ones too (a row can go to two outputs).
PORTS = {0: lambda r: r["v"] % 2 == 0, 1: lambda r: r["v"] % 2 == 1, 2: lambda r: r["v"] % 2 == 0}


def _split_topology() -> epic.Topology:
    """source -> route (3 outputs, one schema) -> a collect sink, a filter, a keyed window."""
    t = epic.Topology("direct_split")

    def route(i, row):
        return row["v"] % 2 == (0 if i == 2 else i)

    p0, p1, p2 = t.splitstream("route", _events(t), 3, route)
    t.sink("out0", p0, epic.collect_sink())
    f = t.filter("big", p1, lambda b: epic.pc.greater(b["v"], 10))
    t.sink("out1", f, epic.collect_sink())
    w = t.window("sums", p2, epic.tumbling(1, origin=0), key="k",
                 aggregates=[epic.count("n"), epic.sum("v", name="total")])
    t.sink("out2", w, epic.collect_sink())
    return t


def _window_topology() -> epic.Topology:
    """source -> keyed sliding window with early emission -> collect sink."""
    t = epic.Topology("direct_keyed")
    w = t.window("sums", _events(t), epic.few_time(1, 0.5, 0.25, origin=0), key="k",
                 aggregates=[epic.count("n"), epic.sum("v", name="total"),
                             epic.max("v", name="top")])
    t.sink("out", w, epic.collect_sink())
    return t


def _tiny_topology() -> epic.Topology:
    """Five rows straight into a collect sink."""
    t = epic.Topology("direct_tiny")
    s = t.source("nums", epic.iterator_source([{"k": 0, "ts": i, "v": i} for i in range(5)],
                                              schema=SCHEMA, time="ts", unit="s"))
    t.sink("out", s, epic.collect_sink())
    return t


def _assert_same(got: list[dict], want: list[dict], what: str) -> None:
    """``got`` are ``want``'s rows in any order (floats to 1e-9), with a readable failure."""
    assert want, f"{what}: epic run gave no rows; the test proves nothing"
    assert len(got) == len(want), f"{what}: {len(got)} rows, epic run gave {len(want)}"
    if not _same_rows(got, want):
        pairs = zip(sorted(got, key=rows_key), sorted(want, key=rows_key))
        a, b = next((a, b) for a, b in pairs if not _same_rows([a], [b]))
        pytest.fail(f"{what}: deploy row {a} where epic run has {b}")


def _deploy_json(wd: Path) -> dict:
    return json.loads((wd / "deploy.json").read_text())


def _spooled(wd: Path) -> list[str]:
    return sorted(str(p.relative_to(wd)) for p in (wd / "spool").rglob("*.arrow"))


# -- the work directory generation ----------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_direct(spark, tmp_path_factory):
    """The tiny topology deployed with the defaults (batch_rows 1,000,000: the whole source is
    one micro-batch, which also carries its end of stream)."""
    wd = tmp_path_factory.mktemp("direct_tiny") / "wd"
    result = deploy(_tiny_topology(), str(wd), spark=spark, timeout=120)
    return wd, result


def test_tiny_direct_records_its_layout(spark, tiny_direct):
    """The tiny deploy equals epic run; its deploy.json records the direct layout, and a redeploy
    of the finished work directory keeps it."""
    wd, result = tiny_direct
    assert result.status["state"] == "finished"
    _assert_same(result.collected["out"].to_pylist(),
                 epic.run(_tiny_topology()).collected["out"].to_pylist(), "out")
    assert _deploy_json(wd)["io"] == "direct"


@pytest.mark.parametrize("manifest", [
    {"topology": "direct_tiny", "partitions": 2, "nodes": ["nums", "out"]},
    {"topology": "direct_tiny", "partitions": 2, "nodes": ["nums", "out"], "io": "rows"}],
    ids=["no-io", "rows"])
def test_rows_workdir_is_refused(spark, tmp_path, manifest):
    """A work directory of the retired rows mode (deploy.json with io "rows", or without io:
    written before io existed) is refused, naming the mode and the fix, and left as it was."""
    (tmp_path / "deploy.json").write_text(json.dumps(manifest))
    with pytest.raises(epic.EpicError, match=r"deployed with --io rows.*fresh --workdir"):
        deploy(_tiny_topology(), str(tmp_path), spark=spark, timeout=60)
    assert json.loads((tmp_path / "deploy.json").read_text()) == manifest
    assert not (tmp_path / "topics").exists()


# -- a splitstream in the direct mode ------------------------------------------------------------

@pytest.fixture(scope="module", params=[False, True], ids=["nofuse", "fuse"])
def split_deploy(request, spark, tmp_path_factory):
    """The split topology deployed without and with fuse: (fuse, work dir,
    result, epic run's collected rows)."""
    fuse = request.param
    wd = tmp_path_factory.mktemp("direct_split") / "wd"
    want = {k: v.to_pylist() for k, v in epic.run(_split_topology()).collected.items()}
    result = deploy(_split_topology(), str(wd), spark=spark, timeout=180, fuse=fuse,
                    batch_rows=BATCH_ROWS, partitions=2)
    return fuse, wd, result, want


def test_split_outputs_equal_run(split_deploy):
    """Every collect sink behind the splitstream gets epic run's rows."""
    fuse, wd, result, want = split_deploy
    assert result.status["state"] == "finished"
    assert sorted(result.collected) == sorted(want) == ["out0", "out1", "out2"]
    for name in want:
        _assert_same(result.collected[name].to_pylist(), want[name], name)


def test_split_writes_one_topic_per_port(split_deploy):
    """A route splitstream whose outputs share a schema writes topics/route.0, .1 and .2 (its
    query the producer), without a _port column, each holding only its port's rows; there is no
    topics/route."""
    fuse, wd, result, want = split_deploy
    topics = wd / "topics"
    assert not (topics / "route").exists()
    assert sorted(p.name for p in topics.iterdir() if p.name.startswith("route")) == [
        "route.0", "route.1", "route.2"]
    producer = "events__route" if fuse else "route"
    for port, keep in PORTS.items():
        topic = Topic.open(topics / f"route.{port}")
        assert "_port" not in topic.schema.names
        assert topic.schema.names[:len(SCHEMA)] == list(SCHEMA)
        segments = topic.segments()
        assert segments and {s.producer for s in segments} == {producer}
        # Retention deleted the segments its consumer committed; what is left is this port's.
        allowed = {tuple(r.values()) for r in _all_events() if keep(r)}
        stray = [r for r in topic.read_table().select(list(SCHEMA)).to_pylist()
                 if tuple(r.values()) not in allowed]
        assert stray == [], f"route.{port} holds rows of another port"


def test_split_ends_fused_group(split_deploy):
    """With fuse the source and the splitstream run as one query (no events topic) and each
    port's consumer chain as another; without fuse every node is a query of its own."""
    fuse, wd, result, want = split_deploy
    queries = set(result.status["nodes"])
    if fuse:
        assert queries == {"events+route", "out0", "big+out1", "sums+out2"}
        assert not (wd / "topics" / "events").exists()
    else:
        assert {"events", "route", "big", "sums"} <= queries
        assert (wd / "topics" / "events").is_dir()
    # a finished deploy's status shows every query ended, in the result and in status.json
    assert result.status["state"] == "finished"
    assert all(n["ended"] for n in result.status["nodes"].values()), result.status["nodes"]
    saved = json.loads((wd / "status.json").read_text())
    assert saved["state"] == "finished" and all(n["ended"] for n in saved["nodes"].values())


def test_spool_is_emptied(split_deploy):
    """The source's planned batches went through spool/ and nothing is left of it after the
    finished deploy; the status counts the input rows the tasks read from it (Spark itself only
    sees one commit-message row per task)."""
    fuse, wd, result, want = split_deploy
    assert _spooled(wd) == []
    q = "events+route" if fuse else "events"
    assert result.status["nodes"][q]["rows_in"] == len(_all_events())


def test_spool_is_emptied_when_the_last_batch_ends_the_stream(tiny_direct):
    """With the default batch_rows the single micro-batch holds every row and the end of stream
    (Spark never commits that source batch by itself): its spool file is gone too once the
    deploy finished."""
    wd, result = tiny_direct
    assert result.status["state"] == "finished"
    assert _spooled(wd) == []


# -- keyed state over two partitions ---------------------------------------------------------------

@pytest.mark.parametrize("fuse", [False, True], ids=["nofuse", "fuse"])
def test_keyed_window_two_partitions_equals_run(spark, tmp_path, fuse):
    """A keyed window with partitions=2 (two tasks per micro-batch, each keeping the rows whose
    key hashes to it) gives epic run's rows, with and without fuse."""
    keys = pa.record_batch({"k": pa.array(range(KEYS), pa.int64())})
    # The keys land in both partitions: both tasks of a micro-batch have rows to keep.
    assert set(key_partition(keys, ("k",), 2).tolist()) == {0, 1}
    want = epic.run(_window_topology()).collected["out"].to_pylist()
    wd = tmp_path / "wd"
    result = deploy(_window_topology(), str(wd), spark=spark, timeout=180, fuse=fuse,
                    partitions=2, batch_rows=BATCH_ROWS)
    assert result.status["state"] == "finished"
    assert _deploy_json(wd)["partitions"] == 2
    if fuse:
        assert list(result.status["nodes"]) == ["events+sums+out"]
    _assert_same(result.collected["out"].to_pylist(), want, "out")
    # in epic run's order: the partitions' parts of each micro-batch are merged (by the reader
    # of the collect sink's topic when it is in the window's query)
    assert [(r["k"], r["window_end"]) for r in result.collected["out"].to_pylist()] == \
        [(r["k"], r["window_end"]) for r in want]


# -- emission order through chains of stateful nodes ---------------------------------------------

def _chain_topology() -> epic.Topology:
    """source -> ticks -> echo -> number -> collect: ``ticks`` and ``echo`` echo their rows and
    emit a row on a watermark after new rows, ``number`` numbers the rows in the order it
    receives them. The numbers expose any reordering."""
    from epic import serde as _serde

    row = pa.schema([("ts", pa.int64()), ("kind", pa.int64())])
    numbered = pa.schema([("ts", pa.int64()), ("kind", pa.int64()), ("seq", pa.int64())])

    def make(kind):
        class Echo:
            output_schema = row

            # On a watermark: one row (the newest time seen) if rows came since the last one.
            # (Deploy collapses consecutive watermarks without rows in between, so an operator
            # emitting on every watermark would differ for that documented reason alone.)
            def __init__(self):
                self.last = None
                self.pending = False

            def on_batch(self, batch):
                self.last = int(np.max(batch.column("ts").to_numpy()))
                self.pending = True
                return [pa.record_batch([batch.column("ts"), batch.column("kind")], schema=row)]

            def on_watermark(self, wm):
                if not self.pending:
                    return []
                self.pending = False
                return [pa.record_batch([[self.last], [kind]], schema=row)]

            def on_end(self):
                return []

            def snapshot(self):
                return _serde.packb([self.last, self.pending])

            def restore(self, data):
                self.last, self.pending = _serde.unpackb(data)
        return Echo

    class Number:
        output_schema = numbered

        def __init__(self):
            self.n = 0

        def on_batch(self, batch):
            k = batch.num_rows
            seq = pa.array(np.arange(self.n, self.n + k, dtype=np.int64))
            self.n += k
            return [pa.record_batch([batch.column("ts"), batch.column("kind"), seq],
                                    schema=numbered)]

        def on_watermark(self, wm):
            return []

        def on_end(self):
            return []

        def snapshot(self):
            return _serde.packb(self.n)

        def restore(self, data):
            self.n = _serde.unpackb(data)

    t = epic.Topology("direct_order")
    s = t.source("src", epic.iterator_source([{"ts": i * 10, "kind": 0} for i in range(300)],
                                             schema={"ts": "int64", "kind": "int64"}, time="ts",
                                             unit="ms", batch_rows=7))
    a = t.process("ticks", s, make(1))
    b = t.process("echo", a, make(2))
    t.sink("out", t.process("number", b, Number), epic.collect_sink())
    return t


def test_stateful_chain_keeps_emission_order(spark, tmp_path):
    """A stateful node whose input holds, for one source step, rows its producer emitted on a
    watermark and rows it emitted on that step's data, emits in the runner's order. Before the
    fix its output on the second watermark was tagged as coming *before* the step's rows (phase
    0 after phase 1), so the next node sorted it ahead of rows emitted earlier (DEBS Q2's team
    windows then saw possession slices out of order: 4 of the 15 files differed on the full
    game)."""
    want = epic.run(_chain_topology()).collected["out"].to_pylist()
    got = deploy(_chain_topology(), str(tmp_path / "wd"), spark=spark, batch_rows=100,
                 timeout=240).collected["out"].to_pylist()
    assert len(got) == len(want) and len(want) > 300
    assert sorted(got, key=lambda r: r["seq"]) == want
