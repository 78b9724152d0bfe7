"""Query 1, running analysis: the front end (:class:`RunningOperator`) and the window UDA
(:class:`RunningStats`).

Dataflow (EPIC, paper figure 2)::

    game stream ─► RunningOperator ─┬─► q1a (current running statistics, every emission period)
                                    └─► increments ─► few_time(60|300|1200 s, ef, ef) / landmark
                                                        + RunningStats, key player_id ─► q1b_*

**Input**: :data:`debs2013.common.GAME_SCHEMA` (or the plain sensor schema); only players' shoe
sensors are used (no hands, no referee, no balls; markers are ignored: players keep running
during interruptions, spec §4.4).

**Rules** (spec §5; switches in :class:`~debs2013.config.Q1Config`):

* A player's speed is the mean of the latest ``|v|`` of his two shoe sensors (one shoe until the
  other has reported), recomputed on every shoe event and constant until the next one.
* Its intensity class: standing ≤ 1 km/h < trot ≤ 11 < low ≤ 14 < medium ≤ 17 < high ≤ 24 < sprint
  (``boundary="le"``; ``"lt"`` puts a limit value in the upper class).
* Distance: the integral of that speed over time (``distance="speed"``), or the sum of 2D
  displacements of the mean shoe position (``"displacement"``). Only observed time counts: a
  sample stands until the player's next sample if that comes within ``max_gap_ps`` (1 s); a
  longer gap (a drop-out, half-time, the end of the data) is unobserved as a whole: the sample
  before it stands for nothing (no time, no distance). So the last sample of a half adds nothing
  past the end of the data. The increments of a slice are released once this is decided (the next
  sample has come, or ``max_gap_ps`` has passed without one); a q1a row is a live reading and
  includes the time since the player's latest sample while that is within ``max_gap_ps`` (no row
  after that).
* The 1-second rule: a *segment* has one intensity. When the class changes, the new class must
  last ``min_segment_ps`` to open a new segment; the decision is made when it has lasted that
  long. Shorter stretches go to the next intensity that lasts (``short_stretch="next"``: the new
  segment starts where the old one's class was first left; if the old class itself comes back and
  lasts, the stretches are absorbed and no segment closes) or to the segment before
  (``"previous"``: the new segment starts at its own first event). At the end of the input a
  still-undecided stretch stays with the current segment.

**Output 1, q1a** (:data:`Q1A_SCHEMA`): at every emission instant ``origin + m*emit_period_ps``,
one row per observed player for his current segment as known at that instant: ``ts_start`` the
segment start, ``ts_stop`` the instant, the class name, ``distance`` in m and the mean ``speed``
over the segment in km/h (distance / observed time). When a segment is closed (at the decision
time) one more row gives its final values, ``ts_stop`` = its end. While a new class has not lasted
1 s yet, the current segment's row includes the undecided stretch (it is the player's state until
the rule decides). At the end of the input a last row per player is written at the last event
time. Rows are written in ``ts_stop`` order (then closing rows first, then player): a closing
row's ``ts_stop`` (its segment's end) lies up to 1 s before the decision, so the rows after the
earliest undecided stretch of any player wait for the decision (up to ~1 s of latency).

At the start of a player's data his first segment opens at his first sample with that sample's
class. If that class does not last 1 s, it is not a segment of its own: the first segment takes
the class of the next intensity that lasts (its start stays at the player's first sample; with
either ``short_stretch``, since nothing comes before it), decided when that intensity has lasted
1 s; until then q1a shows the first class, and the player's increments wait for the decision.
Every segment but a last one cut by the end of the input lasts at least 1 s.

**Output 2, increments** (:data:`INCREMENT_SCHEMA`): per emission slice ``[ts, ts + period)`` and
player, the observed time (ps) and distance (nm, integer so that window add/remove is exact) per
segment intensity, after the 1-second rule is decided. Rows are released in ``ts`` order once every
player's stretch before the slice end is decided, so a window downstream never sees a late row.
Feeding slices makes a segment that straddles a window's start count in proportion (spec §5):
only its slices inside the window are in the window.

Example:
    >>> op = RunningOperator(Q1Config(origin=0), emit="q1a")
    >>> op.output_schema.names
    ['ts_start', 'ts_stop', 'player_id', 'intensity', 'distance', 'speed']
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

from debs2013 import constants as C
from debs2013.common import Roster, column, floor_grid, stable_order, time_ordered
from debs2013.config import Q1Config
from epic import serde
from epic.aggregates import Aggregate
from epic.errors import SpecError, StateError

__all__ = ["Q1A_SCHEMA", "INCREMENT_SCHEMA", "Q1_FRONT_SCHEMA", "Q1B_SCHEMA", "RunningOperator",
           "RunningStats", "q1b_rows", "Q1B_FIELDS"]

Q1A_SCHEMA = pa.schema([
    pa.field("ts_start", pa.int64()), pa.field("ts_stop", pa.int64()),
    pa.field("player_id", pa.string()), pa.field("intensity", pa.string()),
    pa.field("distance", pa.float64()), pa.field("speed", pa.float64()),
], metadata={"epic.event_time": "ts_stop", "epic.time_unit": "ps"})

INCREMENT_SCHEMA = pa.schema([
    pa.field("ts", pa.int64()), pa.field("player_id", pa.string()),
    pa.field("intensity", pa.int8()), pa.field("time", pa.int64()),
    pa.field("distance", pa.int64()),
], metadata={"epic.event_time": "ts", "epic.time_unit": "ps"})

#: ``emit="both"``: q1a rows (``kind = "q1a"``) and increments (``kind = "increment"``) in one
#: stream; split them with :func:`epic.vector_split` on ``kind``. ``ts`` is the emission time.
Q1_FRONT_SCHEMA = pa.schema([
    pa.field("kind", pa.string()), pa.field("ts", pa.int64()),
    pa.field("ts_start", pa.int64()), pa.field("ts_stop", pa.int64()),
    pa.field("player_id", pa.string()), pa.field("intensity", pa.string()),
    pa.field("intensity_id", pa.int8()), pa.field("distance", pa.float64()),
    pa.field("speed", pa.float64()), pa.field("time", pa.int64()),
    pa.field("distance_nm", pa.int64()),
], metadata={"epic.event_time": "ts", "epic.time_unit": "ps"})

Q1B_FIELDS = tuple(f"{name}_{what}" for name in C.INTENSITIES for what in ("time", "distance"))
Q1B_SCHEMA = pa.schema([pa.field("ts", pa.int64()), pa.field("player_id", pa.string())]
                       + [pa.field(f, pa.float64()) for f in Q1B_FIELDS],
                       metadata={"epic.event_time": "ts", "epic.time_unit": "ps"})

_NO = -(2**62)  # "none" for integer state fields
#: the intensity classes' names, taken by index into the output columns
_INTENSITY_NAMES = pa.array(list(C.INTENSITIES), pa.string())


class _Knots:
    """A player's piecewise-linear cumulative time T(t) (ps) and distance D(t) (nm).

    Knot ``i`` is a shoe event at ``kt[i]``: ``kT``/``kD`` are T and D there (rows with ts < t),
    ``kj`` the distance jump the event itself adds (displacement mode) and ``ks`` the slope
    (nm/ps, speed mode) that holds until the next event, for at most ``gap`` ps.
    """

    __slots__ = ("kt", "kT", "kD", "kj", "ks")

    def __init__(self, kt=None, kT=None, kD=None, kj=None, ks=None):
        self.kt = np.zeros(0, np.int64) if kt is None else kt
        self.kT = np.zeros(0, np.int64) if kT is None else kT
        self.kD = np.zeros(0, np.float64) if kD is None else kD
        self.kj = np.zeros(0, np.float64) if kj is None else kj
        self.ks = np.zeros(0, np.float64) if ks is None else ks

    def eval(self, q: np.ndarray, gap: int, closed: bool = False):
        """(T, D, observed) at times ``q`` (state from rows with ts < q).

        A sample holds until the next one if that comes within ``gap``; a longer gap is
        unobserved (the sample before it holds for nothing). ``closed``: only pieces whose next
        sample is known count (window increments; the time after the last sample is 0);
        otherwise the open piece after the last sample counts while it is within ``gap`` (the
        live reading of q1a)."""
        kt = self.kt
        idx = np.searchsorted(kt, q, side="left") - 1
        valid = idx >= 0
        i = np.maximum(idx, 0)
        since = q - kt[i]
        if closed:
            nxt = np.where(i + 1 < len(kt), kt[np.minimum(i + 1, len(kt) - 1)], kt[i] + gap + 1)
            dt = np.where(valid & (i + 1 < len(kt)) & (nxt - kt[i] <= gap), since, 0)
        else:
            dt = np.where(valid & (since <= gap), since, 0)
        T = self.kT[i] + dt
        D = self.kD[i] + np.where(valid, self.kj[i], 0.0) + self.ks[i] * dt
        return T, D, valid & (since <= gap)

    def trim_before(self, t: int):
        """Drop knots not needed to evaluate times >= ``t``."""
        idx = int(np.searchsorted(self.kt, t, side="left")) - 1
        if idx > 0:
            for name in self.__slots__:
                setattr(self, name, getattr(self, name)[idx:])

    def state(self):
        return [self.kt, self.kT, self.kD, self.kj, self.ks]


class RunningOperator:
    """Query 1 front end: per-player segments, q1a rows and window increments.

    Args:
        config: the switches (:class:`~debs2013.config.Q1Config`).
        roster: sensor -> player table; the spec's metadata by default.
        emit: ``"q1a"`` (:data:`Q1A_SCHEMA`), ``"increments"`` (:data:`INCREMENT_SCHEMA`) or
            ``"both"`` (:data:`Q1_FRONT_SCHEMA`).

    The work is vectorised per player and batch (speeds, classes, cumulative time and distance,
    emission instants and slices); only the 1-second rule loops in Python, once per change of a
    player's intensity class.
    """

    def __init__(self, config: Q1Config = Q1Config(), roster: Roster | None = None,
                 emit: str = "both"):
        if emit not in ("q1a", "increments", "both"):
            raise SpecError(f"RunningOperator: emit={emit!r}; use 'q1a', 'increments' or 'both'")
        self.config = config
        self.roster = roster or Roster.from_metadata()
        self.emit = emit
        self.output_schema = {"q1a": Q1A_SCHEMA, "increments": INCREMENT_SCHEMA,
                              "both": Q1_FRONT_SCHEMA}[emit]
        self._edges = np.asarray(config.speed_edges_raw, dtype=np.float64)
        self._side = "left" if config.boundary == "le" else "right"
        self._players = [self._fresh() for _ in range(self.roster.n)]
        self._frontier = _NO     # every row with ts < frontier has been processed
        self._inst_done = _NO    # last q1a emission instant written
        self._inc_done = None    # slices before this grid point have been released
        self._ended = False
        self._q1a_held = _Rows.empty()  # q1a rows waiting for earlier closing rows (ts_stop order)
        self._last_ts = _NO      # the last event time seen: the end of the input's last rows

    # -- state ------------------------------------------------------------------------------
    @staticmethod
    def _fresh() -> dict:
        return {"v": [-1, -1], "px": [0, 0], "py": [0, 0], "has": [0, 0], "cx": 0.0, "cy": 0.0, "cls": -1,
                "I": -1, "S": _NO, "S_T": 0, "S_D": 0.0,
                "rc": -1, "rs": _NO, "P": _NO, "P_T": 0, "P_D": 0.0,
                "bounds": [], "inc_I": -1, "knots": _Knots()}

    def snapshot(self) -> bytes:
        players = []
        for p in self._players:
            d = {k: v for k, v in p.items() if k != "knots"}
            d["knots"] = p["knots"].state()
            players.append(d)
        return serde.pack_state("debs2013.q1/1", {"players": players,
                            "frontier": self._frontier, "inst_done": self._inst_done,
                            "inc_done": self._inc_done, "ended": self._ended,
                            "q1a_held": self._q1a_held.tolist(), "last_ts": self._last_ts})

    def restore(self, data: bytes) -> None:
        st = serde.unpack_state(data, "debs2013.q1/1")
        if len(st["players"]) != self.roster.n:
            raise StateError("RunningOperator snapshot is for a different roster")
        self._players = []
        for d in st["players"]:
            d["knots"] = _Knots(*d["knots"])
            d["bounds"] = [list(b) for b in d["bounds"]]
            self._players.append(d)
        self._frontier = st["frontier"]
        self._inst_done = st["inst_done"]
        self._inc_done = st["inc_done"]
        self._ended = st["ended"]
        self._q1a_held = _Rows.from_tuples(st.get("q1a_held", []))
        self._last_ts = st.get("last_ts", self._frontier)

    # -- protocol ---------------------------------------------------------------------------
    def on_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        batch, ts = time_ordered(batch)
        frontier = max(int(ts[-1]), self._frontier)
        self._last_ts = max(int(ts[-1]), self._last_ts)
        sid = column(batch, "sid")
        pl, slot = self.roster.lookup(sid)
        keep = (pl >= 0) & (slot <= 1)
        if "marker" in batch.schema.names:
            keep &= column(batch, "marker") == 0
        rows = np.nonzero(keep)[0]
        v = column(batch, "v")[rows]
        x = column(batch, "x")[rows]
        y = column(batch, "y")[rows]
        return self._advance(pl[rows], slot[rows], ts[rows], v, x, y, frontier)

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        watermark = int(watermark)
        if watermark <= self._frontier:
            return []
        e = np.zeros(0, np.int64)
        return self._advance(e, e, e, e, e, e, watermark)

    def on_end(self) -> list[pa.RecordBatch]:
        if self._ended or self._frontier == _NO:
            return []
        self._ended = True
        # the last event time, not the last watermark: whether the input's closing watermark
        # (its last time + 1) arrives before its end depends on the order in which a merge's
        # inputs end, which depends on the batch cuts
        end = self._last_ts if self._last_ts != _NO else self._frontier
        out_rows = []
        # q1a: the last instant, unless it is on the grid (already written)
        if self._inst_done == _NO or end > self._inst_done:
            t = np.array([end], np.int64)
            for i, p in enumerate(self._players):
                if p["I"] >= 0:
                    seg = ([_NO], [p["S"]], [p["I"]], [p["S_T"]], [p["S_D"]])
                    out_rows.append(self._instant_rows(i, p, t, seg))
        # undecided stretches stay with the current segment
        for p in self._players:
            p["P"] = _NO
        inc = self._release(end, final=True)
        out_rows = _Rows.concat([self._q1a_held] + out_rows)
        self._q1a_held = _Rows.empty()
        return self._build(out_rows, inc)

    @property
    def output_watermark(self) -> int | None:
        """Watermark hold: increments of slices not yet decided by the 1-second rule come later,
        stamped with their slice start, so nothing before ``_inc_done`` is final yet."""
        held = self._q1a_held.min_stop()
        if self.emit == "q1a":
            return held
        if held is None or self._inc_done is None:
            return self._inc_done
        return min(self._inc_done, held)

    # -- core -------------------------------------------------------------------------------
    def _advance(self, pl, slot, ts, v, x, y, frontier) -> list[pa.RecordBatch]:
        cfg = self.config
        if self._inc_done is None and len(ts):
            self._inc_done = int(floor_grid(int(ts[0]), cfg.origin, cfg.emit_period_ps))
        order = stable_order(pl)
        bounds = np.searchsorted(pl.take(order), np.arange(self.roster.n + 1)).tolist()
        # the columns in player order once (ndarray.take), each player's rows a slice of them
        # (no gather per player and column)
        cols = [a.take(order) for a in (ts, slot, v, x, y)]
        commits_by_player = {}
        for i, p in enumerate(self._players):
            lo, hi = bounds[i], bounds[i + 1]
            if hi > lo:
                commits = self._player_events(p, *(c[lo:hi] for c in cols))
            else:
                commits = []
            self._confirm(p, frontier, commits)
            if commits:  # the segment in force before this batch's first decision
                c = commits[0]
                seg0 = ([_NO], [c[6]], [c[5]], [c[7]], [c[8]])
            else:
                seg0 = ([_NO], [p["S"]], [p["I"]], [p["S_T"]], [p["S_D"]])
            commits_by_player[i] = (seg0, commits)
        self._frontier = frontier
        out_rows = []
        # q1a: closing rows and emission instants in (inst_done, frontier]
        if self.emit != "increments":
            period = cfg.emit_period_ps
            if self._inst_done == _NO and len(ts):
                self._inst_done = int(floor_grid(int(ts[0]), cfg.origin, period))
            first = self._inst_done + period if self._inst_done != _NO else frontier + 1
            inst = np.arange(first, frontier + 1, period, dtype=np.int64)
            for i, p in enumerate(self._players):
                seg0, commits = commits_by_player[i]
                closing = [self._row(dec, 0, i, S, B, oldI, B_D - S_D, B_T - S_T)
                           for dec, B, B_T, B_D, newI, oldI, S, S_T, S_D, closes in commits
                           if closes]
                if closing:
                    out_rows.append(_Rows.from_tuples(closing))
                if p["I"] < 0 or not len(inst):
                    continue
                seg = (seg0[0] + [c[0] for c in commits], seg0[1] + [c[1] for c in commits],
                       seg0[2] + [c[4] for c in commits], seg0[3] + [c[2] for c in commits],
                       seg0[4] + [c[3] for c in commits])
                out_rows.append(self._instant_rows(i, p, inst, seg))
            if len(inst):
                self._inst_done = int(inst[-1])
        # q1a rows go out in ts_stop order: a closing row's ts_stop is its segment's end, the
        # start of the pending stretch P (up to 1 s before the decision), so rows at or after
        # the earliest pending P wait for the decisions
        held = _Rows.concat([self._q1a_held] + out_rows)
        pend = [p["P"] for p in self._players if p["P"] != _NO]
        if pend:
            wait = held.cols[4] >= min(pend)
            out_rows, self._q1a_held = held.take(~wait), held.take(wait)
        else:
            out_rows, self._q1a_held = held, _Rows.empty()
        release = frontier
        for p in self._players:
            if p.get("first"):
                # the first segment is relabelled if its class changes within 1 s of its start:
                # its slices wait until that is decided
                nxt = p["P"] if p["P"] != _NO else frontier
                if nxt - p["S"] >= cfg.min_segment_ps:
                    p["first"] = False
                else:
                    release = min(release, p["S"])
            if p["P"] != _NO:
                release = min(release, p["P"])
            kt = p["knots"].kt
            if len(kt) and frontier - int(kt[-1]) <= cfg.max_gap_ps:
                # the piece after the player's last sample counts only if the next sample
                # comes within max_gap: undecided until then
                release = min(release, int(kt[-1]))
        release = int(floor_grid(release, cfg.origin, cfg.emit_period_ps))
        inc = self._release(release, final=False) if self._inc_done is not None else []
        return self._build(out_rows, inc)

    def _player_events(self, p, t, slot, v, x, y) -> list:
        """Append one player's shoe events (time order) to its knots; run the 1-second rule."""
        cfg = self.config
        n = len(t)
        # latest |v| (and position) of each shoe, forward-filled with the carried state
        pos = np.arange(n)
        had = int(p["has"][0]) + int(p["has"][1])
        sp = np.empty((2, n), np.float64)
        mx = np.empty((2, n), np.float64)
        my = np.empty((2, n), np.float64)
        has = np.empty((2, n), bool)
        for s in (0, 1):
            m = slot == s
            last = np.maximum.accumulate(np.where(m, pos, -1))
            got = last >= 0
            li = np.maximum(last, 0)
            sp[s] = np.where(got, v[li], p["v"][s])
            mx[s] = np.where(got, x[li], p["px"][s])
            my[s] = np.where(got, y[li], p["py"][s])
            has[s] = got | bool(p["has"][s])
            if got.any():
                j = int(last[-1])
                p["v"][s], p["px"][s], p["py"][s], p["has"][s] = int(v[j]), int(x[j]), int(y[j]), 1
        nboth = has[0].astype(np.int64) + has[1]
        speed = (np.where(has[0], sp[0], 0.0) + np.where(has[1], sp[1], 0.0)) / np.maximum(nboth, 1)
        cls = np.searchsorted(self._edges, speed, side=self._side).astype(np.int64)
        # knots
        kn = p["knots"]
        gap = cfg.max_gap_ps
        if cfg.distance == "speed":
            slope = speed * 1e-9  # µm/s -> nm/ps
            jump = np.zeros(n)
        else:
            slope = np.zeros(n)
            cx = (np.where(has[0], mx[0], 0.0) + np.where(has[1], mx[1], 0.0)) / np.maximum(nboth, 1)
            cy = (np.where(has[0], my[0], 0.0) + np.where(has[1], my[1], 0.0)) / np.maximum(nboth, 1)
            if len(kn.kt):
                px0, py0 = p["cx"], p["cy"]
                prev_t = np.concatenate([[kn.kt[-1]], t[:-1]])
                pcx = np.concatenate([[px0], cx[:-1]])
                pcy = np.concatenate([[py0], cy[:-1]])
                ok = (t - prev_t) <= gap
            else:
                pcx = np.concatenate([[cx[0]], cx[:-1]])
                pcy = np.concatenate([[cy[0]], cy[:-1]])
                ok = np.ones(n, bool)
            # no jump when a shoe reports for the first time (the mean switches sensors)
            ok &= nboth == np.concatenate([[had], nboth[:-1]])
            jump = np.where(ok, np.hypot(cx - pcx, cy - pcy) * 1e6, 0.0)  # mm -> nm
            p["cx"], p["cy"] = float(cx[-1]), float(cy[-1])
        if len(kn.kt):
            prev_t = np.concatenate([[kn.kt[-1]], t[:-1]])
            prev_s = np.concatenate([[kn.ks[-1]], slope[:-1]])
            prev_j = np.concatenate([[kn.kj[-1]], jump[:-1]])
            dts = np.where(t - prev_t <= gap, t - prev_t, 0)  # a longer gap is unobserved
            T = np.cumsum(np.concatenate([[kn.kT[-1]], dts]))[1:]
            D = np.cumsum(np.concatenate([[kn.kD[-1]], prev_j + prev_s * dts]))[1:]
        else:
            dts = np.where(np.diff(t) <= gap, np.diff(t), 0)
            T = np.concatenate([[0], np.cumsum(dts)]).astype(np.int64)
            D = np.cumsum(np.concatenate([[0.0], jump[:-1] + slope[:-1] * dts]))
        kn.kt = np.concatenate([kn.kt, t])
        kn.kT = np.concatenate([kn.kT, T.astype(np.int64)])
        kn.kD = np.concatenate([kn.kD, D])
        kn.kj = np.concatenate([kn.kj, jump])
        kn.ks = np.concatenate([kn.ks, slope])
        # the 1-second rule, once per class change
        prev = np.concatenate([[p["cls"]], cls[:-1]])
        changes = np.nonzero(cls != prev)[0]
        p["cls"] = int(cls[-1])
        commits: list = []
        nxt = cfg.short_stretch == "next"
        for c_i, s, k, sT, sD in zip(changes.tolist(), t[changes].tolist(), cls[changes].tolist(),
                                     T[changes].tolist(), D[changes].tolist()):
            self._confirm(p, s, commits)
            if p["I"] < 0:
                p["I"], p["S"], p["S_T"], p["S_D"] = k, s, sT, sD
                p["bounds"].append([s, k])
                commits.append((s, s, sT, sD, k, -1, _NO, 0, 0.0, False))
                p["first"] = True   # the first segment: no segment of its own if under 1 s
            elif s == p["S"]:
                # more shoe events at the segment's first instant: the last one sets the class
                p["I"], p["bounds"][-1][1], p["P"] = k, k, _NO
                if commits and commits[-1][1] == s and commits[-1][5] < 0:
                    commits[-1] = commits[-1][:4] + (k,) + commits[-1][5:]
            elif nxt:
                if p["P"] == _NO and k != p["I"]:
                    p["P"], p["P_T"], p["P_D"] = s, sT, sD
            elif k != p["I"]:
                p["P"], p["P_T"], p["P_D"] = s, sT, sD
            else:
                p["P"] = _NO
            p["rc"], p["rs"] = k, s
        return commits

    def _confirm(self, p, until: int, commits: list) -> None:
        """The current run has lasted ``min_segment_ps`` by ``until``: apply the decision."""
        if p["P"] == _NO or p["rs"] + self.config.min_segment_ps > until:
            return
        dec = p["rs"] + self.config.min_segment_ps
        if p["rc"] != p["I"]:
            B, B_T, B_D = p["P"], p["P_T"], p["P_D"]
            if p.get("first") and B - p["S"] < self.config.min_segment_ps:
                # The player's first class lasted less than 1 s: not a segment of its own (spec
                # §5); there is no segment before it, so its stretch goes to the class that
                # lasts, whose segment starts at the player's first sample. (Its increments are
                # held until this is decided: _advance.)
                commits.append((dec, p["S"], p["S_T"], p["S_D"], p["rc"], p["I"], p["S"],
                                p["S_T"], p["S_D"], False))
                p["bounds"][-1][1] = p["rc"]
                p["I"] = p["rc"]
            else:
                commits.append((dec, B, B_T, B_D, p["rc"], p["I"], p["S"], p["S_T"], p["S_D"],
                                True))
                p["bounds"].append([B, p["rc"]])
                p["I"], p["S"], p["S_T"], p["S_D"] = p["rc"], B, B_T, B_D
            p["first"] = False
        p["P"] = _NO

    def _instant_rows(self, i, p, inst, seg) -> "_Rows":
        """q1a rows of player ``i`` at the emission instants ``inst``: the segment in force at
        each (``seg``: decision times, starts, intensities, cumulative time and distance at the
        start), where the player is observed and has an intensity. Vectorised; the arithmetic
        is :meth:`_row`'s, element by element."""
        decs, starts, ints, sT, sD = (np.asarray(a) for a in seg)
        T, D, obs = p["knots"].eval(inst, self.config.max_gap_ps)
        j = np.searchsorted(decs, inst, side="right") - 1
        keep = obs & (ints[j] >= 0)
        t, j = inst[keep], j[keep]
        dist_nm = D[keep] - sD[j].astype(np.float64)
        time_ps = T[keep] - sT[j].astype(np.int64)
        with np.errstate(divide="ignore", invalid="ignore"):
            speed = np.where(time_ps > 0, (dist_nm * 1e-9) / (time_ps * 1e-12) * 3.6, 0.0)
        n = len(t)
        return _Rows([t, np.ones(n, np.int64), np.full(n, i, np.int64),
                      starts[j].astype(np.int64), t, ints[j].astype(np.int64),
                      dist_nm * 1e-9, speed])

    @staticmethod
    def _row(emit_t, order, i, start, stop, intensity, dist_nm, time_ps):
        speed = (dist_nm * 1e-9) / (time_ps * 1e-12) * 3.6 if time_ps > 0 else 0.0
        return (emit_t, order, i, start, stop, intensity, dist_nm * 1e-9, speed)

    def _release(self, upto: int, final: bool) -> list:
        """Increment rows of the slices in ``[inc_done, upto)`` (decided by now)."""
        if self.emit == "q1a" or self._inc_done is None or upto <= self._inc_done:
            if self._inc_done is not None and upto > self._inc_done:
                self._inc_done = upto
            return []
        cfg = self.config
        period = cfg.emit_period_ps
        grid = np.arange(self._inc_done, upto, period, dtype=np.int64)
        points_grid = np.append(grid, np.int64(upto))
        rows = []   # per player: (slice ts, player, intensity, time, distance) columns
        for i, p in enumerate(self._players):
            kn = p["knots"]
            if not len(kn.kt):
                continue
            bl = [b for b in p["bounds"] if b[0] < upto]
            bt = np.array([b[0] for b in bl], np.int64)
            if len(bt):
                # np.union1d's sort, as a merge of two sorted runs (timsort), then unique
                pts = np.concatenate((points_grid, bt))
                pts.sort(kind="stable")
                pts = pts[np.concatenate(([True], pts[1:] != pts[:-1]))]
            else:
                pts = points_grid
            T, D, _ = kn.eval(pts, cfg.max_gap_ps, closed=True)
            Dr = np.round(D).astype(np.int64)
            dT = np.diff(T)
            dD = np.diff(Dr)
            starts = pts[:-1]
            # intensity of each piece: the last boundary at or before its start
            bI = np.array([p["inc_I"]] + [b[1] for b in bl], np.int64)
            bi = np.searchsorted(bt, starts, side="right")
            inten = bI[bi]
            slice_ts = floor_grid(starts, cfg.origin, period)
            m = ((dT > 0) | (dD != 0)) & (inten >= 0)
            if m.any():
                rows.append([np.asarray(slice_ts[m], np.int64), np.full(int(m.sum()), i, np.int64),
                             inten[m], dT[m].astype(np.int64), dD[m]])
            if bl:
                p["inc_I"] = bl[-1][1]
                p["bounds"] = p["bounds"][len(bl):]
            kn.trim_before(upto)
        self._inc_done = upto
        # several pieces of one slice with the same intensity cannot occur (boundaries change
        # the intensity); order by slice, then player (a stable sort: the pieces of a player's
        # slice keep their time order)
        if not rows:
            return []
        cols = [np.concatenate(c) for c in zip(*rows)]
        order = np.lexsort((cols[1], cols[0]))
        return [c[order] for c in cols]

    def _build(self, q1a: "_Rows", inc: list) -> list[pa.RecordBatch]:
        """The output batch: q1a rows by ts_stop, closing rows first, then player (a stable
        sort), then the increments (``inc``: columns from :meth:`_release`)."""
        names = pa.array(self.roster.names, pa.string())
        q1a = q1a.take(np.lexsort((q1a.cols[2], q1a.cols[1], q1a.cols[4])))
        if self.emit == "q1a":
            return [_q1a_batch(q1a.cols, names)] if len(q1a) else []
        if self.emit == "increments":
            return [_inc_batch(inc, names)] if inc else []
        n1, n2 = len(q1a), (len(inc[0]) if inc else 0)
        if not n1 and not n2:
            return []
        q = q1a.cols
        e = np.zeros(0, np.int64)
        ist, ipl, ik, idt, idd = inc if inc else (e, e, e, e, e)

        def with_nulls(values, typ, before: bool):
            nulls = pa.nulls(n1 if before else n2, typ)
            a = pa.array(values, typ)
            return pa.concat_arrays([nulls, a] if before else [a, nulls])

        arrays = [
            pa.array(["q1a", "increment"], pa.string()).take(
                pa.array(np.repeat(np.array([0, 1], np.int64), [n1, n2]))),
            pa.array(np.concatenate([q[4], ist]), pa.int64()),
            with_nulls(q[3], pa.int64(), False),
            with_nulls(q[4], pa.int64(), False),
            names.take(pa.array(np.concatenate([q[2], ipl]))),
            _INTENSITY_NAMES.take(pa.array(np.concatenate([q[5], ik]))),
            pa.array(np.concatenate([q[5], ik]).astype(np.int8), pa.int8()),
            with_nulls(q[6], pa.float64(), False),
            with_nulls(q[7], pa.float64(), False),
            with_nulls(idt, pa.int64(), True),
            with_nulls(idd, pa.int64(), True),
        ]
        return [pa.RecordBatch.from_arrays(arrays, schema=Q1_FRONT_SCHEMA)]


class _Rows:
    """q1a rows as columns: emission time, order (0 a closing row, 1 an instant's), player
    index, ts_start, ts_stop, intensity index, distance (m), speed (km/h)."""

    __slots__ = ("cols",)
    _TYPES = (np.int64, np.int64, np.int64, np.int64, np.int64, np.int64, np.float64, np.float64)

    def __init__(self, cols):
        self.cols = cols

    @classmethod
    def empty(cls) -> "_Rows":
        return cls([np.zeros(0, t) for t in cls._TYPES])

    @classmethod
    def from_tuples(cls, rows) -> "_Rows":
        if not len(rows):
            return cls.empty()
        return cls([np.array(c, t) for c, t in zip(zip(*rows), cls._TYPES)])

    @classmethod
    def concat(cls, parts) -> "_Rows":
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        return cls([np.concatenate(c) for c in zip(*(p.cols for p in parts))])

    def __len__(self) -> int:
        return len(self.cols[0])

    def take(self, index) -> "_Rows":
        return _Rows([c[index] for c in self.cols])

    def min_stop(self) -> int | None:
        return int(self.cols[4].min()) if len(self) else None

    def tolist(self) -> list:
        """Rows as lists of Python numbers (the snapshot's form)."""
        return [list(r) for r in zip(*(c.tolist() for c in self.cols))]


def _q1a_batch(cols, names: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([
        pa.array(cols[3], pa.int64()), pa.array(cols[4], pa.int64()),
        names.take(pa.array(cols[2])), _INTENSITY_NAMES.take(pa.array(cols[5])),
        pa.array(cols[6], pa.float64()), pa.array(cols[7], pa.float64()),
    ], schema=Q1A_SCHEMA)


def _inc_batch(cols, names: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([
        pa.array(cols[0], pa.int64()), names.take(pa.array(cols[1])),
        pa.array(cols[2].astype(np.int8), pa.int8()), pa.array(cols[3], pa.int64()),
        pa.array(cols[4], pa.int64()),
    ], schema=INCREMENT_SCHEMA)


# ------------------------------------------------------------------------------------------------
# The window UDA


class RunningStats(Aggregate):
    """Per-intensity time and distance of a player's increments (the q1b UDA).

    Bind it to the increment columns ``(intensity, time, distance)``::

        epic.AggSpec(RunningStats(), ("intensity", "time", "distance"), "stats")

    State: ``[times, distances]``, two int64 arrays of 6 (ps, nm): add and remove are exact, so
    sliding windows never drift. ``merge`` adds them. The result is a struct of the twelve q1b
    fields (seconds and metres); :func:`q1b_rows` turns window output into q1b rows.
    """

    name = "running_stats"

    def init(self):
        return [np.zeros(6, np.int64), np.zeros(6, np.int64)]

    def add(self, state, e):
        k, t, d = e
        times, dists = state
        times = times.copy()
        dists = dists.copy()
        times[int(k)] += int(t)
        dists[int(k)] += int(d)
        return [times, dists]

    def remove(self, state, e):
        k, t, d = e
        return self.add(state, (k, -int(t), -int(d)))

    def merge(self, older, newer):
        return [older[0] + newer[0], older[1] + newer[1]]

    def add_batch(self, state, values):
        k, t, d = (np.asarray(a).astype(np.int64) for a in values)
        times = state[0].copy()
        dists = state[1].copy()
        np.add.at(times, k, t)
        np.add.at(dists, k, d)
        return [times, dists]

    def remove_batch(self, state, values):
        k, t, d = (np.asarray(a).astype(np.int64) for a in values)
        return self.add_batch(state, (k, -t, -d))

    # group form: each increment is a one-hot (time, distance) vector of 12, so the window
    # engine runs on prefix sums (epic.windows.prefix) with no Python per emitted row
    def lift(self, values):
        k, t, d = (np.asarray(a).astype(np.int64) for a in values)
        out = np.zeros((len(k), 12), np.int64)
        rows = np.arange(len(k))
        out[rows, k] = t
        out[rows, 6 + k] = d
        return out

    def lower(self, sums, counts):
        # one contiguous row per field (times in s, distances in m), in the output's order
        cols = np.empty((12, len(sums)), np.float64)
        np.multiply(sums[:, :6].T, 1e-12, out=cols[0::2])
        np.multiply(sums[:, 6:].T, 1e-9, out=cols[1::2])
        arrays = [pa.array(c) for c in cols]
        names = [f"{name}_{what}" for name in C.INTENSITIES for what in ("time", "distance")]
        return pa.StructArray.from_arrays(arrays, names=names)

    def result(self, state):
        times, dists = state
        out = {}
        for j, name in enumerate(C.INTENSITIES):
            out[f"{name}_time"] = int(times[j]) * 1e-12
            out[f"{name}_distance"] = int(dists[j]) * 1e-9
        return out

    def output_type(self, input_types: Sequence[pa.DataType]) -> pa.DataType:
        return pa.struct([pa.field(f, pa.float64()) for f in Q1B_FIELDS])


def q1b_rows(window_batch: pa.RecordBatch, stats: str = "stats") -> pa.RecordBatch:
    """Window output (key ``player_id``, ``window_end``, struct column ``stats``) as q1b rows:
    ``ts`` = ``window_end``, then the twelve per-intensity fields (s and m)."""
    st = window_batch.column(window_batch.schema.get_field_index(stats))
    arrays = [window_batch.column(window_batch.schema.get_field_index("window_end")),
              window_batch.column(window_batch.schema.get_field_index("player_id"))]
    arrays += [st.field(f) for f in Q1B_FIELDS]
    return pa.RecordBatch.from_arrays(arrays, schema=Q1B_SCHEMA)
