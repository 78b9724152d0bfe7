"""The DEBS 2013 topology end to end: validation, the 15 files, early FEW emissions, shots, graph.

One short generated game (0.5 min per half, seed 1); the runs use its 2nd half only, which holds
a planted shot and interruptions and keeps the test fast (a whole short game spends most of its
output on the ~38 minutes of event time between the two short halves, where the landmark windows
keep emitting).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import epic
from debs2013 import constants as C
from debs2013.dataflow import OUTPUT_FILES, Q3_OUT_SCHEMA, DebsOptions, build_topology
from debs2013.generator import generate_game
from epic.cli import app, load_topology

TOPOLOGY = Path(__file__).resolve().parents[2] / "topologies" / "debs2013.py"
PS = C.PS_PER_S


@pytest.fixture(scope="module")
def game(tmp_path_factory):
    """(2nd-half game CSV, truth dict) of a 0.5-minute-per-half game."""
    d = tmp_path_factory.mktemp("debs")
    res = generate_game(d / "game.csv", minutes=0.5, seed=1)
    truth = json.loads(Path(res.truth_path).read_text())
    h2 = d / "game_h2.csv"
    with open(res.game_path, "rb") as src, open(h2, "wb") as dst:
        for line in src:
            if int(line.split(b",", 2)[1]) >= C.SECOND_HALF_START:
                dst.write(line)
    return h2, truth


@pytest.fixture(scope="module")
def run(game, tmp_path_factory):
    """The full topology run once with ``epic.run``: (output dir, RunResult)."""
    out = tmp_path_factory.mktemp("out")
    t = build_topology(DebsOptions(input=str(game[0]), out=str(out)))
    return out, epic.run(t)


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_topology_file_validates(game, tmp_path):
    """The topology file builds from its params and validates without warnings."""
    t = load_topology(TOPOLOGY, params={"input": str(game[0]), "out": str(tmp_path),
                                        "clock": "b", "q1_period": "1", "delays": "true"})
    assert t.validate(warn=False) == []
    names = set(t.nodes)
    assert {"event_reader", "interrupt_reader", "merge_by_time", "debs_splitter", "q1_running",
            "q2_ball_hitter", "q2_possession", "q4_shots", "q3_heatmap"} <= names
    assert sum(1 for n in t.nodes.values() if n.kind == "window") == 12
    assert sum(1 for n in t.nodes.values() if n.kind == "sink") == 15


def test_unknown_switch_value_is_an_error(game, tmp_path):
    """A bad switch names the parameter and the allowed values."""
    with pytest.raises(epic.EpicError, match="clock"):
        load_topology(TOPOLOGY, params={"input": str(game[0]), "out": str(tmp_path),
                                        "clock": "D"})


@pytest.mark.parametrize(("params", "message"), [
    ({"q3_base_grid": "abc"}, r"--q3-base-grid 'abc': expected NXxNY"),
    ({"epsilon": "abc"}, r"--epsilon 'abc': expected seconds"),
    ({"play_break_from": "abc"}, r"--play-break-from 'abc': expected a sensor time in ps"),
    ({"q1_period": "1/3"}, r"--q1-period '1/3' is not a whole number of picoseconds"),
    ({"dead_letter": "bad.csv"}, r"--dead-letter is where --lenient writes"),
])
def test_a_malformed_parameter_is_named(game, tmp_path, params, message):
    """A value the topology cannot use names its --parameter (not a bare ValueError), and a
    period that is not a whole number of ps is refused, not truncated."""
    with pytest.raises(epic.EpicError, match=message):
        load_topology(TOPOLOGY, params={"input": str(game[0]), "out": str(tmp_path), **params})


def test_writes_the_15_files_with_spec_headers(run):
    """All 15 EPIC files exist with the spec's columns (q3: plus ``grid``) and rows."""
    out, _ = run
    assert sorted(p.name for p in out.glob("*.csv")) == sorted(OUTPUT_FILES)
    for name, (_, schema) in OUTPUT_FILES.items():
        with open(out / name, newline="") as f:
            header = next(csv.reader(f))
            assert header == schema.names, name
            assert next(csv.reader(f), None) is not None, f"{name} is empty"
    assert Q3_OUT_SCHEMA.names[-1] == "grid"
    grids = {r["grid"] for r in _rows(out / "q3_1M.csv")}
    assert grids == {"8x13", "16x25", "32x50", "64x100"}


def test_first_window_emissions_come_early(run, game):
    """FEW: every window emits from its first ef on, long before its length has passed."""
    out, _ = run
    start = C.SECOND_HALF_START
    origin = C.FIRST_HALF_START
    for name, ef in (("q1b_20M.csv", PS // 50), ("q1b_landmark.csv", PS // 50),
                     ("q2teampossession_20min.csv", PS // 50), ("q3_10M.csv", PS),
                     ("q3_landmark.csv", PS)):
        ts = sorted({int(r["ts"]) for r in _rows(out / name)})
        assert (ts[0] - origin) % ef == 0, name                  # instants on the ef grid
        assert ts[0] - start <= 2 * PS, name                     # within 2 s of the data
        steps = {b - a for a, b in zip(ts[:50], ts[1:51])}
        assert steps == {ef}, (name, steps)                      # then every ef


def test_shot_rows_around_the_planted_shot(run, game):
    """q4 reports the planted shot's shooter from about its start for a while."""
    out, _ = run
    shots = [s for h in game[1]["halves"] if h["half"] == 2 for s in h["shots"]]
    assert shots
    rows = _rows(out / "q4.csv")
    for s in shots:
        near = [r for r in rows if s["start_ts"] - PS // 2 <= int(r["ts"]) <= s["end_ts"]]
        assert near, s
        assert {r["player_id"] for r in near} == {s["shooter"]}
    first = min(int(r["ts"]) for r in rows)
    assert min(abs(first - s["start_ts"]) for s in shots) < PS // 2


def test_q2_and_q3_windows_see_no_late_rows(run):
    """The possession and heat-map slices reach their windows on time (re-stamped to the slice
    end), so no slice is dropped."""
    _, res = run
    for name, st in res.nodes.items():
        if name.startswith(("q2team_", "q3_")) and st.kind == "window":
            assert st.late_rows == 0, name


def test_q1_windows_see_no_late_rows(run):
    """Every Q1 increment reaches the q1b windows and every Q3 map the q3 windows (none behind
    the watermark): the front ends hold the watermark back while the 1-second rule is
    undecided, and while a player's last sample may still extend his map (output_watermark)."""
    _, res = run
    windows = [n for n, st in res.nodes.items()
               if n.startswith(("q1b_", "q3_")) and st.kind == "window"]
    assert len(windows) == 8
    for name in windows:
        assert res.nodes[name].late_rows == 0, name


def test_q2_alone_equals_q2_beside_the_other_queries(run, game, tmp_path):
    """Which other queries run does not change Q2's five files: Q2 alone writes, byte for byte,
    what the full topology wrote (before, Q2 alone began its team slices at the first hit
    instead of the first ball in play, and its team files lacked their first rows)."""
    out, _ = run
    t = build_topology(DebsOptions(input=str(game[0]), out=str(tmp_path), queries=("q2",)))
    epic.run(t)
    names = [n for n in OUTPUT_FILES if n.startswith("q2")]
    assert len(names) == 5
    for name in names:
        mine, full = (tmp_path / name).read_bytes(), (out / name).read_bytes()
        assert mine.count(b"\n") > 1, name
        assert mine == full, name


def test_delays_prepend_two_wall_clock_columns(game, tmp_path):
    """``delays`` writes entry and write times (ns) first in every row."""
    t = build_topology(DebsOptions(input=str(game[0]), out=str(tmp_path), delays=True,
                                   queries=("q2", "q4")))
    epic.run(t)
    rows = _rows(tmp_path / "q4.csv")
    assert list(rows[0])[:3] == ["entry_time", "write_time", "ts"]
    assert all(int(r["write_time"]) >= int(r["entry_time"]) > 0 for r in rows)


def test_graph_renders(game, tmp_path):
    """``epic graph`` draws the topology (DOT) with the splitter's fan-out."""
    dot = tmp_path / "debs.dot"
    res = CliRunner().invoke(app, ["graph", str(TOPOLOGY), "-o", str(dot), "--",
                                   "--input", str(game[0]), "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    text = dot.read_text()
    for node in ("debs_splitter", "q1b_landmark_window", "q4_shots", "q3_10M_rows"):
        assert node in text


def test_q3_report_rows_come_in_bounded_chunks():
    """The q3 report step slices its input so no output batch is much larger than asked, with
    exactly the rows of the unsliced computation."""
    import numpy as np
    import pyarrow as pa

    from debs2013.config import Q3Config
    from debs2013.dataflow import q3_all_grids, q3_all_grids_chunked
    from debs2013.q3 import HeatMap

    cfg = Q3Config()
    agg = HeatMap(cfg.base_grid)
    rng = np.random.default_rng(0)
    results = []
    for _ in range(12):
        cells = np.unique(rng.integers(0, cfg.base_grid[0] * cfg.base_grid[1], 40)).astype(np.int32)
        one_map = ([cells], [np.full(len(cells), 10**9, dtype=np.int64)])  # one per-second map
        results.append(agg.result(agg.add_batch(agg.init(), one_map)))
    heat_type = agg.output_type([pa.list_(pa.int32()), pa.list_(pa.int64())])
    batch = pa.record_batch(
        [pa.array(["Nick Gertje"] * 12), pa.array(np.arange(12, dtype=np.int64) * 10**12),
         pa.array(np.arange(1, 13, dtype=np.int64) * 10**12), pa.array([True] * 12),
         pa.array(results, type=heat_type)],
        names=["player_id", "window_start", "window_end", "final", "heat"])
    whole = q3_all_grids(batch, cfg)
    parts = q3_all_grids_chunked(batch, cfg, max_rows=200)
    assert len(parts) > 3 and all(p.num_rows <= 200 for p in parts)
    assert pa.Table.from_batches(parts).to_pylist() == pa.Table.from_batches([whole]).to_pylist()


def test_a_gzipped_game_gives_the_files_of_the_plain_one(run, game, tmp_path):
    """docs/debs2013.md: ``input`` takes a ``.gz`` game too: its time span is found (markers
    outside it are dropped, ``trim_markers``) as for the plain file, so Q1 and Q4 (the queries
    that read the markers) write the same bytes from both."""
    import gzip

    from debs2013.dataflow import data_span

    gz = tmp_path / "game.csv.gz"
    with open(game[0], "rb") as src, gzip.open(gz, "wb", compresslevel=1) as dst:
        dst.write(src.read())
    assert data_span(gz) == data_span(game[0]) is not None
    out, _ = run
    t = build_topology(DebsOptions(input=str(gz), out=str(tmp_path / "o"), queries=("q1", "q4")))
    epic.run(t)
    names = [n for n in OUTPUT_FILES if n.startswith(("q1", "q4"))]
    assert len(names) == 6
    for name in names:
        assert (tmp_path / "o" / name).read_bytes() == (out / name).read_bytes(), name


def test_a_cut_gzipped_game_is_reported_by_the_reader_naming_the_file(game, tmp_path):
    """A .gz game cut short: the topology still builds (its time span is unknown), and the run
    stops where the reader cannot read on, naming the file and line (not an EOFError from the
    topology file)."""
    import gzip

    from debs2013.dataflow import data_span
    from epic.errors import InputError

    whole = gzip.compress(open(game[0], "rb").read(), compresslevel=1)
    cut = tmp_path / "cut.csv.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    assert data_span(cut) is None
    t = build_topology(DebsOptions(input=str(cut), out=str(tmp_path / "o"), queries=("q4",)))
    with pytest.raises(InputError, match=r"cut\.csv\.gz:line \d+: cannot read on"):
        epic.run(t)


def test_trimmed_markers_keep_an_interruption_on_at_the_first_row():
    """trim_markers: an interruption begun before the first sensor row (a generated game's data
    starts microseconds after the kick-off, the spec's stoppage from half start to the first
    End) begins at the first row; markers outside the data go (spec §4.4)."""
    from debs2013.dataflow import trim_markers
    from debs2013.readers import InterruptionMarker as M

    marks = [M(100, "begin", 1), M(400, "end", 1), M(500, "begin", 1), M(600, "end", 1),
             M(900, "begin", 1), M(1200, "end", 1)]
    assert trim_markers(marks, (150, 1000)) == [M(150, "begin", 1), M(400, "end", 1),
                                                M(500, "begin", 1), M(600, "end", 1),
                                                M(900, "begin", 1)]
    assert trim_markers(marks, (450, 550)) == [M(500, "begin", 1)]
    assert trim_markers(marks, (420, 480)) == []
    assert trim_markers(marks, (520, 580)) == [M(520, "begin", 1)]
    assert trim_markers(marks, (100, 400)) == marks[:2]


def test_a_sensor_id_in_no_metadata_stops_a_strict_run(game, tmp_path):
    """A row of an unknown sensor id would be ignored by every query: strict stops naming the
    id, its time and the input; --lenient puts it in <out>/unknown-sensors.csv and the queries
    do not see it (docs/debs2013.md, options)."""
    from epic.errors import InputError

    lines = game[0].read_bytes().splitlines(keepends=True)
    fields = lines[100].split(b",")
    fields[0] = b"999"
    path = tmp_path / "odd.csv"
    path.write_bytes(b"".join(lines[:101] + [b",".join(fields)] + lines[101:]))
    t = build_topology(DebsOptions(input=str(path), out=str(tmp_path / "a"), queries=("q4",)))
    with pytest.raises(InputError, match=f"sensor id 999 \\(at ts {int(fields[1])}\\) is in no "
                                         "metadata") as info:
        epic.run(t)
    assert info.value.path == str(path) and info.value.field == "sid"
    t = build_topology(DebsOptions(input=str(path), out=str(tmp_path / "b"), queries=("q4",),
                                   lenient=True))
    epic.run(t)
    got = (tmp_path / "b" / "unknown-sensors.csv").read_text().splitlines()
    assert got[1:] == [b",".join(fields).decode().strip()]
    assert got[0].split(",")[:2] == ["sid", "ts"]


def test_q1a_last_rows_do_not_depend_on_the_batch_cut(game, tmp_path):
    """The last q1a row of each player is at the last event time, whether or not the input's
    closing watermark reached Q1 before its end (the last row alone in a batch, or not)."""
    n = sum(1 for _ in open(game[0], "rb"))
    got = []
    for k, rows in enumerate((n, n - 1)):
        out = tmp_path / f"o{k}"
        epic.run(build_topology(DebsOptions(input=str(game[0]), out=str(out), queries=("q1",),
                                            batch_rows=rows)))
        got.append((out / "q1a.csv").read_bytes())
    assert got[0] == got[1]
    last_ts = int(open(game[0], "rb").read().rstrip().rsplit(b"\n", 1)[1].split(b",")[1])
    assert int(got[0].rstrip().rsplit(b"\n", 1)[1].split(b",")[1]) <= last_ts
