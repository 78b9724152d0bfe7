"""The DEBS 2013 topology deployed with ``format=parquet``: the 15 Parquet files (written exactly
once by the Spark sink queries, epic/spark/sink_query.py) hold epic run's rows."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import epic
from epic.cli import load_topology
from epic.spark.runtime import deploy

from test_end_of_stream import _same

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _sorted_rows(path: Path) -> tuple[list[str], list[tuple]]:
    tab = pq.read_table(path)

    def value(x):
        return (1, x) if isinstance(x, float) else (0, x) if isinstance(x, int) else (2, x)
    return tab.column_names, sorted(tuple(value(v) for v in r.values()) for r in tab.to_pylist())


def _group_sizes(path: Path) -> list[tuple[int, int]]:
    meta = pq.ParquetFile(path).metadata
    return [(meta.row_group(g).num_rows, meta.row_group(g).total_byte_size)
            for g in range(meta.num_row_groups)]


def test_debs_deploy_parquet_equals_run(spark, tmp_path):
    from debs2013.dataflow import OUTPUT_FILES
    from debs2013.generator import generate_game

    game = generate_game(tmp_path / "game.csv", minutes=0.05, seed=2).game_path
    params = {"input": str(game), "q1_period": "1", "q2_period": "1", "format": "parquet"}
    epic.run(load_topology(ROOT / "topologies" / "debs2013.py",
                           params={**params, "out": str(tmp_path / "ref")}))
    result = deploy(load_topology(ROOT / "topologies" / "debs2013.py",
                                  params={**params, "out": str(tmp_path / "dep")}),
                    str(tmp_path / "wd"), spark=spark, fuse=True, timeout=240)
    assert result.status["state"] == "finished"
    names = sorted(Path(f).stem + ".parquet" for f in OUTPUT_FILES)
    assert sorted(p.name for p in (tmp_path / "dep").glob("*.parquet")) == names
    assert not list((tmp_path / "dep").glob("*.csv"))
    total = joined = 0
    for name in names:
        want_cols, want = _sorted_rows(tmp_path / "ref" / name)
        got_cols, got = _sorted_rows(tmp_path / "dep" / name)
        assert got_cols == want_cols, name
        assert len(got) == len(want), name
        bad = [(g, w) for g, w in zip(got, want) if not _same(g, w)]
        assert not bad, f"{name}: {len(bad)} rows differ, first {bad[0]}"
        total += len(want)
        # joined byte for byte (epic.parquetcat) as the batches committed, not re-encoded: the
        # commit record says so, and nothing of the join is left beside the file
        rec = json.loads((tmp_path / "dep" / (name + ".epic") / "commit.json").read_text())
        assert rec["eos"], (name, rec)
        if want:
            joined += 1
            assert rec["join"] == "copy" and rec["joined"]["length"] > 0, (name, rec)
        meta = tmp_path / "dep" / (name + ".epic")
        assert not list(meta.glob("joined.*")) and not list(meta.glob("parts/*")), name
        if name.startswith("q3_") and want:
            # the names reach the writer with the roster's dictionary (q3_row_schema), so their
            # pages hold run-length indices, not the names written plain (13 bytes a row)
            md = pq.ParquetFile(tmp_path / "dep" / name).metadata
            col = md.schema.names.index("player_id")
            size = sum(md.row_group(g).column(col).total_uncompressed_size
                       for g in range(md.num_row_groups))
            assert size < 2000 + md.num_rows // 4, (name, size, md.num_rows)
    assert total > 1000
    assert joined >= 10
