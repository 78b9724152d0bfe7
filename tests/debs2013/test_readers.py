"""Tests of the DEBS 2013 readers against the real side files and hand-made variants."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pyarrow as pa
import pytest

from debs2013 import constants as C
from debs2013.readers import (
    SENSOR_SCHEMA,
    accel_ms2,
    interruption_markers,
    kmh_to_raw,
    markers_table,
    normalize_name,
    parse_annotation_time,
    read_game,
    read_game_interruptions,
    read_interruptions,
    read_metadata,
    read_possession_dir,
    read_shots,
    shared_dir,
    speed_kmh,
    velocity_ms,
)
from epic.errors import InputError

REFEREE = shared_dir() / "referee-events"
FIRST = REFEREE / "Game Interruption" / "1st Half.csv"
SECOND = REFEREE / "Game Interruption" / "2nd Half.csv"
FIRST_ROW = "98,10629342490369879,26406,-6869,1070,1166235,7161971,-5706,3485,-7435,-2410,-8454,-4765"


def _ps(seconds: str) -> int:
    return parse_annotation_time(seconds)


# -- sensor stream ---------------------------------------------------------------------------------

def test_game_reader_first_row_and_units(tmp_path):
    """The spec's worked example row reads exactly and converts to the spec's units."""
    path = tmp_path / "full-game"
    path.write_text(FIRST_ROW + "\n" + FIRST_ROW.replace("98,1062934249036987", "4,1062934249036988")
                    + "\n")
    batch = next(iter(read_game(path)))
    assert batch.schema == SENSOR_SCHEMA
    row = {k: v[0] for k, v in batch.to_pydict().items()}
    assert row["sid"] == 98 and row["ts"] == 10629342490369879
    assert batch.column("ts")[1].as_py() == 10629342490369889
    assert (row["x"], row["y"], row["z"]) == (26406, -6869, 1070)
    assert round(speed_kmh(row["v"]), 1) == 4.2
    assert round(accel_ms2(row["a"]), 2) == 7.16
    assert abs(velocity_ms(row["v"], row["vx"]) - 1166235 * -5706 * 1e-10) < 1e-12
    assert [kmh_to_raw(k) for k in C.SPEED_EDGES_KMH] == list(C.SPEED_EDGES_RAW)


def test_game_reader_strict_and_lenient(tmp_path):
    """A bad sensor row stops strict reads at its line and goes to the dead letter when lenient."""
    path = tmp_path / "full-game"
    path.write_text(FIRST_ROW + "\n" + FIRST_ROW + ",7\n" + FIRST_ROW + "\n"
                    + FIRST_ROW.replace("26406", "99999999999") + "\n" + FIRST_ROW[:30])
    with pytest.raises(InputError) as info:
        list(read_game(path))
    assert info.value.line == 2
    dead = tmp_path / "dead.csv"
    reader = read_game(path, mode="lenient", dead_letter=dead)
    assert sum(b.num_rows for b in reader) == 2
    with open(dead, newline="") as f:
        assert [(r["line"], r["reason"]) for r in csv.DictReader(f)] == [
            ("2", "column_count"), ("4", "out_of_range"), ("5", "truncated_line")]


# -- metadata --------------------------------------------------------------------------------------

def test_metadata_equals_spec_table():
    """The real metadata.txt parses to exactly the spec's table, balls and goalkeeper hands."""
    meta = read_metadata()
    assert meta.as_table() == C.METADATA_TABLE
    assert dict(meta.balls) == dict(C.BALLS)
    assert meta.goalkeeper_hands == C.GK_HANDS
    assert set(meta.referee.sensors) == C.REFEREE
    assert {p.name: p.sensors for p in meta.players if p.team == "A"} == dict(C.TEAM_A)
    assert {p.name: p.sensors for p in meta.players if p.team == "B"} == dict(C.TEAM_B)
    assert meta.sensor_to_player[98] == "Nick Gertje" and meta.player_team["Ben Mueller"] == "B"
    assert [p.name for p in meta.players if p.is_goalkeeper] == ["Nick Gertje", "Leon Krapf"]
    assert meta.player("Willi Sommer").shoes == (19, 52)


@pytest.mark.parametrize(("written", "expected"), [
    ("Niklas Welzlein", "Niklas Waelzlein"), ("Willi Sommer", "Wili Sommer"),
    ("Ben Müller", "Ben Mueller"), ("Ben MÃ¼ller", "Ben Mueller"), ("Ben Muller", "Ben Mueller"),
    ("Ben  Mueller ", "Ben Mueller"), ("Leon Krapf", "Leon Krapf")])
def test_name_normalisation(written, expected):
    """Every spelling in the referee files maps to the metadata spelling."""
    assert normalize_name(written) == expected


# -- game interruptions ----------------------------------------------------------------------------

def test_real_first_half_interruptions():
    """1st half: 34 Begin / 34 End, first Begin at 0, first End at 3.092 s, all matched."""
    intr = read_interruptions(FIRST, 1)
    assert len(intr) == 34 and not any(i.closed_by_half_end for i in intr)
    assert intr[0].begin_ts == C.FIRST_HALF_START
    assert intr[0].end_ts == C.FIRST_HALF_START + 3_092_000_000_000
    assert intr[-1].end_ts == C.FIRST_HALF_START + _ps("00:29:32.757")
    assert all(a.end_ts <= b.begin_ts for a, b in zip(intr, intr[1:]))


def test_real_second_half_interruptions():
    """2nd half: 38 Begin / 37 End paired by order; last Begin 00:29:36.577 closed by half end."""
    intr = read_interruptions(SECOND, 2)
    assert len(intr) == 38
    assert sum(not i.closed_by_half_end for i in intr) == 37
    assert intr[0].end_ts - C.SECOND_HALF_START == 455_000_000_000
    last = intr[-1]
    assert last.closed_by_half_end and last.end_ts == C.SECOND_HALF_END
    assert last.begin_ts == C.SECOND_HALF_START + 1_776_577_000_000_000
    # Counter 16 End comes before Begin 16: pairing by order keeps the interval 00:12:53-00:13:08.
    assert (intr[14].begin_ts - C.SECOND_HALF_START, intr[14].end_ts - C.SECOND_HALF_START) == (
        _ps("00:12:53.206"), _ps("00:13:08.901"))
    assert all(i.begin_ts < i.end_ts for i in intr)
    assert all(a.end_ts <= b.begin_ts for a, b in zip(intr, intr[1:]))


@pytest.mark.parametrize(("clock", "first", "second"), [
    ("A", 0, 0), ("B", -3_092_000_000_000, -455_000_000_000),
    ("C", -4_080_500_000_000, -1_302_950_000_000),
    ({1: 7, 2: -7}, 7, -7)])
def test_clock_options(clock, first, second):
    """Options A/B/C of spec §4.3 shift each half by the stated offset (B puts End 1 on kick-off)."""
    base = read_game_interruptions()
    moved = read_game_interruptions(clock=clock)
    for a, b in zip(base, moved):
        shift = first if a.half == 1 else second
        assert b.begin_ts - a.begin_ts == shift
        assert b.end_ts - a.end_ts == (shift if not a.closed_by_half_end else 0)
    if clock == "B":
        assert moved[0].end_ts == C.FIRST_HALF_START and moved[34].end_ts == C.SECOND_HALF_START


def test_markers_are_time_ordered_and_typed():
    """Markers alternate begin/end in ts order, 2 per interval, as exact int64."""
    intr = read_game_interruptions()
    markers = interruption_markers(intr)
    assert len(markers) == 2 * 72
    assert [m.ts for m in markers] == sorted(m.ts for m in markers)
    assert [m.kind for m in markers] == ["begin", "end"] * 72
    table = markers_table(markers)
    assert table.schema.field("ts").type == pa.int64()
    assert table.column("ts").to_pylist()[-1] == C.SECOND_HALF_END


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_original_layout_variants(tmp_path):
    """`;` with long names and comment, no header, blank rows and a Statistic tail all parse."""
    long_form = _write(tmp_path / "long.csv", (
        "event_id;event_name;event_time_real;event_counter;comment\n"
        "6014;Game Interruption Begin;0;1;empty\n"
        "6015;Game Interruption End;00:00:00.455;1;empty\n"
        "6014;Game Interruption Begin;00:29:36.577;2;empty\n"
        ";;;;\n;;;;\nStatistic:;;;;\nGame Interruption Begin;2;;;\n"))
    no_header = _write(tmp_path / "short.csv", (
        "6014,Begin,0,1\n6015,End,00:00:00.455,2\n6014,Begin,00:29:36.577,1\n\n"
        "Statistic:,\nType:,Count:,\n"))
    ids_only = _write(tmp_path / "ids.csv", "6014;x;0;1\n6015;y;00:00:00.455;1\n6014;z;00:29:36.577;2")
    expected = [(C.SECOND_HALF_START, C.SECOND_HALF_START + 455_000_000_000),
                (C.SECOND_HALF_START + 1_776_577_000_000_000, C.SECOND_HALF_END)]
    for path in (long_form, no_header, ids_only):
        assert [(i.begin_ts, i.end_ts) for i in read_interruptions(path, 2)] == expected


def test_a_header_alone_is_a_half_without_interruptions(tmp_path):
    path = _write(tmp_path / "h.csv", "event_id,event_name,event_time_real,event_counter\n")
    assert read_interruptions(path, 1) == ()


def test_leading_end_is_paired_with_half_start(tmp_path):
    """A file starting with End: the game is stopped from the half start to that End."""
    path = _write(tmp_path / "e.csv", "2011,End,00:00:03.092,1\n2010,Begin,00:01:00.000,2\n"
                                      "2011,End,00:01:10.000,2\n")
    intr = read_interruptions(path, 1)
    assert (intr[0].begin_ts, intr[0].begin_line) == (C.FIRST_HALF_START, None)
    assert len(intr) == 2


@pytest.mark.parametrize(("body", "line"), [
    ("2010,Begin,0,1\n2010,Begin,00:00:01.000,2\n", 2),
    ("2010,Begin,0,1\n2011,End,00:00:01.000,1\n2011,End,00:00:02.000,2\n", 3),
    ("2010,Begin,0,1\n2011,End,00:00:0x.000,1\n", 2),
    ("9999,Pass,0,1\n", 1),
    ("2010,Begin,00:00:10.000,1\n2011,End,00:00:05.000,1\n", 2),      # End before its Begin
    ("2010,Begin,0,1\n2011,End,00:00:03.092,1\n2010,Begin,00:45:00.000,2\n"
     "2011,End,00:46:00.000,2\n", 3),                                   # after the half's end
    ("2010,Begin,00:00:10.000,1\n2011,End,00:00:50.000,1\n2010,Begin,00:00:20.000,2\n"
     "2011,End,00:00:30.000,2\n", 3),                                   # overlapping pairs
    ("", 1), ("\n\n", 1)])                                                # an empty file
def test_bad_interruption_files_name_the_line(tmp_path, body, line):
    """Broken pairing, a bad time, an unknown event, an End earlier than its Begin, a time
    after the half's end, a Begin before the previous End, or an empty file stop with the exact
    line."""
    with pytest.raises(InputError) as info:
        read_interruptions(_write(tmp_path / "bad.csv", body), 1)
    assert info.value.line == line


# -- shots and possession --------------------------------------------------------------------------

def test_real_shots():
    """The 2nd-half Shot on Goal file lists 24 shots by known players, in time order."""
    shots = read_shots(REFEREE / "Shot on Goal" / "2nd Half.csv", 2)
    assert len(shots) == 24
    names = {p.name for p in read_metadata().players}
    assert {s.player for s in shots} <= names and "Wili Sommer" in {s.player for s in shots}
    assert shots[0].player == "Dennis Dotterweich"
    assert shots[0].ts == C.SECOND_HALF_START + _ps("00:00:26.078")
    assert [s.ts for s in shots] == sorted(s.ts for s in shots)


def test_real_possession_matches_statistic_counts():
    """Each possession file pairs to as many intervals as its own Statistic block counts."""
    directory = REFEREE / "Ball Possession" / "2nd Half"
    possession = read_possession_dir(directory, 2)
    assert sorted(possession) == sorted(p.name for p in read_metadata().players)
    for path in directory.glob("*.csv"):
        counts = re.findall(r"^[^;,]* Begin[;,](\d+)[;,]*$", path.read_text(encoding="utf-8"), re.M)
        assert len(possession[normalize_name(path.stem)]) == int(counts[0]), path.name
    intervals = [p for ps in possession.values() for p in ps]
    assert all(p.begin_ts <= p.end_ts for p in intervals)
    assert any(p.begin_ts == p.end_ts for p in intervals)  # single touches


def test_a_player_unknown_to_the_metadata_stops_the_reader_at_its_line(tmp_path):
    """A shooter or a possession file whose name is nobody in the metadata (after the spelling
    repairs) is an InputError naming the file, the line and the name, not a row for a player no
    query knows."""
    shots = (REFEREE / "Shot on Goal" / "2nd Half.csv").read_bytes()
    assert b"Dennis Dotterweich" in shots
    bad = tmp_path / "2nd Half.csv"
    bad.write_bytes(shots.replace(b"Dennis Dotterweich", b"Dennis Dotterwetch", 1))
    line = 1 + shots[:shots.index(b"Dennis Dotterweich")].count(b"\n")
    with pytest.raises(InputError, match=rf"2nd Half.csv:line {line}.*'Dennis Dotterwetch' is "
                                         r"not in the metadata"):
        read_shots(bad, 2)
    assert len(read_shots(bad, 2, players={"Dennis Dotterwetch"} | {
        p.name for p in read_metadata().players})) == 24
    folder = tmp_path / "poss"
    folder.mkdir()
    src = REFEREE / "Ball Possession" / "2nd Half" / "Kevin Baer.csv"
    (folder / "Kevin Bear.csv").write_bytes(src.read_bytes())
    with pytest.raises(InputError, match=r"Kevin Bear.csv.*'Kevin Bear' is not in the metadata"):
        read_possession_dir(folder, 2)


@pytest.mark.parametrize(("old", "new", "words"), [
    ("Kevin Baer (Left Leg: 63, Right Leg: 64)", "Kevin Baer (Left Leg: 63, Right Leg: 14)",
     "sensor 14 of Kevin Baer is also"),
    ("Kevin Baer (Left Leg: 63, Right Leg: 64)",
     "Kevin Baer (Left Leg: 63, Right Leg: 64)\nKevin Baer (Left Leg: 63, Right Leg: 64)",
     "listed twice")])
def test_metadata_refuses_a_sensor_or_a_person_given_twice(tmp_path, old, new, words):
    """A sensor id given to two persons, or a person listed twice, stops the reader naming the
    second line (the real file has neither)."""
    text = (shared_dir() / "metadata.txt").read_text(encoding="utf-8-sig")
    assert old in text
    path = tmp_path / "metadata.txt"
    path.write_text(text.replace(old, new))
    with pytest.raises(InputError, match=words) as info:
        read_metadata(path)
    last = new.splitlines()[-1]
    number = max(i for i, ln in enumerate(path.read_text().splitlines(), 1) if ln.strip() == last)
    assert info.value.line == number


@pytest.mark.parametrize(("old", "new", "line", "words"), [
    ("4, 8, 10\n", "4, 8, ten\n", 2, "ball sensor id 'ten' is not a whole number"),
    ("- 1st Half: 4, 8, 10\n", "- 1st Half:\n", 2, "ball sensor id '' is not a whole number"),
    ("4, 8, 10\n", "4, 8, 13\n", "Left Leg: 13,", "sensor 13 of .* is also a ball's \\(line 2\\)"),
    ("- 2nd Half:", "- 3rd Half:", 3, "half 3: a game has a 1st and a 2nd half"),
    ("- 2nd Half:", "- 1st Half:", 3, "the balls of half 1 are listed twice"),
    ("Left Leg: 13", "Left Leg: 99999999999999999999", "Left Leg: 9999",
     "does not fit a 64-bit integer")])
def test_metadata_refuses_bad_balls_and_ids(tmp_path, old, new, line, words):
    """A ball id that is no number (it was dropped), a ball id that is also a person's, a half
    other than 1 and 2, a half listed twice and an id beyond int64 stop the reader at the line."""
    text = (shared_dir() / "metadata.txt").read_text(encoding="utf-8-sig")
    assert old in text
    path = tmp_path / "metadata.txt"
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(InputError, match=words) as info:
        read_metadata(path)
    if isinstance(line, str):   # the line of the person holding this text
        line = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if line in ln)
    assert info.value.line == line


@pytest.mark.parametrize("balls", ["4 8 10", "4, 8, 10,", "4,8,10"])
def test_metadata_ball_lists_take_commas_or_spaces(tmp_path, balls):
    text = (shared_dir() / "metadata.txt").read_text(encoding="utf-8-sig")
    path = tmp_path / "metadata.txt"
    path.write_text(text.replace("- 1st Half: 4, 8, 10", f"- 1st Half: {balls}", 1))
    assert sorted(read_metadata(path).balls[1]) == [4, 8, 10]


def test_metadata_in_cp1252_reads_its_names(tmp_path):
    """A metadata.txt saved in cp1252 (spec §10.13: name encodings) reads as the referee files
    do: UTF-8, else cp1252, never U+FFFD in a name."""
    text = (shared_dir() / "metadata.txt").read_text(encoding="utf-8-sig")
    path = tmp_path / "metadata.txt"
    path.write_bytes(text.replace("Ben Mueller", "Ben Müller").encode("cp1252"))
    names = [p.name for p in read_metadata(path).players]
    assert "Ben Mueller" in names and not any("\ufffd" in n for n in names)


def test_an_event_row_after_an_empty_row_is_refused(tmp_path):
    """Reading stops at the first empty row (spec §4.2); an event row after it, before the
    Statistic block, would be lost: the reader names it instead."""
    raw = FIRST.read_bytes()
    cut = raw.index(b"\n", raw.index(b"00:11:20.208")) + 1
    path = tmp_path / "1st Half.csv"
    path.write_bytes(raw[:cut] + b"\n" + raw[cut:])
    with pytest.raises(InputError, match="ends the events") as info:
        read_interruptions(path, 1)
    assert info.value.line == raw[:cut].count(b"\n") + 2
    assert len(read_interruptions(FIRST, 1)) == 34
