"""The DEBS 2013 dataflow as an epic topology, mirroring EPIC's (paper figures 1-4).

:func:`build_topology` turns :class:`DebsOptions` into an :class:`epic.Topology` built only from the
public DSL (sources, ``merge``, ``process`` with vectorised operators, ``splitstream`` with
:func:`epic.vector_split`, ``window``, ``map``, sinks), so ``epic run`` and ``epic deploy`` run the
same graph. ``topologies/debs2013.py`` reads the ``epic.param`` values and calls it.

::

    event_reader ─► mark_events ─┐
                                 ├─► merge_by_time ─[► game_state]─► debs_splitter (Listing 1)
    interrupt_reader ────────────┘                                      │  │  │
        ┌───────────────────────────────────────────────────────────────┘  │  │
        ▼ 0: players' shoes                  1: everything + markers ▼      ▼ 2: players' shoes
    q1_running ─► q1_split ─► q1a         q2_ball_hitter ─┬─► q4_shots    q3_heatmap
                     └─► increments ─► q1b_{1M,5M,20M,landmark}            └─► q3_{1M,5M,10M,landmark}
                                      q2_possession ─► q2_split ─► q2playerpossession
                                                          └─► slices ─► q2team_{1min,5min,20min,landmark}

Every functional piece handed to the DSL is a module-level function, a frozen dataclass or a
``functools.partial`` of one, so the topology pickles (for Spark) and nothing runs at import time.

Example:
    >>> t = build_topology(DebsOptions(input="game.csv", out="out/x"))   # doctest: +SKIP
    >>> epic.run(t)                                                       # doctest: +SKIP
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import epic
from debs2013 import constants as C
from debs2013.common import (GAME_SCHEMA, SENSOR, STOP, MarkEvents, Roster, UnknownSensors,
                             marker_batch)
from debs2013.config import Q1Config, Q2Config, Q3Config, Q4Config
from debs2013.q1 import Q1A_SCHEMA, Q1B_SCHEMA, RunningOperator, RunningStats, q1b_rows
from debs2013.q2 import (PLAYER_POSSESSION_SCHEMA, TEAM_POSSESSION_SCHEMA, BallHitter,
                         PossessionOperator, TeamShare, team_rows)
from debs2013.q3 import (HeatMap, HeatMapOperator, base_shape, corner_values, fold_map,
                         grid_weights, q3_schema)
from debs2013.q4 import Q4_SCHEMA, ShotOperator
from debs2013.readers import (SENSOR_SCHEMA, interruption_markers, read_game_interruptions,
                              read_metadata, shared_dir)
from epic import serde
from epic.errors import SpecError

__all__ = ["DebsOptions", "build_topology", "OUTPUT_FILES", "Q3_OUT_SCHEMA", "ListingOne",
           "GameState", "PlayClock", "ToPlayTime", "WindowToEvent", "Then", "q3_all_grids",
           "q3_all_grids_chunked", "q3_out_schema", "q3_row_schema", "data_span",
           "grid_name", "QUERIES", "parquet_options"]

QUERIES = ("q1", "q2", "q3", "q4")
#: The output formats of the 15 streams (``DebsOptions.format``).
OUTPUT_FORMATS = ("csv", "parquet")


def q3_out_schema(config: Q3Config = Q3Config()) -> pa.Schema:
    """Q3 output: the spec's fields plus ``grid`` (``"8x13"`` .. ``"64x100"``: cells along x by
    y), since each q3 file carries the four grids of its window; corner type per
    ``config.corners``."""
    return pa.schema(list(q3_schema(config)) + [pa.field("grid", pa.string())],
                     metadata={"epic.event_time": "ts", "epic.time_unit": "ps"})


#: the default Q3 output schema (corners in whole millimetres)
Q3_OUT_SCHEMA = q3_out_schema()

#: The type of ``player_id`` and ``grid`` in the q3 rows on their way to the sinks.
Q3_NAME_TYPE = pa.dictionary(pa.int32(), pa.string())


def q3_row_schema(config: Q3Config = Q3Config()) -> pa.Schema:
    """:func:`q3_out_schema` as the q3 rows flow from the windows to the sinks
    (:func:`q3_all_grids`): ``player_id`` and ``grid`` dictionary-encoded, against the same
    dictionary in every batch (the roster's names, the four grid names). The sinks write the
    names (CSV) or the dictionary as it is (Parquet: no hashing of 10^8 names per game, q3
    files read back as strings, docs/debs2013.md "Parquet")."""
    out = q3_out_schema(config)
    return pa.schema([f.with_type(Q3_NAME_TYPE) if f.name in ("player_id", "grid") else f
                      for f in out], metadata=out.metadata)


@functools.lru_cache(maxsize=8)
def _names_array(names: tuple) -> pa.Array:
    """One Arrow array per tuple of names: every q3 batch refers to the same dictionary."""
    return pa.array(list(names), pa.string())


def _player_indices(players_col: pa.Array, players: tuple) -> tuple[np.ndarray, pa.Array]:
    """``(index per window row, dictionary)`` of a window batch's ``player_id`` column: the
    roster's names ``players`` as the dictionary; a name not among them (or no roster) gets a
    dictionary of this batch's own (correct, but a Parquet writer then writes the names plain)."""
    if players:
        dictionary = _names_array(tuple(players))
        idx = pc.index_in(players_col, value_set=dictionary)
        if not idx.null_count:
            return idx.to_numpy(zero_copy_only=False).astype(np.int32, copy=False), dictionary
    enc = pc.dictionary_encode(players_col)
    return enc.indices.to_numpy(zero_copy_only=False).astype(np.int32), enc.dictionary

_Q1_WINDOWS = (("1M", 60), ("5M", 300), ("20M", 1200), ("landmark", None))
_Q2_WINDOWS = (("1min", 60), ("5min", 300), ("20min", 1200), ("landmark", None))
_Q3_WINDOWS = (("1M", 60), ("5M", 300), ("10M", 600), ("landmark", None))

#: The 15 EPIC output streams: file name -> (query, schema written).
OUTPUT_FILES = {
    "q1a.csv": ("q1", Q1A_SCHEMA),
    **{f"q1b_{w}.csv": ("q1", Q1B_SCHEMA) for w, _ in _Q1_WINDOWS},
    "q2playerpossession.csv": ("q2", PLAYER_POSSESSION_SCHEMA),
    **{f"q2teampossession_{w}.csv": ("q2", TEAM_POSSESSION_SCHEMA) for w, _ in _Q2_WINDOWS},
    **{f"q3_{w}.csv": ("q3", Q3_OUT_SCHEMA) for w, _ in _Q3_WINDOWS},
    "q4.csv": ("q4", Q4_SCHEMA),
}


@dataclass(frozen=True)
class DebsOptions:
    """Everything the DEBS topology can be told (the ``epic.param`` values of the topology file).

    Attributes:
        input: the game CSV (13 integer fields, no header; ``.gz`` allowed).
        referee_events: the ``referee-events`` directory; None: the shared real files.
        metadata: a ``metadata.txt``; None: the spec's sensor table.
        out: output directory of the 15 files.
        clock: annotation-clock option of spec §4.3: ``"A"`` (default), ``"B"`` or ``"C"``.
        lenient: bad input lines go to ``dead_letter`` instead of stopping the run.
        dead_letter: the dead-letter CSV (lenient mode); default ``<out>/dead-letter.csv``.
        delays: EPIC's delay logging: every output row starts with the wall-clock arrival time of
            the newest input row behind it and its write time (ns).
        format: ``"csv"`` (default): each stream to ``<name>.csv``; ``"parquet"``: to
            ``<name>.parquet`` instead (one file per stream, complete when the run ends; the same
            columns, delay columns included).
        replay_speed: None: read the game as fast as it parses; a number: replay it paced by
            event time, this many times faster than real time (1 = real time; the event reader's
            ``replay_speed``, :mod:`epic.replay`). The referee markers are not paced (the merge
            holds them until the events' time passes them).
        queries: the queries to build (a subset of ``q1 q2 q3 q4``; for per-query benchmarks).
        scope: ``"halves"``: drop sensor rows outside the two halves (spec §1.4, default);
            ``"all"``: keep every row (origins move 125 s before kick-off).
        q1_interruptions / q3_interruptions: ``"ignore"`` (spec default: players keep moving) or
            ``"drop"``: sensor rows inside interruptions do not reach the query.
        trim_markers: drop interruption markers before the input's first row and after its last
            (short or cut games: they would stretch Q2's team slices and windows over time
            without data); an interruption on at the first row begins there. The real game
            starts 124 s before the first marker, so nothing changes there.
        batch_rows: rows per input batch: each is one step of every node (262,144 by
            default; 65,536 cost the full game 16 % more CPU in ``epic run`` and a Parquet
            deploy 18 % more wall time: per-step work of the windows and front ends; the
            output is the same).
        window_time: ``"event"``: the windows of Q1, Q2 (team) and Q3 run on raw event time, so
            they keep emitting through the half-time break (default, as EPIC); ``"play"``: on play
            time, the break cut out (spec §10.11): a 5-minute window just after the second
            kick-off also holds the end of the first half, nothing is emitted during the break,
            and output ``ts`` values are still event times (:class:`PlayClock`).
        play_break_from: with ``window_time="play"``, where the cut-out break starts (ps);
            None: the official end of the 1st half. A short generated game whose 1st half
            ends early (``epic debs generate --minutes``) passes the end of its 1st-half data
            (``halves[0].data_end_ts`` of its truth file), so its windows run from one half's
            data straight into the next (``scripts/demo``).
        q1, q2, q3, q4: the queries' switches (:mod:`debs2013.config`).
    """

    input: str = "data/full-game"
    referee_events: str | None = None
    metadata: str | None = None
    out: str = "out/debs2013"
    clock: str = "A"
    lenient: bool = False
    dead_letter: str | None = None
    delays: bool = False
    format: str = "csv"
    replay_speed: float | None = None
    queries: tuple[str, ...] = QUERIES
    scope: str = "halves"
    q1_interruptions: str = "ignore"
    q3_interruptions: str = "ignore"
    trim_markers: bool = True
    batch_rows: int = 1 << 18
    window_time: str = "event"
    play_break_from: int | None = None
    q1: Q1Config = field(default_factory=Q1Config)
    q2: Q2Config = field(default_factory=Q2Config)
    q3: Q3Config = field(default_factory=Q3Config)
    q4: Q4Config = field(default_factory=Q4Config)

    def __post_init__(self):
        for name, value, allowed in (
                ("clock", self.clock, ("A", "B", "C")),
                ("scope", self.scope, ("halves", "all")),
                ("q1_interruptions", self.q1_interruptions, ("ignore", "drop")),
                ("q3_interruptions", self.q3_interruptions, ("ignore", "drop")),
                ("window_time", self.window_time, ("event", "play"))):
            if value not in allowed:
                raise SpecError(f"debs2013: {name}={value!r}; use one of {', '.join(allowed)}")
        if self.play_break_from is not None and not (
                C.FIRST_HALF_START < self.play_break_from <= C.FIRST_HALF_END):
            raise SpecError(f"debs2013: play_break_from={self.play_break_from} must lie in the "
                            "1st half (ps, after its kick-off, at most its official end)")
        bad = [q for q in self.queries if q not in QUERIES]
        if bad or not self.queries:
            raise SpecError(f"debs2013: queries={','.join(self.queries)!r}; name some of "
                            f"{', '.join(QUERIES)}")


# ------------------------------------------------------------------------------------------------
# Play time (spec §10.11): windows that skip the half-time break


@dataclass(frozen=True)
class PlayClock:
    """Event time <-> play time: the break between the halves cut out.

    ``gap`` is the break ``second_start - first_end`` rounded down to a whole multiple of
    ``period`` (every emission period divides it), so the emission instants after the break stay on
    the kick-off grid of event time. Play time is event time up to the end of the first half, any
    time in the break counts as the end of the first half, and the second half is moved back by
    ``gap``. The map is monotone, so watermarks map too. Back to event time: instants after
    ``first_end`` move forward by ``gap``.

    Example:
        >>> c = PlayClock(first_end=100, second_start=130, gap=30)
        >>> c.to_play(np.array([90, 100, 115, 130, 140])).tolist()
        [90, 100, 100, 100, 110]
        >>> c.to_event(np.array([90, 100, 101, 110])).tolist()
        [90, 100, 131, 140]
    """

    first_end: int = C.FIRST_HALF_END
    second_start: int = C.SECOND_HALF_START
    gap: int = 0

    @classmethod
    def for_periods(cls, *periods: int, first_end: int = C.FIRST_HALF_END) -> "PlayClock":
        """The clock whose break, from ``first_end`` to the 2nd-half kick-off, is cut out in
        whole multiples of every period."""
        import math
        step = math.lcm(*periods)
        brk = C.SECOND_HALF_START - first_end
        return cls(first_end, C.SECOND_HALF_START, brk // step * step)

    def to_play(self, ts: np.ndarray) -> np.ndarray:
        return np.where(ts >= self.second_start, ts - self.gap, np.minimum(ts, self.first_end))

    def to_play_int(self, t: int) -> int:
        return t - self.gap if t >= self.second_start else min(t, self.first_end)

    def to_event(self, ts: np.ndarray) -> np.ndarray:
        return np.where(ts > self.first_end, ts + self.gap, ts)


class ToPlayTime:
    """Operator: re-stamp ``ts`` from event time to play time (:class:`PlayClock`).

    Its watermark hold is the play time of the input watermark, so windows downstream see play
    time in rows and watermarks alike.
    """

    def __init__(self, clock: PlayClock, schema: pa.Schema):
        self.clock = clock
        self.output_schema = schema
        self._wm: int | None = None

    @property
    def output_watermark(self) -> int:
        # Nothing older than play(input watermark) can come; before any watermark, hold all.
        return self.clock.to_play_int(self._wm) if self._wm is not None else -(2**62)

    def on_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        i = batch.schema.get_field_index("ts")
        ts = batch.column(i).to_numpy(zero_copy_only=False).astype(np.int64)
        return [batch.set_column(i, batch.schema.field(i), pa.array(self.clock.to_play(ts)))]

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        if self._wm is None or watermark > self._wm:
            self._wm = int(watermark)
        return []

    def on_end(self) -> list[pa.RecordBatch]:
        return []

    def snapshot(self) -> bytes:
        return serde.pack_state("debs2013.to_play/1", {"wm": self._wm})

    def restore(self, data: bytes) -> None:
        st = serde.unpack_state(data, "debs2013.to_play/1")
        self._wm = st["wm"]


@dataclass(frozen=True)
class WindowToEvent:
    """Map: a window node's ``window_start`` / ``window_end`` from play time back to event time."""

    clock: PlayClock

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        for name in ("window_start", "window_end"):
            i = batch.schema.get_field_index(name)
            t = batch.column(i).to_numpy(zero_copy_only=False).astype(np.int64)
            batch = batch.set_column(i, batch.schema.field(i), pa.array(self.clock.to_event(t)))
        return batch


@dataclass(frozen=True)
class Then:
    """Map: ``second(first(batch))`` (both picklable, so the composition is too)."""

    first: object
    second: object

    def __call__(self, batch: pa.RecordBatch):
        return self.second(self.first(batch))


# ------------------------------------------------------------------------------------------------
# The interrupt reader


def _ts_of(line: bytes) -> int | None:
    parts = line.split(b",")
    if len(parts) != 13:
        return None
    try:
        return int(parts[1])
    except ValueError:
        return None


def data_span(path: str | os.PathLike) -> tuple[int, int] | None:
    """``(first ts, last ts)`` of a game CSV, from its first and last lines: two small reads of
    a plain file; a ``.gz`` file is decompressed once to reach its end (no seek in a gzip
    stream: about 3 s per GB of text). None for missing files or unparsable lines."""
    path = Path(path)
    if not path.is_file():
        return None
    if path.suffix == ".gz":
        import gzip

        import zlib

        try:
            with gzip.open(path, "rb") as f:
                data = f.read(4096)
                head, end = data.splitlines(), data
                while chunk := f.read(1 << 24):
                    end = (end + chunk)[-4096:]
        except (EOFError, OSError, zlib.error):
            # a cut or damaged .gz: its end is unknown here; the game's reader reports the
            # file and line where it cannot read on (strict and lenient alike)
            return None
        tail = [ln for ln in end.splitlines() if ln.strip()]
    else:
        with open(path, "rb") as f:
            head = f.read(4096).splitlines()
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 4096))
            tail = [ln for ln in f.read().splitlines() if ln.strip()]
    first = next((t for t in map(_ts_of, head) if t is not None), None)
    last = next((t for t in map(_ts_of, reversed(tail)) if t is not None), None)
    return None if first is None or last is None else (first, last)


def marker_batches(referee_dir: str, clock: str,
                   span: tuple[int, int] | None) -> list[pa.RecordBatch]:
    """The interrupt reader's rows: Begin (:data:`~debs2013.common.STOP`) and End
    (:data:`~debs2013.common.RESUME`) markers of both halves in ``ts`` order; with ``span`` only
    those inside ``[first, last]`` of the sensor data."""
    markers = interruption_markers(read_game_interruptions(referee_dir, clock=clock))
    if span is not None:
        markers = trim_markers(markers, span)
    return [marker_batch([m.ts for m in markers], [m.kind for m in markers])]


def trim_markers(markers, span: tuple[int, int]) -> list:
    """``markers`` (in time order) inside ``[first, last]`` of the sensor data; an interruption
    that began before the first row and is still on there begins at the first row instead (a
    generated game's data starts microseconds after the kick-off, whose stoppage lasts seconds)."""
    from .readers import InterruptionMarker

    kept, stopped = [], None
    for m in markers:
        if m.ts < span[0]:
            stopped = m if m.kind == "begin" else None
            continue
        if m.ts > span[1]:
            break
        if stopped is not None and not kept and m.ts > span[0]:
            kept.append(InterruptionMarker(span[0], "begin", stopped.half))
        stopped = None
        kept.append(m)
    if stopped is not None:
        kept.append(InterruptionMarker(span[0], "begin", stopped.half))
    return kept


# ------------------------------------------------------------------------------------------------
# The DEBS splitter


GAME_STATE_SCHEMA = pa.schema(list(GAME_SCHEMA) + [pa.field("stopped", pa.int8())],
                              metadata=GAME_SCHEMA.metadata)


class GameState:
    """Adds ``stopped`` (1 while the game is interrupted) to the merged game stream.

    Only in the graph when a query drops rows inside interruptions (``q1_interruptions`` /
    ``q3_interruptions = "drop"``). A marker row carries the state after it. Vectorised: a
    forward fill of the markers per batch.
    """

    output_schema = GAME_STATE_SCHEMA

    def __init__(self):
        self._stopped = 0

    def on_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        marker = batch.column("marker").to_numpy(zero_copy_only=False)
        at = np.nonzero(marker != SENSOR)[0]
        if len(at) == 0:
            flag = np.full(batch.num_rows, self._stopped, np.int8)
        else:
            state = np.where(marker[at] == STOP, 1, 0).astype(np.int8)
            idx = np.searchsorted(at, np.arange(batch.num_rows), side="right") - 1
            flag = np.where(idx >= 0, state[np.maximum(idx, 0)], self._stopped).astype(np.int8)
            self._stopped = int(state[-1])
        return [batch.append_column("stopped", pa.array(flag, pa.int8()))]

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        return []

    def on_end(self) -> list[pa.RecordBatch]:
        return []

    def snapshot(self) -> bytes:
        return serde.pack_state("debs2013.game_state/1", {"stopped": self._stopped})

    def restore(self, data: bytes) -> None:
        st = serde.unpack_state(data, "debs2013.game_state/1")
        self._stopped = st["stopped"]


@dataclass(frozen=True)
class ListingOne:
    """EPIC's distribution query (paper Listing 1), vectorised::

        (i = 0 and is_player(ev)) or (i = 1) or (i = 2 and is_player(ev))

    ``outputs`` names what each output port feeds (``"q1"``, ``"q2q4"``, ``"q3"``), so a topology
    with fewer queries has fewer ports. ``is_player``: a player's shoe sensor (hands, the referee
    and balls go to Q2/Q4 only; markers too). Every port also drops sensor rows outside the
    ``scope`` intervals, and Q1 / Q3 rows inside interruptions when ``drop`` says so (that needs
    the ``stopped`` column of :class:`GameState`).
    """

    outputs: tuple[str, ...]
    shoes: np.ndarray = field(repr=False)            # sid -> is a player's shoe sensor
    scope: tuple[tuple[int, int], ...] | None = None
    drop: frozenset = frozenset()

    def __call__(self, i: int, batch: pa.RecordBatch):
        what = self.outputs[i]
        sid = batch.column("sid").to_numpy(zero_copy_only=False)
        marker = batch.column("marker").to_numpy(zero_copy_only=False)
        ok = None
        if self.scope is not None:
            ts = batch.column("ts").to_numpy(zero_copy_only=False)
            inside = np.zeros(len(ts), bool)
            for lo, hi in self.scope:
                inside |= (ts >= lo) & (ts <= hi)
            ok = inside | (marker != SENSOR)
        if what == "q2q4":
            return True if ok is None else ok
        s = np.clip(sid, 0, len(self.shoes) - 1)
        mask = self.shoes[s] & (sid >= 0) & (marker == SENSOR)
        if ok is not None:
            mask &= ok
        if what in self.drop:
            mask &= batch.column("stopped").to_numpy(zero_copy_only=False) == 0
        return mask


# ------------------------------------------------------------------------------------------------
# Small vectorised glue


@dataclass(frozen=True)
class KindIs:
    """``vector_split`` mask: output ``i`` gets the rows whose ``kind`` is ``kinds[i]``."""

    kinds: tuple[str, ...]

    def __call__(self, i: int, batch: pa.RecordBatch):
        return epic.pc.equal(batch.column("kind"), self.kinds[i])


@dataclass(frozen=True)
class AtSliceEnd:
    """Map: re-stamp slice rows ``[ts, ts + period)`` to their last picosecond.

    Why: the heat-map and possession front ends release a slice once input time has reached
    its end, after the runtime has already forwarded a watermark past the slice's start; the
    windows downstream would count such rows as late. Any time inside the slice puts the row
    in exactly the same windows (their boundaries and instants lie on the slice grid), and the
    last picosecond is never behind the watermark when the slice is released.
    """

    period_ps: int

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        i = batch.schema.get_field_index("ts")
        ts = epic.pc.add(batch.column(i), self.period_ps - 1)
        return batch.set_column(i, batch.schema.field(i), ts)


def grid_name(grid: tuple[int, int]) -> str:
    """``(8, 13)`` -> ``"8x13"``."""
    return f"{grid[0]}x{grid[1]}"


@functools.lru_cache(maxsize=16)
def _axis_map(base, target: int) -> tuple[np.ndarray, np.ndarray]:
    """Per base index along one axis (``base``: a count or a tuple of counts whose edges are
    united, :func:`debs2013.q3.axis_edges`): the (up to 2) target indices it overlaps and the
    shares, as ``(targets[n, 2], shares[n, 2])`` (share 0 where there is no second target)."""
    w = grid_weights(base, target)          # target x base
    nb = w.shape[1]
    targets = np.zeros((nb, 2), np.int64)
    shares = np.zeros((nb, 2), np.float64)
    for k in range(nb):
        nz = np.nonzero(w[:, k])[0]
        if len(nz) > 2:
            raise SpecError(f"debs2013: base grid {base} cannot be folded onto {target} cells")
        targets[k, :len(nz)] = nz
        shares[k, :len(nz)] = w[nz, k]
    return targets, shares


@functools.lru_cache(maxsize=16)
def _fold_maps(base: tuple[int, int], grid: tuple[int, int]) -> list:
    """Per base cell id, for each of the (up to 4) coarse cells it may overlap: the coarse cell
    id and the share of the fine cell in it, ``[(cmap, wmap, whole)]`` in a fixed order (the
    summation order, so results are the same to the last bit); ``whole`` when every share of
    that entry is 1 and no other entry exists (the grids divide each other)."""
    bx, by = base_shape(base)
    nx, ny = grid
    tx, sx = _axis_map(base[0], nx)
    ty, sy = _axis_map(tuple(base[1:]), ny)
    cell = np.arange(bx * by, dtype=np.int64)
    fi, fj = cell % bx, cell // bx
    maps = []
    for a in (0, 1):
        for b in (0, 1):
            w = sx[fi, a] * sy[fj, b]
            if (w > 0).any():
                maps.append((ty[fj, b] * nx + tx[fi, a], w, False))
    if len(maps) == 1 and (maps[0][1] == 1.0).all():
        maps = [(maps[0][0], maps[0][1], True)]
    return maps


@functools.lru_cache(maxsize=16)
def _whole_axes(base: tuple[int, ...], grid: tuple[int, int]):
    """``(coarse column per base column, coarse row per base row)`` when every base cell lies
    in one coarse cell (the grids divide each other; both maps non-decreasing), else None."""
    maps = _fold_maps(base, grid)
    if len(maps) != 1 or not maps[0][2]:
        return None
    fx = _axis_map(base[0], grid[0])[0][:, 0]
    fy = _axis_map(tuple(base[1:]), grid[1])[0][:, 0]
    if (np.diff(fx) < 0).any() or (np.diff(fy) < 0).any():
        return None
    return fx.copy(), fy.copy()


@functools.lru_cache(maxsize=16)
def _refines(base: tuple[int, ...]) -> bool:
    """Whether every base cell lies in one cell of each q3 grid (:func:`debs2013.q3.fold_map`)."""
    try:
        fold_map(base, C.Q3_GRIDS)
    except SpecError:
        return False
    return True


def _ascending(row, cell) -> bool:
    """Whether the cells of every row are strictly ascending (rows in order)."""
    if len(cell) < 2:
        return True
    dr, dc = np.diff(row), np.diff(cell)
    return bool(((dr > 0) | ((dr == 0) & (dc > 0))).all())


def _fold(row, cell, time, base: tuple[int, int], grid: tuple[int, int],
          ascending: bool | None = None):
    """Fold sparse base-grid times ``(row, cell, time)`` (rows in order) onto ``grid``:
    ``(row, cell, time)`` of the non-zero coarse cells, sorted by row then cell id
    (``j * nx + i``). ``ascending``: :func:`_ascending` of ``(row, cell)`` if known."""
    nx, ny = grid
    if tuple(grid) == tuple(base):
        ascending = _ascending(row, cell) if ascending is None else ascending
        if ascending:
            return row, cell, time.astype(np.float64, copy=False)
    axes = _whole_axes(tuple(base), tuple(grid))
    if axes is not None and len(row) and \
            (int(row[-1]) + 1) * nx * ny > 4 * len(row) + (1 << 16) and \
            (_ascending(row, cell) if ascending is None else ascending):
        # Sparse rows on a fine grid: a table of every coarse cell of every row would be mostly
        # zeros to clear and scan. The base cells of one row and one coarse row are adjacent
        # (ids j * bx + i; the coarse row grows with j), so each (row, coarse row) pair is a
        # segment, and a table of the segments' coarse columns holds the sums. Same sums, in
        # the same order of addition.
        fx, fy = axes
        bx = base_shape(base)[0]
        seg_key = row * ny + fy[cell // bx]
        new = np.empty(len(seg_key), bool)
        new[0] = True
        np.not_equal(seg_key[1:], seg_key[:-1], out=new[1:])
        heads = np.flatnonzero(new)
        keys = (np.cumsum(new) - 1) * nx + fx[cell % bx]
        sums = np.bincount(keys, weights=time, minlength=len(heads) * nx)
        uniq = (sums != 0).nonzero()[0]   # faster than np.flatnonzero on floats
        seg = seg_key[heads][uniq // nx]
        return seg // ny, (seg % ny) * nx + uniq % nx, sums[uniq]
    keys, vals = [], []
    for cmap, wmap, whole in _fold_maps(base, grid):
        if whole:  # every fine cell lies in one coarse cell: no weights, no masks
            keys.append(row * (nx * ny) + cmap[cell])
            vals.append(time * 1.0)
            continue
        w = wmap[cell]
        keep = w > 0
        if not keep.any():
            continue
        keys.append(row[keep] * (nx * ny) + cmap[cell[keep]])
        vals.append(time[keep] * w[keep])
    if not keys:
        e = np.zeros(0, np.int64)
        return e, e, np.zeros(0, np.float64)
    keys = np.concatenate(keys)
    vals = np.concatenate(vals)
    span = (int(row[-1]) + 1) * nx * ny if len(row) else 0
    if span <= 16 * len(keys) + (1 << 20):
        # dense accumulation (no sort): the coarse keys of a batch fit a small table
        sums = np.bincount(keys, weights=vals, minlength=span)
        uniq = (sums != 0).nonzero()[0]   # faster than np.flatnonzero on floats
        sums = sums[uniq]
    else:
        uniq, inv = np.unique(keys, return_inverse=True)
        sums = np.bincount(inv, weights=vals, minlength=len(uniq))
    return uniq // (nx * ny), uniq % (nx * ny), sums


def q3_all_grids_chunked(batch: pa.RecordBatch, config: Q3Config,
                         max_rows: int = 500_000, folded: bool = False,
                         players: tuple = ()) -> list[pa.RecordBatch]:
    """:func:`q3_all_grids` over slices of ``batch``, so that no output batch holds much more
    than ``max_rows`` rows (a landmark window's rows over a long gap expand ~100-fold)."""
    n = batch.num_rows
    if n == 0:
        return []
    heat = batch.column("heat")
    cells = dict(zip([f.name for f in heat.type], heat.flatten()))["cells"]
    per_row = np.diff(cells.offsets.to_numpy()) if len(cells) else np.zeros(n, np.int64)
    if config.dense:
        per_row = np.full(n, sum(gx * gy for gx, gy in C.Q3_GRIDS), np.int64)
    elif not folded:
        per_row = per_row * len(C.Q3_GRIDS)  # an upper bound: every grid at most once per cell
    out, start, acc = [], 0, 0
    for i, k in enumerate(per_row.tolist()):
        if acc and acc + k > max_rows:
            out.append(q3_all_grids(batch.slice(start, i - start), config, folded, players))
            start, acc = i, 0
        acc += k
    out.append(q3_all_grids(batch.slice(start), config, folded, players))
    return out


def q3_all_grids(batch: pa.RecordBatch, config: Q3Config, folded: bool = False,
                 players: tuple = ()) -> pa.RecordBatch:
    """Heat-map window output (key ``player_id``, ``window_start`` / ``window_end``, struct
    column ``heat`` of :class:`~debs2013.q3.HeatMap`) as q3 rows of all four grids.

    The same numbers as :func:`debs2013.q3.q3_rows` (coarse time = the sum of the base cells'
    time, exact with the default base grid; split by overlap with a base grid that does not
    refine the output grid; percent of the player's time in the field, or of the window length), vectorised
    over the whole batch instead of one window row at a time. Rows come per window row (in
    batch order, i.e. by ``ts`` then player), then grid (8x13, 16x25, 32x50, 64x100), then
    cell id; with ``dense`` every cell of every grid, else the non-zero ones.

    ``folded``: the heat cells are already those of the four grids (``HeatMap(base_grid,
    grids=C.Q3_GRIDS)``, ids one grid after another, ascending in each row), so each is one
    output row and only the percentages are computed (not with ``dense``).

    The rows' schema is :func:`q3_row_schema`: ``players`` (the roster's names) is the
    dictionary of their ``player_id`` column.
    """
    n = batch.num_rows
    schema = q3_row_schema(config)
    if n == 0:
        return pa.RecordBatch.from_pylist([], schema=schema)
    if folded:
        if config.dense:
            raise SpecError("debs2013: q3_all_grids(folded=True) writes the non-zero cells only; "
                            "dense output folds at report time (folded=False)")
        return _q3_folded_rows(batch, config, schema, players)
    row, cells, times, ends = _heat_columns(batch)
    denom = _denominators(batch, config, ends, row, times)
    first_cell = _cell_tables(config.corners)[2]
    ascending = _ascending(row, cells)   # once for the four grids
    folded = _fold_grids(row, cells, times, tuple(config.base_grid), ascending)
    parts = []   # (row, global cell, pct)
    for gi, grid in enumerate(C.Q3_GRIDS):
        r, c, tsum = folded[tuple(grid)]
        ncell = grid[0] * grid[1]
        if config.dense:
            full = np.zeros(n * ncell, np.float64)
            full[r * ncell + c] = tsum
            r = np.repeat(np.arange(n, dtype=np.int64), ncell)
            c = np.tile(np.arange(ncell, dtype=np.int64), n)
            tsum = full
        d = denom[r]
        with np.errstate(divide="ignore", invalid="ignore"):
            pct = np.where(d > 0, 100.0 * tsum / np.where(d > 0, d, 1.0), 0.0)
        parts.append((r, c + first_cell[gi], pct))
    # Each part is sorted by (row, cell): place them in (row, grid, cell) order by counting,
    # with no sort over all output rows.
    per = np.stack([np.bincount(p[0], minlength=n) for p in parts], axis=1)  # (n, grids)
    starts = (np.cumsum(per.ravel()) - per.ravel()).reshape(per.shape)
    total = int(per.sum())
    r = np.empty(total, np.int64)
    gc = np.empty(total, np.int64)
    pct = np.empty(total, np.float64)
    for gi, (pr, pgc, pp) in enumerate(parts):
        first = np.cumsum(per[:, gi]) - per[:, gi]  # index in the part of each row's first
        pos = starts[pr, gi] + (np.arange(len(pr)) - first[pr])
        r[pos], gc[pos], pct[pos] = pr, pgc, pp
    return _q3_batch(batch, config, schema, ends, r, gc, pct, players)


def _heat_columns(batch: pa.RecordBatch):
    """``(row, cell, time, window end)`` of a heat-map window batch's sparse cells, one entry per
    cell (``row``: its window row; times as float64, exact for whole ps below 2^53)."""
    heat = batch.column("heat")
    parts_ = dict(zip([f.name for f in heat.type], heat.flatten()))  # slice-aware children
    cells_l, times_l = parts_["cells"], parts_["times"]
    counts = np.diff(cells_l.offsets.to_numpy())
    cells = cells_l.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
    times = times_l.flatten().to_numpy(zero_copy_only=False).astype(np.float64)
    row = np.repeat(np.arange(batch.num_rows, dtype=np.int64), counts)
    ends = batch.column("window_end").to_numpy(zero_copy_only=False).astype(np.int64)
    return row, cells, times, ends


def _denominators(batch, config: Q3Config, ends, row, times) -> np.ndarray:
    """Per window row, what its percentages divide by: the player's time in the field (the sum
    of the given cells' times) or the window's length."""
    if config.denominator == "field":
        return np.bincount(row, weights=times, minlength=batch.num_rows)
    starts = batch.column("window_start").to_numpy(zero_copy_only=False).astype(np.int64)
    return (ends - starts).astype(np.float64)


def _q3_batch(batch, config: Q3Config, schema: pa.Schema, ends, row, gc, pct,
              players: tuple = ()) -> pa.RecordBatch:
    """The q3 rows of window rows ``row``, global cells ``gc`` (:func:`_cell_tables`) and
    percentages ``pct``: ``ts`` = window end, the player, the cell's corners and grid name (the
    names as indices into fixed dictionaries, :func:`q3_row_schema`)."""
    corners = _cell_tables(config.corners)[1]
    names = _names_array(tuple(grid_name(gr) for gr in C.Q3_GRIDS))
    player = batch.column("player_id")
    pid, dictionary = _player_indices(player, players)
    # ndarray.take: a fraction of fancy indexing's cost. The indices are in their dictionaries'
    # range by construction (the roster's or this batch's own, a fixed table of grids), so
    # from_arrays skips checking them again (safe=False: half the cost of these columns);
    # a null player (no index) is checked, and refused.
    checked = player.null_count > 0
    return pa.RecordBatch.from_arrays([
        pa.array(ends.take(row), pa.int64()),
        pa.DictionaryArray.from_arrays(pid.take(row), dictionary, safe=checked),
        *(pa.array(t.take(gc), schema.field(k).type) for k, t in enumerate(corners, start=2)),
        pa.array(pct, pa.float64()),
        pa.DictionaryArray.from_arrays(_grid_index(config.corners).take(gc), names, safe=False),
    ], schema=schema)


@functools.lru_cache(maxsize=4)
def _grid_index(corners: str) -> np.ndarray:
    """Per global cell, its grid's number (int32: the q3 rows' ``grid`` indices)."""
    return _cell_tables(corners)[0].astype(np.int32)


def _q3_folded_rows(batch: pa.RecordBatch, config: Q3Config, schema: pa.Schema,
                    players: tuple = ()) -> pa.RecordBatch:
    """:func:`q3_all_grids` of already folded heat cells: a row per cell, in the cells' order."""
    row, gc, times, ends = _heat_columns(batch)
    first_cell = _cell_tables(config.corners)[2]
    # the player's time in the field: the sum over one grid's cells (each grid covers the
    # field once), the coarsest, whose cells come first in each row
    g0 = gc < first_cell[1]
    denom = _denominators(batch, config, ends, row[g0], times[g0])
    d = denom.take(row)
    if not len(d) or d.min() > 0:
        pct = times * 100.0      # the same operations as below, in place
        pct /= d
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            pct = np.where(d > 0, 100.0 * times / np.where(d > 0, d, 1.0), 0.0)
    return _q3_batch(batch, config, schema, ends, row, gc, pct, players)


def _fold_grids(row, cells, times, base: tuple, ascending: bool) -> dict:
    """:func:`_fold` of the base-grid times onto each of the four q3 grids, finest first, each
    from the finest grid already folded whose every cell lies in one of its cells (32x50 from
    64x100, 16x25 from 32x50), else from the base grid: fewer cells to fold, the same sums
    (the times are whole picoseconds, exact in float64 in any order of addition)."""
    out: dict = {}
    for grid in sorted((tuple(g) for g in C.Q3_GRIDS), key=lambda g: -g[0] * g[1]):
        src = None
        for f in out:
            if _whole_axes(f, grid) is not None and (src is None or f[0] * f[1] < src[0] * src[1]):
                src = f
        if src is None:
            out[grid] = _fold(row, cells, times, base, grid, ascending)
        else:
            r, c, t = out[src]
            out[grid] = _fold(r, c, t, src, grid, True)
    return out


@functools.lru_cache(maxsize=4)
def _cell_tables(corners: str):
    """The cells of the four grids one after another (grid by grid, then cell id): per cell its
    grid index and its corners ``(x1, y1, x2, y2)`` as q3 writes them; and each grid's first
    cell."""
    grid_of, tables = [], [[], [], [], []]
    for gi, (nx, ny) in enumerate(C.Q3_GRIDS):
        c = np.arange(nx * ny, dtype=np.int64)
        cw, ch = _W_MM / nx, _H_MM / ny
        x1 = C.FIELD["x_min"] + (c % nx) * cw
        y1 = C.FIELD["y_min"] + (c // nx) * ch
        grid_of.append(np.full(len(c), gi, np.int64))
        for k, v in enumerate((x1, y1, x1 + cw, y1 + ch)):
            tables[k].append(v)
    cfg = Q3Config(corners=corners)
    corner = [corner_values(np.concatenate(t), cfg).to_numpy(zero_copy_only=False)
              for t in tables]
    first = np.cumsum([0] + [nx * ny for nx, ny in C.Q3_GRIDS])[:-1]
    return np.concatenate(grid_of), corner, first


_W_MM = C.FIELD["x_max"] - C.FIELD["x_min"]
_H_MM = C.FIELD["y_max"] - C.FIELD["y_min"]


def _seconds(ps: int) -> int | float:
    """A period in ps as seconds for the window specs: an int, else a float whose repr is exact
    (``few_time`` takes numbers or timedeltas, not Fractions; floats convert via their repr)."""
    exact = Fraction(ps, C.PS_PER_S)
    if exact.denominator == 1:
        return int(exact)
    value = float(exact)
    if Fraction(repr(value)) != exact:
        raise SpecError(f"debs2013: a period of {ps} ps is not a decimal number of seconds; "
                        "use e.g. 0.02 or 1")
    return value


#: The Q1-Q3 operators feeding the windows emit in event-time order and hold their output watermark
#: at what they may still emit, so no row reaches a window late; were one to, it is counted (the
#: run's and the deploy's late_rows), not kept.
_LATE = "drop"


def _window_spec(length, period_ps: int, origin: int):
    ef = _seconds(period_ps)
    if length is None:
        return epic.landmark(ef, origin=origin)
    return epic.few_time(length, ef, ef, origin=origin)


# ------------------------------------------------------------------------------------------------
# The topology


def build_topology(opts: DebsOptions = DebsOptions(), name: str = "debs2013") -> epic.Topology:
    """The DEBS 2013 topology for ``opts`` (see the module docstring for the graph)."""
    if opts.format not in OUTPUT_FORMATS:
        raise SpecError(f"debs2013: format={opts.format!r}; use one of {', '.join(OUTPUT_FORMATS)}")
    t = epic.Topology(name, delay_logging=opts.delays)
    meta = read_metadata(opts.metadata) if opts.metadata else None
    roster = Roster.from_metadata(meta)
    referee = opts.referee_events or str(shared_dir() / "referee-events")
    if not Path(referee, "Game Interruption").is_dir():
        raise SpecError(f"debs2013: referee_events={referee!r} has no 'Game Interruption' "
                        "directory; pass the referee-events directory of the DEBS download")
    origin = C.FIRST_HALF_START if opts.scope == "halves" else C.FIRST_HALF_START - 125 * C.PS_PER_S
    q1cfg = _with_origin(opts.q1, origin)
    q2cfg = _with_origin(opts.q2, origin)
    q3cfg = _with_origin(opts.q3, origin)
    wanted = set(opts.queries)
    clock = (PlayClock.for_periods(q1cfg.emit_period_ps, q2cfg.team_period_ps, q3cfg.period_ps,
                                   first_end=opts.play_break_from or C.FIRST_HALF_END)
             if opts.window_time == "play" else None)

    def play(name: str, stream: epic.Stream) -> epic.Stream:
        """``stream`` on play time (window_time="play"), else as it is."""
        if clock is None:
            return stream
        return t.process(name, stream, functools.partial(ToPlayTime, clock, stream.schema),
                         schema=stream.schema)

    def to_event(fn):
        """A window-rows function that first maps the window bounds back to event time."""
        return fn if clock is None else Then(WindowToEvent(clock), fn)

    # -- readers and the DEBS splitter (figure 1) ---------------------------------------------
    mode = "lenient" if opts.lenient else "strict"
    dead = ((opts.dead_letter or os.path.join(opts.out, "dead-letter.csv")) if opts.lenient
            else None)
    raw = t.source("event_reader", epic.csv_source(
        opts.input, SENSOR_SCHEMA, time="ts", unit="ps", mode=mode, dead_letter=dead,
        batch_rows=opts.batch_rows, replay_speed=opts.replay_speed))
    marks = MarkEvents.of(meta, str(opts.input), not opts.lenient)
    events = t.map("mark_events", raw, marks, schema=GAME_SCHEMA)
    if opts.lenient:
        # rows of sensor ids in no metadata: kept in a file of their own, not lost
        unknown = t.filter("unknown_sensors", raw, UnknownSensors(marks))
        t.sink("unknown_sensors_csv", unknown, epic.csv_sink(
            os.path.join(opts.out, "unknown-sensors.csv")))
    span = data_span(opts.input) if opts.trim_markers else None
    interrupts = t.source("interrupt_reader", epic.iterator_source(
        functools.partial(marker_batches, referee, opts.clock, span), schema=GAME_SCHEMA,
        time="ts", unit="ps"))
    game = t.merge("merge_by_time", [events, interrupts])
    drop = frozenset(q for q, how in (("q1", opts.q1_interruptions),
                                      ("q3", opts.q3_interruptions))
                     if how == "drop" and q in wanted)
    if drop:
        game = t.process("game_state", game, GameState)
    # Q2 / Q4 first: in a deploy their nodes then run first in the task that runs all the
    # splitter's consumers (docs/deploy.md, "--fuse"), ahead of Q1's and Q3's per-row work, which
    # their real-time delays would otherwise wait for (issue 16, point 6).
    ports = tuple(p for p, qs in (("q2q4", {"q2", "q4"}), ("q1", {"q1"}), ("q3", {"q3"}))
                  if qs & wanted)
    shoes = (roster.player_of >= 0) & (roster.slot_of >= 0) & (roster.slot_of <= 1)
    scope = (tuple(C.HALVES[h] for h in (1, 2)) if opts.scope == "halves" else None)
    project = {"q1": ["sid", "ts", "x", "y", "v"], "q3": ["sid", "ts", "x", "y"],
               "q2q4": list(GAME_SCHEMA.names)}
    split = t.splitstream("debs_splitter", game, len(ports), epic.vector_split(
        ListingOne(ports, shoes, scope, drop), project=[project[p] for p in ports]))
    inputs = dict(zip(ports, split))

    sinks = _Sinks(t, opts)

    # -- Q2 / Q4: ball possession and shots on goal (figure 3) ------------------------------------
    if wanted & {"q2", "q4"}:
        balls = t.process("q2_ball_hitter", inputs["q2q4"], functools.partial(
            BallHitter, q2cfg, roster, "q4" in wanted))
        if "q4" in wanted:
            shots = t.process("q4_shots", balls, functools.partial(ShotOperator, opts.q4))
            sinks.add("q4", shots, Q4_SCHEMA.names)
        if "q2" in wanted:
            poss = t.process("q2_possession", balls,
                             functools.partial(PossessionOperator, q2cfg, roster, "both"))
            player, slices0 = t.splitstream("q2_split", poss, 2, epic.vector_split(
                KindIs(("player", "slice")),
                project=[PLAYER_POSSESSION_SCHEMA.names, ["ts", "time_a", "time_b"]]))
            sinks.add("q2playerpossession", player, PLAYER_POSSESSION_SCHEMA.names)
            slices = t.map("q2_slice_end", slices0, AtSliceEnd(q2cfg.team_period_ps))
            share = epic.AggSpec(TeamShare(), ("time_a", "time_b"), "share")
            slices = play("q2_play_time", slices)
            for label, length in _Q2_WINDOWS:
                w = t.window(f"q2team_{label}_window", slices,
                             _window_spec(length, q2cfg.team_period_ps, origin),
                             aggregates=[share], late=_LATE)
                rows = t.map(f"q2team_{label}_rows", w, to_event(team_rows),
                             schema=TEAM_POSSESSION_SCHEMA, time="ts")
                sinks.add(f"q2teampossession_{label}", rows, TEAM_POSSESSION_SCHEMA.names)

    # -- Q1: running analysis (figure 2) -------------------------------------------------------
    if "q1" in wanted:
        front = t.process("q1_running", inputs["q1"],
                          functools.partial(RunningOperator, q1cfg, roster, "both"))
        q1a, inc = t.splitstream("q1_split", front, 2, epic.vector_split(
            KindIs(("q1a", "increment")),
            project=[["ts"] + Q1A_SCHEMA.names, ["ts", "player_id", "intensity_id", "time",
                                                 "distance_nm"]]))
        sinks.add("q1a", q1a, Q1A_SCHEMA.names)
        stats = epic.AggSpec(RunningStats(), ("intensity_id", "time", "distance_nm"), "stats")
        inc = play("q1_play_time", inc)
        for label, length in _Q1_WINDOWS:
            w = t.window(f"q1b_{label}_window", inc,
                         _window_spec(length, q1cfg.emit_period_ps, origin), key="player_id",
                         aggregates=[stats], late=_LATE)
            rows = t.map(f"q1b_{label}_rows", w, to_event(q1b_rows), schema=Q1B_SCHEMA,
                         time="ts")
            sinks.add(f"q1b_{label}", rows, Q1B_SCHEMA.names)

    # -- Q3: heat map (figure 4) ------------------------------------------------------------------
    if "q3" in wanted:
        maps = t.process("q3_heatmap", inputs["q3"],
                         functools.partial(HeatMapOperator, q3cfg, roster))
        heat = t.map("q3_slice_end", maps, AtSliceEnd(q3cfg.period_ps))
        # the windows keep the four grids' cells (folded as the maps enter) when the base grid
        # refines them exactly; else base cells, folded by overlap at report time
        folded = not q3cfg.dense and _refines(tuple(q3cfg.base_grid))
        hm = epic.AggSpec(HeatMap(q3cfg.base_grid, C.Q3_GRIDS if folded else None),
                          ("cells", "times"), "heat")
        heat = play("q3_play_time", heat)
        for label, length in _Q3_WINDOWS:
            w = t.window(f"q3_{label}_window", heat,
                         _window_spec(length, q3cfg.period_ps, origin), key="player_id",
                         aggregates=[hm], late=_LATE)
            rows = t.flat_map(f"q3_{label}_rows", w,
                              to_event(functools.partial(q3_all_grids_chunked, config=q3cfg,
                                                         folded=folded, players=roster.names)),
                              schema=q3_row_schema(q3cfg), time="ts")
            sinks.add(f"q3_{label}", rows, Q3_OUT_SCHEMA.names)
    return t


def _with_origin(cfg, origin: int):
    from dataclasses import replace
    return cfg if cfg.origin == origin else replace(cfg, origin=origin)


class _Sinks:
    def __init__(self, t: epic.Topology, opts: DebsOptions):
        self.t, self.opts = t, opts

    def add(self, name: str, stream: epic.Stream, columns) -> None:
        o = self.opts
        path = os.path.join(o.out, f"{name}.{o.format}")
        if o.format != "parquet":
            self.t.sink(f"{name}_{o.format}", stream,
                        epic.csv_sink(path, columns=list(columns), delays=o.delays))
            return
        out = epic.parquet_sink(path, columns=list(columns),
                                delays=o.delays).output_schema(stream.schema)
        self.t.sink(f"{name}_{o.format}", stream, epic.parquet_sink(
            path, columns=list(columns), delays=o.delays, options=parquet_options(name, out),
            required=True))


def parquet_options(name: str, schema: pa.Schema) -> dict:
    """The ``ParquetWriter`` options of DEBS output ``name`` (docs/debs2013.md, "Parquet"):
    statistics for the columns that are not strings only (a player's or grid's name is in every
    row group, so its min / max prune nothing, and they cost 8-13 % of the writing), and in q3
    for the time columns only (corners and percentages span the field in every row group:
    q3_10M 135 -> 125 ns per row); float
    columns without dictionary, their values rarely repeat (q1b: 464 -> 137 ns and 31.8 ->
    26.0 bytes per row), except in the short q3 windows, where a player's percentages stay the
    same for many seconds; q3_landmark's percentages as byte-stream split. A file with
    dictionary-typed columns (q3's names, :func:`q3_row_schema`) is written without the Arrow
    schema (``store_schema``), so that a reader gets them as the strings they are."""
    floats = [f.name for f in schema if pa.types.is_floating(f.type)]
    opts: dict = {"write_statistics": [f.name for f in schema if not pa.types.is_string(f.type)
                                       and not pa.types.is_large_string(f.type)
                                       and not pa.types.is_dictionary(f.type)]}
    if any(pa.types.is_dictionary(f.type) for f in schema):
        opts["store_schema"] = False
    if name.startswith("q3_"):
        # every row group of a heat map holds (nearly) every cell: only its times prune
        opts["write_statistics"] = [n for n in ("entry_time", "write_time", "ts")
                                    if n in schema.names]
    if name.startswith("q3_") and name != "q3_landmark":
        return opts
    opts["use_dictionary"] = [n for n in schema.names if n not in floats]
    if name == "q3_landmark":
        opts["use_byte_stream_split"] = floats
    return opts
