"""A stream with dictionary-encoded columns (DEBS q3's names, ``debs2013.dataflow.q3_row_schema``)
under ``epic deploy``: each micro-batch may bring its own dictionary; topics store the values
(``tags.topic_schema``) and readers cast them back; the sinks write the same rows as
``epic run``, fused or not."""

from __future__ import annotations

import textwrap

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import epic
from epic.cli import load_topology
from epic.spark.runtime import deploy

pytestmark = pytest.mark.spark

TOPOLOGY = textwrap.dedent('''
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    import epic

    out = epic.param("out", "out")
    NAMES = pa.dictionary(pa.int32(), pa.string())
    SCHEMA = pa.schema([("ts", pa.int64()), ("name", NAMES), ("v", pa.int64())])

    def rows(n=3000):
        # names from a growing set: a batch's dictionary differs from the one before
        return [{"ts": i, "k": i % 7 + i // 1000, "v": i * 3} for i in range(n)]

    def encode(b):
        k = b.column("k").to_numpy()
        # this batch's own dictionary, in reverse order of first sight, with a value no row uses
        uniq = sorted(set(k.tolist()), reverse=True)
        dictionary = pa.array([f"name-{u}" for u in uniq] + ["unused"], pa.string())
        pos = {u: i for i, u in enumerate(uniq)}
        idx = pa.array(np.array([pos[x] for x in k.tolist()], np.int32))
        return pa.RecordBatch.from_arrays(
            [b.column("ts"), pa.DictionaryArray.from_arrays(idx, dictionary), b.column("v")],
            schema=SCHEMA)

    t = epic.Topology("dicts")
    s = t.source("src", epic.iterator_source(rows(), schema={"ts": "int64", "k": "int64",
                                                             "v": "int64"},
                                             time="ts", unit="ms"))
    named = t.map("named", s, encode, schema=SCHEMA)
    counts = t.window("per_name", named, epic.tumbling(100), key="name",
                      aggregates=[epic.count()])
    t.sink("rows_csv", named, epic.csv_sink(out + "/rows.csv"))
    t.sink("rows_pq", named, epic.parquet_sink(out + "/rows.parquet", required=True))
    t.sink("counts_csv", counts, epic.csv_sink(out + "/counts.csv"))
''')


@pytest.mark.parametrize("fuse", [True, False])
def test_dictionary_columns_deploy_as_run(spark, tmp_path, fuse):
    topo = tmp_path / "dicts.py"
    topo.write_text(TOPOLOGY)
    epic.run(load_topology(topo, params={"out": str(tmp_path / "ref")}))
    ref = tmp_path / "ref"
    assert pq.read_table(ref / "rows.parquet").column("name").to_pylist()[:2] == [
        "name-0", "name-1"]
    result = deploy(load_topology(topo, params={"out": str(tmp_path / "dep")}),
                    str(tmp_path / "wd"), spark=spark, fuse=fuse, timeout=240, batch_rows=700)
    assert result.status["state"] == "finished"
    dep = tmp_path / "dep"
    want = sorted(pq.read_table(ref / "rows.parquet").to_pylist(), key=lambda r: r["ts"])
    got = pq.read_table(dep / "rows.parquet")
    # the stream's type, as epic run writes it (the Arrow schema stored in the file)
    assert got.schema.field("name").type == pq.read_schema(ref / "rows.parquet").field("name").type
    assert sorted(got.to_pylist(), key=lambda r: r["ts"]) == want
    assert len(want) == 3000 and {r["name"] for r in want} == {f"name-{k}" for k in range(9)}
    for name in ("rows.csv", "counts.csv"):
        w = pacsv.read_csv(ref / name).to_pylist()
        g = pacsv.read_csv(dep / name).to_pylist()
        assert sorted(map(str, g)) == sorted(map(str, w)), name
