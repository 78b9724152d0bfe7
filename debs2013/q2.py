"""Query 2, ball possession: the ball-hitter node (:class:`BallHitter`), the possession node
(:class:`PossessionOperator`) and the team-window UDA (:class:`TeamShare`).

Dataflow (EPIC, paper figure 3)::

    game stream ─► BallHitter ─► ball events ─┬─► PossessionOperator ─┬─► q2playerpossession
                                              │                       └─► team slices ─► few_time
                                              │                            (60|300|1200 s, ef, ef)
                                              │                            / landmark + TeamShare
                                              └─► ShotOperator (q4) ─► q4

**BallHitter input**: :data:`debs2013.common.GAME_SCHEMA` (sensor rows merged with interruption
markers by ``ts``). **Output**: :data:`BALL_EVENT_SCHEMA`, in stream order, one row per

* ``kind = 0`` (:data:`BALL`): a row of the ball in play (only with ``ball_rows=True``);
* ``kind = 1`` (:data:`HIT`): a row of the ball in play that is a new hit, with ``player_id``,
  ``team`` and ``attack`` (+1: the hitter's team attacks goal 1 at +y, -1: goal 2 at -y);
* ``kind = 2`` (:data:`OUT`): the row where the ball in play left the field;
* ``kind = 3`` / ``4`` (:data:`STOP` / :data:`RESUME`): interruption markers, passed through;
* ``kind = 5`` (:data:`TIME`): a time mark, the last row of an input batch (ball fields zero)
  when no other output row reaches its ``ts``: the output is complete up to there. It moves the
  possession node's time forward with the batch's newest arrival (its delay stamp), so team
  slices are released, and stamped, as soon as the input passes them, also while no ball row
  goes out (without query 4, or with no ball in play). While the ball's data may still stop
  (the hold below) the mark stays at the ball's last row.

Ball columns (``sid, x, y, z, v, a, vx .. az``) are the raw sensor fields (zeros on markers).

**Rules** (spec §2, §3, §6; switches in :class:`~debs2013.config.Q2Config`):

* Ball in play: the ball sensor inside the FAQ rectangle. When it reports a position outside, no
  ball is in play (an ``OUT`` row) until some ball sensor reports a position inside; that ball is
  then in play.
* Ball data stops: when the ball in play has no row for more than ``ball_timeout_ps`` (0.1 s;
  it reports every 0.5 ms), no ball is in play from its last row on: an ``OUT`` row stamped with
  that last row's time and values follows it (e.g. the last ~159 s of the real first half have
  no ball data, spec §1.4; possession stops there, not at the next interruption). The end of the
  input stops it too. It is emitted once the gap is known (input or watermark past the last row
  + ``ball_timeout_ps``); the node holds its output watermark at that last row meanwhile. A
  marker inside the timeout after the last row is emitted before it (it ends possession itself).
* Hit: a row of the ball in play, game not stopped, ``|a| >= 55 m/s²``, and at least one player
  shoe sensor (hands with ``include_hands``) within 1 m (3D) at its latest position (the last row
  of that sensor before this one in the stream); the closest sensor's player gets it (ties: the
  first player in metadata order).
* Dropping policy (epsilon = 0.2 s): a qualifying row attributed to player P less than
  ``epsilon_ps`` after P's last counted hit (``epsilon_from="hit"``) is the same contact and is
  not a hit; with ``"last_event"`` the time is measured from P's last qualifying row, so a contact
  is a chain of qualifying rows. A qualifying row of another player is always a new hit.
* Stopped game: from a ``STOP`` marker to the next ``RESUME``. No hits are detected then.
* Sides: at each kick-off (``kickoffs``) the running mean ``y`` of each goalkeeper's shoe rows
  since the kick-off decides: the team whose goalkeeper stands at the larger ``y`` defends goal 1
  (+y) and attacks goal 2 (-y). Before any goalkeeper row: ``default_attack``.

Example:
    >>> BallHitter().output_schema.names[:4]
    ['ts', 'kind', 'player_id', 'team']
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from debs2013 import constants as C
from debs2013.common import (DictStateOperator, Roster, column, floor_grid, stable_order,
                             time_ordered)
from debs2013.config import Q2Config
from epic import serde
from epic.aggregates import Aggregate
from epic.errors import SpecError

__all__ = ["BALL", "HIT", "OUT", "STOP", "RESUME", "TIME", "BALL_EVENT_SCHEMA", "BallHitter",
           "PossessionOperator", "PLAYER_POSSESSION_SCHEMA", "TEAM_SLICE_SCHEMA",
           "POSSESSION_FRONT_SCHEMA", "TeamShare", "team_rows", "TEAM_POSSESSION_SCHEMA",
           "in_field"]

BALL, HIT, OUT, STOP, RESUME, TIME = 0, 1, 2, 3, 4, 5
_BALL_FIELDS = ("sid", "x", "y", "z", "v", "a", "vx", "vy", "vz", "ax", "ay", "az")

BALL_EVENT_SCHEMA = pa.schema(
    [pa.field("ts", pa.int64()), pa.field("kind", pa.int8()), pa.field("player_id", pa.string()),
     pa.field("team", pa.string()), pa.field("attack", pa.int8())]
    + [pa.field(f, pa.int64()) for f in _BALL_FIELDS],
    metadata={"epic.event_time": "ts", "epic.time_unit": "ps"})

_NO = -(2**62)


def in_field(x, y, inclusive: bool = True):
    """Mask of positions (mm) inside the FAQ field rectangle (spec §3)."""
    f = C.FIELD
    if inclusive:
        return (x >= f["x_min"]) & (x <= f["x_max"]) & (y >= f["y_min"]) & (y <= f["y_max"])
    return (x > f["x_min"]) & (x < f["x_max"]) & (y > f["y_min"]) & (y < f["y_max"])


def _next(positions: np.ndarray, i: int) -> int:
    """The first position >= i, or a huge number."""
    k = np.searchsorted(positions, i, side="left")
    return int(positions[k]) if k < len(positions) else 1 << 62


class BallHitter(DictStateOperator):
    """The ball-hitter node: ball in play, hits with the dropping policy, sides, markers.

    Args:
        config: :class:`~debs2013.config.Q2Config` (hit rule, epsilon, field, sides).
        roster: sensor -> player table; the spec's metadata by default.
        ball_rows: also emit every row of the ball in play (``kind = 0``; query 4 needs them).
            Without them the first row of the first ball in play is still emitted, so the
            possession node's team slices start at the same time with or without query 4.

    Vectorised per batch: field tests, the stopped flag, hit candidates (``|a|`` over the
    threshold) and their distances to every shoe's latest position. Python loops run only over
    changes of the ball in play and over qualifying rows (the epsilon rule).
    """

    state_format = "debs2013.hitter/1"

    def __init__(self, config: Q2Config = Q2Config(), roster: Roster | None = None,
                 ball_rows: bool = True):
        self.config = config
        self.roster = roster or Roster.from_metadata()
        self.ball_rows = ball_rows
        self.output_schema = BALL_EVENT_SCHEMA
        slots = (0, 1, 2, 3) if config.include_hands else (0, 1)
        self._sids = np.array([s for s in range(len(self.roster.player_of))
                               if self.roster.player_of[s] >= 0
                               and self.roster.slot_of[s] in slots], np.int64)
        key = self.roster.player_of[self._sids] * 8 + self.roster.slot_of[self._sids]
        self._sids = self._sids[np.argsort(key, kind="stable")]
        self._sid_player = self.roster.player_of[self._sids].astype(np.int64)
        # goalkeeper shoe sensors as column indices into self._sids (always tracked for sides)
        self._gk_cols = [[k for k, s in enumerate(self._sids.tolist())
                          if self.roster.player_of[s] == g and self.roster.slot_of[s] <= 1]
                         for g in self.roster.goalkeepers]
        self._state = {
            "cur": -1, "stopped": False,
            "pos": np.full((len(self._sids), 3), 0, np.int64),
            "seen": np.zeros(len(self._sids), bool),
            "ref": [_NO] * self.roster.n,       # epsilon reference per player
            "half": -1, "gk_sum": [0, 0], "gk_n": [0, 0],
            "last": _NO, "last_row": [0] * len(_BALL_FIELDS),  # the ball in play's last row
        }

    def on_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        n = batch.num_rows
        if n == 0:
            return []
        cfg = self.config
        st = self._state
        batch, ts = time_ordered(batch)
        sid = column(batch, "sid")
        marker = column(batch, "marker") if "marker" in batch.schema.names else np.zeros(n, np.int64)
        x, y, z = column(batch, "x"), column(batch, "y"), column(batch, "z")
        a = column(batch, "a")
        is_ball = self.roster.is_ball(sid) & (marker == 0)
        # -- ball in play --------------------------------------------------------------------
        ball_pos = np.nonzero(is_ball)[0]
        inside = in_field(x[ball_pos], y[ball_pos], cfg.field_inclusive)
        inside_pos = ball_pos[inside]
        outside_of, rows_of = {}, {}
        owner = np.full(n, -1, np.int64)
        out_rows = []
        lost = []   # (position key, ts, ball row values): the ball in play's data stopped
        timeout = cfg.ball_timeout_ps
        cur = st["cur"]
        i = 0
        while True:
            if cur < 0:
                j = _next(inside_pos, i)
                if j >= n:
                    break
                cur = int(sid[j])
                st["last"] = _NO
                i = j
            else:
                if cur not in outside_of:
                    outside_of[cur] = ball_pos[(sid[ball_pos] == cur) & ~inside]
                    rows_of[cur] = ball_pos[sid[ball_pos] == cur]
                j = _next(outside_of[cur], i)
                # the ball's data stops: a gap of more than `timeout` between its rows
                r = rows_of[cur]
                seg = r[np.searchsorted(r, i):np.searchsorted(r, min(j, n))]
                if len(seg) and st["last"] != _NO:
                    prev = np.concatenate([[st["last"]], ts[seg[:-1]]])
                elif len(seg):
                    prev = np.concatenate([[ts[seg[0]]], ts[seg[:-1]]])
                else:
                    prev = np.zeros(0, np.int64)
                gap = np.nonzero(ts[seg] - prev > timeout)[0]
                if len(gap):
                    k = int(gap[0])
                    at = int(seg[k])
                    owner[i:at] = cur
                    if k > 0:
                        lost.append((2 * int(seg[k - 1]) + 2, int(ts[seg[k - 1]]),
                                     self._row_values(batch, int(seg[k - 1]))))
                    else:
                        lost.append((-1, int(st["last"]), st["last_row"]))
                    cur = -1
                    i = at
                    continue
                if len(seg):
                    st["last"] = int(ts[seg[-1]])
                    st["last_row"] = self._row_values(batch, int(seg[-1]))
                owner[i:min(j, n)] = cur
                if j >= n:
                    break
                out_rows.append(j)
                cur = -1
                i = j + 1
        if cur >= 0 and st["last"] != _NO and int(ts[-1]) - st["last"] > timeout:
            # no row of the ball in play since: its data stopped at its last row
            seen = np.nonzero(is_ball & (sid == cur) & (owner == cur))[0]
            lost.append((2 * int(seen[-1]) + 2 if len(seen) else -1, int(st["last"]),
                         st["last_row"]))
            cur = -1
        st["cur"] = cur
        in_play = is_ball & (sid == owner)
        # -- stopped flag -----------------------------------------------------------------------
        mpos = np.nonzero(marker > 0)[0]
        stopped = np.full(n, bool(st["stopped"]))
        if len(mpos):
            last = np.maximum.accumulate(np.where(marker > 0, np.arange(n), -1))
            stopped = np.where(last >= 0, marker[np.maximum(last, 0)] == 1, bool(st["stopped"]))
            st["stopped"] = bool(marker[mpos[-1]] == 1)
        # -- hits -------------------------------------------------------------------------------
        thr = cfg.hit_acc_raw
        strong = (a >= thr) if cfg.acc_inclusive else (a > thr)
        cand = np.nonzero(in_play & strong & ~stopped)[0]
        srt = stable_order(sid)
        lo = np.searchsorted(sid[srt], self._sids, side="left")
        hi = np.searchsorted(sid[srt], self._sids, side="right")
        sensor_rows = [srt[l:h] for l, h in zip(lo.tolist(), hi.tolist())]
        winners = self._closest(cand, sensor_rows, x, y, z)
        hit_player = self._epsilon(winners, ts)
        attack = self._sides(hit_player, ts, sensor_rows, y)
        # -- output ---------------------------------------------------------------------------
        kind = np.full(n, -1, np.int8)
        if self.ball_rows:
            kind[in_play] = BALL
        elif not st.get("started") and in_play.any():
            # Without query 4 only the first row of a ball in play goes out: it starts the
            # possession node's time (its team slices begin there), as all the rows would.
            # Before, Q2 alone began its team slices at the first hit: 154 fewer rows per
            # window on a generated game than with Q4 on.
            kind[int(np.argmax(in_play))] = BALL
        if in_play.any():
            st["started"] = True
        if out_rows:
            kind[np.asarray(out_rows)] = OUT
        hits = np.array(sorted(hit_player), np.int64)
        if len(hits):
            kind[hits] = HIT
        kind[marker == 1] = STOP
        kind[marker == 2] = RESUME
        rows = np.nonzero(kind >= 0)[0]
        # the time mark: the last input row's ts, held at the ball's last row while its data
        # may still stop (an OUT row stamped there may follow)
        mark = int(ts[-1])
        if st["cur"] >= 0 and st["last"] != _NO:
            mark = min(mark, int(st["last"]))
        emitted = [int(ts[rows[-1]])] if len(rows) else []
        emitted += [t for _, t, _ in lost]
        tick = st.get("started", False) and mark > max(emitted, default=_NO)
        if not len(rows) and not lost and not tick:
            return []
        names, teams = self.roster.names, self.roster.teams
        pid = [None] * len(rows)
        team = [None] * len(rows)
        att = np.zeros(len(rows), np.int8)
        # each hit's place among the output rows (sorted): no lookup table of every output row
        # (with query 4 every row of the ball in play is one)
        hit_rows = list(hit_player)
        places = np.searchsorted(rows, np.asarray(hit_rows, np.int64)).tolist()
        for k, r in zip(places, hit_rows):
            p = hit_player[r]
            pid[k] = names[p]
            team[k] = teams[p]
            att[k] = attack[r]
        out_ts = ts[rows]
        out_kind = kind[rows]
        fields = np.stack([column(batch, f)[rows] for f in _BALL_FIELDS], axis=1) if len(
            rows) else np.zeros((0, len(_BALL_FIELDS)), np.int64)
        if lost:
            # an OUT row at the ball's last row (its values), placed right after that row
            key = np.concatenate([2 * rows + 1, [k for k, _, _ in lost]])
            order = np.argsort(key, kind="stable")
            out_ts = np.concatenate([out_ts, [t for _, t, _ in lost]])[order]
            out_kind = np.concatenate([out_kind, np.full(len(lost), OUT, np.int8)])[order]
            fields = np.concatenate([fields, np.array([v for _, _, v in lost], np.int64)])[order]
            pid = [(pid + [None] * len(lost))[k] for k in order.tolist()]
            team = [(team + [None] * len(lost))[k] for k in order.tolist()]
            att = np.concatenate([att, np.zeros(len(lost), np.int8)])[order]
        if tick:
            out_ts = np.append(out_ts, mark)
            out_kind = np.append(out_kind, np.int8(TIME))
            fields = np.concatenate([fields, np.zeros((1, len(_BALL_FIELDS)), np.int64)])
            pid, team = list(pid) + [None], list(team) + [None]
            att = np.append(att, np.int8(0))
        return [self._batch(out_ts, out_kind, pid, team, att, fields)]

    @staticmethod
    def _batch(ts, kind, pid, team, att, fields) -> pa.RecordBatch:
        arrays = [pa.array(ts, pa.int64()), pa.array(kind, pa.int8()),
                  pa.array(pid, pa.string()), pa.array(team, pa.string()),
                  pa.array(att, pa.int8())]
        for k in range(len(_BALL_FIELDS)):
            arrays.append(pa.array(fields[:, k], pa.int64()))
        return pa.RecordBatch.from_arrays(arrays, schema=BALL_EVENT_SCHEMA)

    @staticmethod
    def _row_values(batch, r: int) -> list:
        # one row's values: no conversion of whole columns
        return [int(batch.column(f)[r].as_py()) for f in _BALL_FIELDS]

    def _lost_now(self, now: int, final: bool) -> list[pa.RecordBatch]:
        """An OUT row at the ball in play's last row when its data has stopped by ``now``."""
        st = self._state
        if st["cur"] < 0 or st["last"] == _NO:
            return []
        if not final and now - st["last"] <= self.config.ball_timeout_ps:
            return []
        st["cur"] = -1
        return [self._batch(np.array([st["last"]], np.int64), np.array([OUT], np.int8), [None],
                            [None], np.zeros(1, np.int8),
                            np.array([st["last_row"]], np.int64))]

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        return self._lost_now(int(watermark), final=False)

    def on_end(self) -> list[pa.RecordBatch]:
        # the end of the input: the ball's data has stopped
        return self._lost_now(0, final=True)

    @property
    def output_watermark(self) -> int | None:
        """Watermark hold: while a ball is in play, an OUT row stamped with its last row may
        still come (its data stopping is only known ``ball_timeout_ps`` later)."""
        st = self._state
        return st["last"] if st["cur"] >= 0 and st["last"] != _NO else None

    def _closest(self, cand, sensor_rows, x, y, z):
        """[(row, player)] for candidate rows with a player sensor within range (the closest)."""
        st = self._state
        nS = len(self._sids)
        if len(cand):
            px = np.empty((len(cand), nS), np.float64)
            py = np.empty_like(px)
            pz = np.empty_like(px)
            ok = np.empty((len(cand), nS), bool)
            for k, rows in enumerate(sensor_rows):
                idx = np.searchsorted(rows, cand, side="left") - 1
                got = idx >= 0
                if len(rows):
                    r = rows[np.maximum(idx, 0)]
                    px[:, k] = np.where(got, x[r], st["pos"][k, 0])
                    py[:, k] = np.where(got, y[r], st["pos"][k, 1])
                    pz[:, k] = np.where(got, z[r], st["pos"][k, 2])
                else:
                    px[:, k], py[:, k], pz[:, k] = st["pos"][k]
                ok[:, k] = got | bool(st["seen"][k])
            dx = px - x[cand][:, None]
            dy = py - y[cand][:, None]
            d2 = dx * dx + dy * dy
            if self.config.distance_3d:
                dz = pz - z[cand][:, None]
                d2 = d2 + dz * dz
            lim = float(self.config.hit_dist_mm) ** 2
            d2 = np.where(ok & (d2 <= lim), d2, np.inf)
            best = np.argmin(d2, axis=1)  # sensors are in player order: ties go to the first
            found = np.isfinite(d2[np.arange(len(cand)), best])
            winners = [(int(c), int(self._sid_player[b])) for c, b, f in
                       zip(cand.tolist(), best.tolist(), found.tolist()) if f]
        else:
            winners = []
        for k, rows in enumerate(sensor_rows):
            if len(rows):
                r = rows[-1]
                st["pos"][k] = (x[r], y[r], z[r])
                st["seen"][k] = True
        return winners

    def _epsilon(self, winners, ts) -> dict:
        """The dropping policy over qualifying rows: row -> player for counted hits."""
        st = self._state
        eps = self.config.epsilon_ps
        chain = self.config.epsilon_from == "last_event"
        out = {}
        ref = st["ref"]
        for r, p in winners:
            t = int(ts[r])
            if ref[p] != _NO and t - ref[p] < eps:
                if chain:
                    ref[p] = t
                continue
            out[r] = p
            ref[p] = t
        return out

    def _sides(self, hits: dict, ts, sensor_rows, y) -> dict:
        """row -> attacked goal (+1 / -1) of the hitter's team, from the goalkeepers' mean y."""
        cfg = self.config
        st = self._state
        kick = np.asarray(cfg.kickoffs, np.int64)
        gk_rows = [np.sort(np.concatenate([sensor_rows[k] for k in ks]))
                   for ks in self._gk_cols]
        done = [0, 0]

        def consume(upto_row, upto_ts):
            """Add goalkeeper rows before ``upto_row`` to the sums of their half."""
            for g in (0, 1):
                rows = gk_rows[g]
                j = int(np.searchsorted(rows, upto_row, side="left"))
                seg = rows[done[g]:j]
                if len(seg):
                    h = np.searchsorted(kick, ts[seg], side="right") - 1
                    for hh in np.unique(h).tolist():
                        self._new_half(hh)
                        m = h == hh
                        st["gk_sum"][g] += int(y[seg[m]].sum())
                        st["gk_n"][g] += int(m.sum())
                done[g] = j
            self._new_half(int(np.searchsorted(kick, upto_ts, side="right")) - 1)

        out = {}
        for r in sorted(hits):
            consume(r, int(ts[r]))
            h = max(st["half"], 0)
            if st["gk_n"][0] and st["gk_n"][1]:
                ma = st["gk_sum"][0] / st["gk_n"][0]
                mb = st["gk_sum"][1] / st["gk_n"][1]
                a_att = -1 if ma > mb else +1  # A's keeper at the larger y: A defends goal 1
                pair = (a_att, -a_att)
            else:
                pair = cfg.default_attack[min(h, len(cfg.default_attack) - 1)]
            out[r] = pair[0] if self.roster.teams[hits[r]] == "A" else pair[1]
        consume(len(ts), int(ts[-1]))
        return out

    def _new_half(self, h):
        st = self._state
        if h > st["half"]:
            st["half"] = h
            st["gk_sum"] = [0, 0]
            st["gk_n"] = [0, 0]


# --------------------------------------------------------------------------------------------
# Possession


PLAYER_POSSESSION_SCHEMA = pa.schema([
    pa.field("ts", pa.int64()), pa.field("player_id", pa.string()),
    pa.field("time", pa.float64()), pa.field("hits", pa.int64()),
], metadata={"epic.event_time": "ts", "epic.time_unit": "ps"})

#: Team possession per slice ``[ts, ts + team_period_ps)``: ps of team A and of team B.
TEAM_SLICE_SCHEMA = pa.schema([
    pa.field("ts", pa.int64()), pa.field("time_a", pa.int64()), pa.field("time_b", pa.int64()),
], metadata={"epic.event_time": "ts", "epic.time_unit": "ps"})

#: ``emit="both"``: player rows (``kind = "player"``) and slices (``kind = "slice"``).
POSSESSION_FRONT_SCHEMA = pa.schema([
    pa.field("kind", pa.string()), pa.field("ts", pa.int64()),
    pa.field("player_id", pa.string()), pa.field("time", pa.float64()),
    pa.field("hits", pa.int64()), pa.field("time_a", pa.int64()), pa.field("time_b", pa.int64()),
], metadata={"epic.event_time": "ts", "epic.time_unit": "ps"})


class PossessionOperator:
    """The player-possession node: per-player possession time and hits, and team slices.

    Args:
        config: :class:`~debs2013.config.Q2Config` (possession_time, hits_count, team_time,
            team_period_ps, origin).
        roster: player names and teams.
        emit: ``"players"`` (:data:`PLAYER_POSSESSION_SCHEMA`), ``"team"``
            (:data:`TEAM_SLICE_SCHEMA`) or ``"both"`` (:data:`POSSESSION_FRONT_SCHEMA`).

    Input: :data:`BALL_EVENT_SCHEMA` (``BALL`` rows only move time forward). A possession starts
    with a hit and ends at a hit by another player, an ``OUT`` row or a ``STOP`` marker.
    ``possession_time="first_to_last"`` adds, on each further hit of the same player, the time
    since his previous hit (one touch = zero time); ``"until_end"`` adds the whole time from the
    first hit to the end. A player row (``time`` in s, ``hits``) is written whenever his values
    change. Team slices cover every slice from the first event on, released once the input time
    passes the slice end (rows with zero time included, so windows emit steadily).
    """

    def __init__(self, config: Q2Config = Q2Config(), roster: Roster | None = None,
                 emit: str = "both"):
        if emit not in ("players", "team", "both"):
            raise SpecError(f"PossessionOperator: emit={emit!r}; use 'players', 'team' or "
                            "'both'")
        self.config = config
        self.roster = roster or Roster.from_metadata()
        self.emit = emit
        self.output_schema = {"players": PLAYER_POSSESSION_SCHEMA, "team": TEAM_SLICE_SCHEMA,
                              "both": POSSESSION_FRONT_SCHEMA}[emit]
        self._index = {n: i for i, n in enumerate(self.roster.names)}
        n = self.roster.n
        self._s = {"owner": -1, "last": _NO, "first": _NO, "time": [0] * n, "hits": [0] * n,
                   "team": -1, "team_since": _NO, "intervals": [], "inc_done": None,
                   "frontier": _NO}

    def snapshot(self) -> bytes:
        return serde.pack_state("debs2013.possession/1", self._s)

    def restore(self, data: bytes) -> None:
        self._s = serde.unpack_state(data, "debs2013.possession/1")

    def on_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        ts = column(batch, "ts")
        kind = column(batch, "kind")
        ev = np.nonzero(kind >= HIT)[0]
        pids = batch.column(batch.schema.get_field_index("player_id"))
        s = self._s
        if s["inc_done"] is None:
            s["inc_done"] = int(floor_grid(int(ts.min()), self.config.origin,
                                           self.config.team_period_ps))
        rows = []
        for r in ev.tolist():
            k = int(kind[r])
            t = int(ts[r])
            if k == HIT:
                self._hit(t, self._index[pids[r].as_py()], rows)
            elif k in (OUT, STOP):
                self._end(t, rows)
        return self._out(rows, max(int(ts.max()), s["frontier"]), final=False)

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        if self._s["inc_done"] is None or watermark <= self._s["frontier"]:
            return []
        return self._out([], int(watermark), final=False)

    def on_end(self) -> list[pa.RecordBatch]:
        if self._s["inc_done"] is None:
            return []
        return self._out([], self._s["frontier"], final=True)

    # -- the possession state machine -------------------------------------------------------------
    def _add(self, p, a, b, rows, t):
        if b > a:
            self._s["time"][p] += b - a
            if self.config.team_time == "player":
                self._s["intervals"].append([a, b, 0 if self.roster.teams[p] == "A" else 1])

    def _hit(self, t, p, rows):
        s, cfg = self._s, self.config
        owner = s["owner"]
        changed = {p}
        if owner == p:
            self._add(p, s["last"], t, rows, t)
        else:
            if owner >= 0 and cfg.possession_time == "until_end":
                self._add(owner, s["last"], t, rows, t)
                changed.add(owner)
            s["owner"] = p
            s["first"] = t
        s["last"] = t
        if cfg.hits_count == "contact" or owner != p:
            s["hits"][p] += 1
        team = 0 if self.roster.teams[p] == "A" else 1
        if cfg.team_time == "until_end" and team != s["team"]:
            self._team_end(t)
            s["team"], s["team_since"] = team, t
        for q in sorted(changed, key=lambda q: (q != owner, q)):
            rows.append((t, q, s["time"][q], s["hits"][q]))

    def _end(self, t, rows):
        s, cfg = self._s, self.config
        owner = s["owner"]
        if owner >= 0:
            if cfg.possession_time == "until_end":
                self._add(owner, s["last"], t, rows, t)
                rows.append((t, owner, s["time"][owner], s["hits"][owner]))
            s["owner"] = -1
        self._team_end(t)

    def _team_end(self, t):
        s = self._s
        if s["team"] >= 0 and t > s["team_since"]:
            s["intervals"].append([s["team_since"], t, s["team"]])
        s["team"], s["team_since"] = -1, _NO

    # -- output -----------------------------------------------------------------------------------
    def _out(self, rows, frontier, final) -> list[pa.RecordBatch]:
        s, cfg = self._s, self.config
        s["frontier"] = max(s["frontier"], frontier)
        period = cfg.team_period_ps
        upto = s["frontier"] if final else int(floor_grid(s["frontier"], cfg.origin, period))
        slices = []
        if self.emit != "players" and upto > s["inc_done"]:
            grid = np.arange(s["inc_done"], upto, period, dtype=np.int64)
            ends = np.minimum(grid + period, upto)
            iv = list(s["intervals"])
            if s["team"] >= 0:
                iv.append([s["team_since"], upto, s["team"]])
            tot = np.zeros((2, len(grid)), np.int64)
            for a, b, team in iv:
                lo = np.maximum(grid, a)
                hi = np.minimum(ends, b)
                tot[team] += np.maximum(hi - lo, 0)
            slices = list(zip(grid.tolist(), tot[0].tolist(), tot[1].tolist()))
            s["inc_done"] = upto
            s["intervals"] = [i for i in s["intervals"] if i[1] > upto]
        if self.emit == "players":
            s["intervals"] = []
        names = self.roster.names
        if self.emit == "players":
            if not rows:
                return []
            return [pa.RecordBatch.from_arrays([
                pa.array([r[0] for r in rows], pa.int64()),
                pa.array([names[r[1]] for r in rows], pa.string()),
                pa.array([r[2] * 1e-12 for r in rows], pa.float64()),
                pa.array([r[3] for r in rows], pa.int64())], schema=PLAYER_POSSESSION_SCHEMA)]
        if self.emit == "team":
            if not slices:
                return []
            return [pa.RecordBatch.from_arrays([
                pa.array([r[0] for r in slices], pa.int64()),
                pa.array([r[1] for r in slices], pa.int64()),
                pa.array([r[2] for r in slices], pa.int64())], schema=TEAM_SLICE_SCHEMA)]
        if not rows and not slices:
            return []
        n1, n2 = len(rows), len(slices)
        return [pa.RecordBatch.from_arrays([
            pa.array(["player"] * n1 + ["slice"] * n2, pa.string()),
            pa.array([r[0] for r in rows] + [r[0] for r in slices], pa.int64()),
            pa.array([names[r[1]] for r in rows] + [None] * n2, pa.string()),
            pa.array([r[2] * 1e-12 for r in rows] + [None] * n2, pa.float64()),
            pa.array([r[3] for r in rows] + [None] * n2, pa.int64()),
            pa.array([None] * n1 + [r[1] for r in slices], pa.int64()),
            pa.array([None] * n1 + [r[2] for r in slices], pa.int64())],
            schema=POSSESSION_FRONT_SCHEMA)]


# --------------------------------------------------------------------------------------------
# The team window UDA


TEAM_POSSESSION_SCHEMA = pa.schema([
    pa.field("ts", pa.int64()), pa.field("team_id", pa.string()),
    pa.field("time", pa.float64()), pa.field("time_percent", pa.float64()),
], metadata={"epic.event_time": "ts", "epic.time_unit": "ps"})


class TeamShare(Aggregate):
    """Possession time of team A and team B over a window of team slices (q2 team UDA).

    Bind it to ``("time_a", "time_b")`` of :data:`TEAM_SLICE_SCHEMA` on an unkeyed window.
    State ``[a, b]`` in ps (exact ints); the result is ``{"time_a": s, "time_b": s}``;
    :func:`team_rows` makes the two q2 rows per emission.
    """

    name = "team_share"

    def init(self):
        return [0, 0]

    def add(self, state, e):
        return [state[0] + int(e[0]), state[1] + int(e[1])]

    def remove(self, state, e):
        return [state[0] - int(e[0]), state[1] - int(e[1])]

    def merge(self, older, newer):
        return [older[0] + newer[0], older[1] + newer[1]]

    def add_batch(self, state, values):
        a, b = values
        return [state[0] + int(np.asarray(a, np.int64).sum()),
                state[1] + int(np.asarray(b, np.int64).sum())]

    def remove_batch(self, state, values):
        a, b = values
        return [state[0] - int(np.asarray(a, np.int64).sum()),
                state[1] - int(np.asarray(b, np.int64).sum())]

    def result(self, state):
        return {"time_a": state[0] * 1e-12, "time_b": state[1] * 1e-12}

    # group form (prefix-sum windows, epic.windows.prefix)
    def lift(self, values):
        a, b = values
        return np.stack([np.asarray(a, np.int64), np.asarray(b, np.int64)], axis=1)

    def lower(self, sums, counts):
        return pa.StructArray.from_arrays(
            [pa.array(sums[:, 0].astype(np.float64) * 1e-12),
             pa.array(sums[:, 1].astype(np.float64) * 1e-12)], names=["time_a", "time_b"])

    def output_type(self, input_types):
        return pa.struct([pa.field("time_a", pa.float64()), pa.field("time_b", pa.float64())])


def team_rows(window_batch: pa.RecordBatch, share: str = "share") -> pa.RecordBatch:
    """Window output (``window_end``, struct column ``share``) as q2 team rows: per emission one
    row for team A and one for team B; ``time_percent = 100 * time / (A + B)`` (0 when both
    are 0)."""
    ends = window_batch.column(window_batch.schema.get_field_index("window_end"))
    st = window_batch.column(window_batch.schema.get_field_index(share))
    n = len(ends)
    ts = np.repeat(ends.to_numpy(zero_copy_only=False).astype(np.int64, copy=False), 2)
    # per emission A then B: the times interleaved, each divided as Python would (100 * v / tot)
    time = np.stack([st.field("time_a").to_numpy(zero_copy_only=False),
                     st.field("time_b").to_numpy(zero_copy_only=False)], axis=1)
    tot = time.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(tot > 0, 100.0 * time / np.where(tot > 0, tot, 1.0), 0.0)
    team = pa.DictionaryArray.from_arrays(np.tile(np.array([0, 1], np.int32), n),
                                          _TEAM_NAMES).cast(pa.string())
    return pa.RecordBatch.from_arrays([pa.array(ts, pa.int64()), team,
                                       pa.array(time.ravel(), pa.float64()),
                                       pa.array(pct.ravel(), pa.float64())],
                                      schema=TEAM_POSSESSION_SCHEMA)


_TEAM_NAMES = pa.array(["A", "B"], pa.string())
