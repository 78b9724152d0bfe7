"""``format=parquet``: the 15 DEBS streams as Parquet files instead of CSV, with the same rows."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import epic
from debs2013.dataflow import OUTPUT_FILES
from debs2013.generator import generate_game
from epic.cli import load_topology

TOPOLOGY = Path(__file__).resolve().parents[2] / "topologies" / "debs2013.py"
#: EPIC's 1 s emission periods keep the tiny game quick (as tests/spark/test_end_of_stream.py).
PARAMS = {"q1_period": "1", "q2_period": "1"}


@pytest.fixture(scope="module")
def game(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("debs_format")
    return str(generate_game(d / "game.csv", minutes=0.05, seed=2).game_path)


def _run(game: str, out: Path, **params) -> None:
    epic.run(load_topology(TOPOLOGY, params={"input": game, "out": str(out), **PARAMS,
                                              **params}))


def csv_as(path: Path, schema: pa.Schema) -> pa.Table:
    """A CSV output file read with the column types of ``schema`` (its Parquet twin's), cast
    to that schema: the Parquet columns are REQUIRED (not nullable), which the cast checks."""
    return pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
        column_types={f.name: f.type for f in schema})).cast(schema)


@pytest.fixture(scope="module")
def both(game, tmp_path_factory):
    """(csv dir, parquet dir) of the same game, delays on (the columns must survive too)."""
    d = tmp_path_factory.mktemp("both")
    _run(game, d / "csv", delays="true")
    _run(game, d / "parquet", delays="true", format="parquet")
    return d / "csv", d / "parquet"


def test_parquet_only_and_every_stream(both):
    c, p = both
    names = sorted(Path(f).stem for f in OUTPUT_FILES)
    assert sorted(x.stem for x in p.iterdir() if x.suffix == ".parquet") == names
    assert not list(p.glob("*.csv")), "format=parquet writes Parquet instead of CSV, not both"
    assert sorted(x.stem for x in c.glob("*.csv")) == names
    assert not list(c.glob("*.parquet"))


def test_parquet_rows_equal_csv_rows(both):
    c, p = both
    nonempty = 0
    for f in sorted(OUTPUT_FILES):
        stem = Path(f).stem
        par = pq.read_table(p / f"{stem}.parquet")
        assert par.column_names[:2] == ["entry_time", "write_time"], stem
        # docs/debs2013.md, "Parquet": every column REQUIRED (no stream has nulls)
        assert not any(f.nullable for f in par.schema), (stem, par.schema)
        want = csv_as(c / f, par.schema)
        assert par.column_names == want.column_names, stem
        keep = par.column_names[2:]
        assert par.select(keep).equals(want.select(keep)), stem
        nonempty += par.num_rows > 0
        ok = pa.compute.greater_equal(par["write_time"], par["entry_time"])
        assert pa.compute.all(ok).as_py() in (True, None), stem
    assert nonempty >= 12, "most streams must have rows, or the comparison proves little"


def test_parquet_files_are_written_with_their_options(both):
    """docs/debs2013.md, "Parquet": statistics on the non-string columns only, and in the q3
    files on the time columns only; floats without dictionary but in q3_1M / 5M / 10M;
    q3_landmark's percentages byte-stream split."""
    _, p = both
    seen = 0
    for f in sorted(OUTPUT_FILES):
        stem = Path(f).stem
        md = pq.ParquetFile(p / f"{stem}.parquet").metadata
        if not md.num_row_groups:
            continue
        seen += 1
        schema = md.schema.to_arrow_schema()
        for i, field in enumerate(schema):
            col = md.row_group(0).column(i)
            stats = (field.name in ("entry_time", "write_time", "ts") if stem.startswith("q3_")
                     else not pa.types.is_string(field.type))
            assert col.is_stats_set == stats, (stem, field.name)
            if pa.types.is_floating(field.type):
                short_q3 = stem.startswith("q3_") and stem != "q3_landmark"
                assert col.has_dictionary_page == short_q3, (stem, field.name)
                assert ("BYTE_STREAM_SPLIT" in col.encodings) == (stem == "q3_landmark"), \
                    (stem, field.name, col.encodings)
            else:
                assert col.has_dictionary_page, (stem, field.name)
    assert seen >= 12


def test_unknown_format_is_refused(game, tmp_path):
    with pytest.raises(epic.EpicError, match="format"):
        load_topology(TOPOLOGY, params={"input": game, "out": str(tmp_path), "format": "json"})
