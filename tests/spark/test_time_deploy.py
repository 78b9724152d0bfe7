"""`epic deploy` = `epic run` under disorder and lateness, for 1, 2 and 3 partitions, fused or not.

The streams are generated (seeded) with ties and rows out of order within and beyond the
windows' lateness, so late-row decisions, origins and count-window order are exercised; every
partition of a keyed window must follow the *stream's* clock (docs/windows.md, "Event time").
"""

from __future__ import annotations

import json
import random

import pytest

import epic
from epic.spark.runtime import deploy
from epic.testing import rows_key

pytestmark = pytest.mark.spark

SCHEMA = {"k": "int64", "ts": "int64", "v": "int64"}


def _rows(seed: int, n: int = 240) -> list[dict]:
    rnd = random.Random(seed)
    t, out = 0, []
    for _ in range(n):
        t += rnd.choice([0, 1, 1, 2, 3])
        back = rnd.choice([0, 0, 0, 1, 2, 5, 12])
        out.append({"k": rnd.randrange(5), "ts": t - back, "v": rnd.randrange(-5, 10)})
    return out


def _events(t: epic.Topology, rows: list[dict], batch_rows: int):
    """The tests' source: ``rows`` in batches of ``batch_rows``."""
    data = list(rows)

    def gen():
        yield from data

    return t.source("events", epic.iterator_source(gen, schema=SCHEMA, time="ts", unit="s",
                                                   batch_rows=batch_rows))


def _tape(t: epic.Topology, name: str, stream, time: str, extra: tuple = ()):
    """A global process node numbering the rows it meets, in order (``seq``), with each row's
    key, its ``time`` as ``t``, and the ``extra`` columns: what a consumer saw, and when."""
    class Tape(epic.Processor):
        def init(self, key):
            return 0

        def on_element(self, state, row, ctx):
            ctx.emit({"seq": state, "k": row["k"], "t": row[time], **{c: row[c] for c in extra}})
            return state + 1

    schema = {"seq": "int64", "k": "int64", "t": "int64", **{c: "int64" for c in extra}}
    return t.process(name, stream, Tape(), schema=schema, time="t")


def _topology(rows: list[dict], batch_rows: int) -> epic.Topology:
    t = epic.Topology("time_deploy")
    s = _events(t, rows, batch_rows)
    w = t.window("late1", s, epic.tumbling(10, origin=0, lateness=1), key="k",
                 aggregates=[epic.count("n"), epic.sum("v")])
    t.sink("late1_out", w, epic.collect_sink())
    t.sink("late1_rows", t.late("late1_late", w), epic.collect_sink())
    f = t.window("few", s, epic.few_time(6, 3, 1, lateness=4), key="k",
                 aggregates=[epic.count("n"), epic.max("v")])
    t.sink("few_out", f, epic.collect_sink())
    c = t.window("cnt", s, epic.tumbling_count(3, ef=1, lateness=2), key="k",
                 aggregates=[epic.sum("v")])
    t.sink("cnt_out", c, epic.collect_sink())
    pw = epic.predicate_window(lambda cur: cur["v"] % 3 == 0, lambda first, cur: cur["v"] > 5,
                               kind="sliding", lateness=3)
    p = t.window("runs", s, pw, key="k", aggregates=[epic.count("n"), epic.collect("v")])
    t.sink("runs_out", p, epic.collect_sink())
    shown = t.window("few_shown", s, epic.few_time(4, 2, 1, lateness=2), key="k",
                     aggregates=[epic.sum("v")])
    t.sink("show", shown, epic.console_sink())
    t.sink("runs_show", p, epic.console_sink(limit=3))
    return t


def _shown(text: str, sink: str = "show") -> list[str]:
    """The lines console sink ``sink`` printed (a header line, then its rows)."""
    return [x for x in text.splitlines() if x.startswith(f"[{sink}] ")]


CASES = [
    # the repro: (1,5) is late for tumbling(10, lateness=1) on every partition count
    ([{"k": k, "ts": ts, "v": 1} for k, ts in [(0, 0), (1, 0), (0, 10), (1, 5), (0, 20),
                                                 (1, 20)]], 2),
    (_rows(7), 37),
]


# every partition count once, fused and unfused each with several partitions (the default tier
# runs the fused case; the unfused ones, ~17 s each, are slow)
@pytest.mark.parametrize("partitions,fuse", [pytest.param(1, False, marks=pytest.mark.slow),
                                             pytest.param(3, False, marks=pytest.mark.slow),
                                             (2, True)])
def test_deploy_equals_run_under_disorder(spark, tmp_path, capsys, partitions, fuse):
    """Generated disordered keyed streams: the deploy's rows equal epic run's, per sink (in
    order after a time or count window, the console's lines too)."""
    for i, (rows, batch_rows) in enumerate(CASES):
        capsys.readouterr()
        want = epic.run(_topology(rows, batch_rows))
        printed = capsys.readouterr().out
        result = deploy(_topology(rows, batch_rows), str(tmp_path / f"wd{i}"), spark=spark,
                        timeout=240, fuse=fuse, partitions=partitions, batch_rows=batch_rows,
                        conf={"spark.sql.session.timeZone": "UTC"})
        assert result.status["state"] == "finished"
        # the console prints epic run's lines: its header, then its rows in order
        got = capsys.readouterr().out
        assert len(_shown(printed)) > 3 and _shown(got) == _shown(printed), i
        # a limit: the header and that many rows (the predicate window's order is its own)
        limited = [_shown(x, "runs_show") for x in (got, printed)]
        assert [len(x) for x in limited] == ([4, 4] if i else [0, 0]), i
        assert limited[0][:1] == limited[1][:1], i
        # --conf reaches the session and the resolved settings are recorded in the work dir
        recorded = json.loads((tmp_path / f"wd{i}" / "spark-conf.json").read_text())
        assert recorded["spark.sql.session.timeZone"] == "UTC"
        for sink in ("late1_out", "few_out", "cnt_out", "late1_rows", "runs_out"):
            got = result.collected[sink].to_pylist()
            exp = want.collected[sink].to_pylist()
            assert sorted(got, key=rows_key) == sorted(exp, key=rows_key), (i, sink)
            if sink in ("late1_out", "few_out", "cnt_out"):
                # a collect sink after a time or count window merges the partitions' parts
                assert got == exp, (i, sink)
        if i == 0:
            k1 = [r for r in want.collected["late1_out"].to_pylist()
                  if r["k"] == 1 and r["window_start"] == 0]
            assert [r["n"] for r in k1] == [1]
            assert want.nodes["late1"].late_rows == 1
            assert [(r["k"], r["ts"], r["late_watermark"]) for r in
                    result.collected["late1_rows"].to_pylist()] == [(1, 5, 9)]
        # late counts: the deploy reports epic run's
        for node in ("late1", "few", "cnt", "runs"):
            assert result.status["late_rows"][node] == want.nodes[node].late_rows, (i, node)


def _downstream(rows: list[dict], batch_rows: int) -> epic.Topology:
    """Keyed time and count windows (every key on the same instants: ties across partitions)
    feeding order-sensitive consumers: a tape that numbers the rows it meets, a global count
    window collecting keys, a global time window (its late rows), a keyed window after a map."""
    t = epic.Topology("downstream")
    s = _events(t, rows, batch_rows)
    w = t.window("tumble", s, epic.tumbling(4, origin=0, lateness=2), key="k",
                 aggregates=[epic.count("n"), epic.sum("v")])
    t.sink("tape1", _tape(t, "tape_tumble", w, "window_end", ("n",)), epic.collect_sink())
    g = t.window("by_count", w, epic.tumbling_count(3), aggregates=[epic.collect("k")])
    t.sink("by_count_out", g, epic.collect_sink())
    tw = t.window("by_time", w, epic.tumbling(8, origin=0), late="drop",
                  aggregates=[epic.count("n"), epic.collect("k", name="ks")])
    t.sink("by_time_out", tw, epic.collect_sink())
    f = t.window("few", s, epic.few_time(6, 3, 1, origin=0, lateness=3), key="k",
                 aggregates=[epic.count("n")])
    m = t.map("few_plus", f, lambda b: b)
    t.sink("tape2", _tape(t, "tape_few", m, "window_end", ("n",)), epic.collect_sink())
    again = t.window("again", m, epic.tumbling(12, origin=0), key="k",
                     aggregates=[epic.sum("n", name="total")])
    t.sink("again_out", again, epic.collect_sink())
    c = t.window("cnt", s, epic.tumbling_count(2, lateness=2), key="k",
                 aggregates=[epic.sum("v")])
    t.sink("cnt_pairs_out", t.window("cnt_pairs", c, epic.tumbling_count(2),
                                 aggregates=[epic.collect("k")]), epic.collect_sink())
    return t


@pytest.mark.parametrize("partitions,fuse", [
    pytest.param(2, False, marks=pytest.mark.slow),   # ~27 s: 18 micro-batches of 7 queries
    pytest.param(2, True, marks=pytest.mark.slow),    # ~14 s (session 36: the default tier at
    pytest.param(3, True, marks=pytest.mark.slow)])   # 585-614 s of its 600)
def test_consumers_of_keyed_windows_see_run_order(spark, tmp_path, partitions, fuse):
    """Over several partitions each task writes its keys' window rows; the next query reads
    them merged into epic run's order (by time, then the key's first on-time row), so the
    rows a consumer meets, in order, are epic run's: the tapes' numbering, the global count
    windows, the global time window's late rows, a keyed window after a map (docs/windows.md:
    late decisions never depend on partitions)."""
    rows = _rows(19, 400)
    want = epic.run(_downstream(rows, 23))
    assert want.nodes["by_time"].late_rows == 0
    result = deploy(_downstream(rows, 23), str(tmp_path / "wd"), spark=spark, timeout=240,
                    fuse=fuse, partitions=partitions, batch_rows=23)
    assert result.status["state"] == "finished"
    for sink in ("tape1", "by_count_out", "by_time_out", "tape2", "cnt_pairs_out"):
        got = result.collected[sink].to_pylist()
        exp = want.collected[sink].to_pylist()
        assert len(exp) > 10, sink
        assert got == exp, sink   # in order: one task writes them
    got = result.collected["again_out"].to_pylist()
    exp = want.collected["again_out"].to_pylist()
    assert sorted(got, key=rows_key) == sorted(exp, key=rows_key)
    for node in ("tumble", "few", "cnt", "by_time", "by_count", "again", "cnt_pairs"):
        assert result.status["late_rows"].get(node, 0) == want.nodes[node].late_rows, node


def _unranked(rows: list[dict], batch_rows: int) -> epic.Topology:
    """Keyed nodes that do not rank their rows (a predicate window, a keyed process node)
    feeding order-sensitive consumers, and one written straight to a sink."""
    t = epic.Topology("unranked")

    class Keep(epic.Processor):   # keyed: passes rows on, numbering them per key
        def init(self, key):
            return 0

        def on_element(self, state, row, ctx):
            ctx.emit({"k": row["k"], "ts": row["ts"], "v": state})
            return state + 1

    s = _events(t, rows, batch_rows)
    pw = epic.predicate_window(lambda cur: cur["v"] % 3 == 0, lambda first, cur: cur["v"] > 5,
                               kind="sliding", lateness=3)
    p = t.window("runs", s, pw, key="k", aggregates=[epic.count("n")])
    renamed = t.map("runs_ts", p, lambda b: b.rename_columns(
        ["k", "window_start", "window_end", "final", "ts", "n"]))
    t.sink("runs_tape", _tape(t, "tape_runs", renamed, "ts"), epic.collect_sink())
    kp = t.process("keep", s, Keep(), schema=SCHEMA, key="k", time="ts")
    t.sink("keep_tape", _tape(t, "tape_keep", kp, "ts"), epic.collect_sink())
    t.sink("keep_counts_out", t.window("keep_counts", kp, epic.tumbling(10, origin=0),
                                   aggregates=[epic.count("n"), epic.last("k")]),
           epic.collect_sink())
    return t


# both ~16 s: the slow tier (the default tier was at 600 s in session 34)
@pytest.mark.parametrize("fuse", [pytest.param(False, marks=pytest.mark.slow),
                                  pytest.param(True, marks=pytest.mark.slow)])
def test_keyed_nodes_without_ranks_run_in_one_task_for_other_queries(spark, tmp_path, fuse):
    """With --partitions 2, a keyed predicate window or process node whose rows another query
    reads runs in one task (its consumers then read epic run's order, which no merge of parts
    could restore): tapes and a global window equal epic run's in order."""
    from epic.spark.planner import DeployPlan

    rows = _rows(23, 300)
    plan = DeployPlan(_unranked(rows, 17), str(tmp_path / "probe"), partitions=2, fuse=fuse,
                      batch_rows=17)
    parts = {u[0][0].name: plan.unit_partitions(u) for u in plan.units}
    assert parts.get("runs", parts.get("events")) == 1 and parts.get("keep", 1) == 1, parts
    want = epic.run(_unranked(rows, 17))
    result = deploy(_unranked(rows, 17), str(tmp_path / "wd"), spark=spark, timeout=240,
                    fuse=fuse, partitions=2, batch_rows=17)
    assert result.status["state"] == "finished"
    for sink in ("runs_tape", "keep_tape", "keep_counts_out"):
        got = result.collected[sink].to_pylist()
        exp = want.collected[sink].to_pylist()
        assert len(exp) > 10, sink
        assert got == exp, sink


def _split_merge(rows: list[dict], batch_rows: int) -> epic.Topology:
    """One source split in two and merged back (the founding systems' replicas), as it is and
    through a map per output (queries of their own), with every late policy a merge has, and a
    keyed window and a process tape after a merge: the merges' frontiers decide which rows are
    late, so they must see each step's watermarks of both inputs before its rows."""
    t = epic.Topology("split_merge")
    data = list(rows)
    s = t.source("events", epic.iterator_source(lambda: iter(data), schema=SCHEMA, time="ts",
                                                unit="s", batch_rows=batch_rows, lateness=2))
    lo, hi = t.splitstream("split", s, 2, lambda i, r: (r["v"] < 3) == (i == 0))
    lo2 = t.map_rows("lo_m", lo, lambda r: {**r, "v": r["v"] * 10})
    hi2 = t.map_rows("hi_m", hi, lambda r: {**r, "v": r["v"] * 100})
    m_emit = t.merge("m_emit", [lo2, hi2], late="emit")
    t.sink("m_emit_out", m_emit, epic.collect_sink())
    t.sink("m_drop_out", t.merge("m_drop", [lo, hi], late="drop"), epic.collect_sink())
    w = t.window("m_win", m_emit, epic.tumbling(5, lateness=1), key="k", late="drop",
                 aggregates=[epic.count("n"), epic.sum("v", name="sv")])
    t.sink("m_win_out", w, epic.collect_sink())
    t.sink("tape", _tape(t, "m_tape", m_emit, "ts", ("v",)), epic.collect_sink())
    return t


def _split_gap() -> epic.Topology:
    """A source batch whose rows all go to one output of a split: the other output's
    watermark after it must reach the merges before the next batch's rows. Merged as they
    are, through a map on one side, and as outputs of two splits of the source."""
    rows = [{"ts": 10, "o": 0}, {"ts": 10, "o": 1},   # the source's watermark is 10 after it
            {"ts": 5, "o": 0}, {"ts": 12, "o": 0},    # no row for output 1; ts 5 is late
            {"ts": 20, "o": 1}, {"ts": 21, "o": 0},
            {"ts": 30, "o": 1}, {"ts": 31, "o": 1},   # no row for output 0
            {"ts": 25, "o": 1}, {"ts": 40, "o": 0}]   # ts 25 is late
    t = epic.Topology("split_gap")
    s = t.source("ev", epic.iterator_source(rows, schema={"ts": "int64", "o": "int64"},
                                            time="ts", unit="s", batch_rows=2))
    a, b = t.splitstream("split", s, 2, lambda i, e: e["o"] == i)
    c, d = t.splitstream("again", s, 2, lambda i, e: e["o"] == i)
    t.sink("m_out", t.merge("m", [a, b], late="drop"), epic.collect_sink())
    a2 = t.map_rows("a2", a, lambda r: {**r, "o": r["o"] + 10})
    t.sink("m_map_out", t.merge("m_map", [a2, b], late="emit"), epic.collect_sink())
    t.sink("m_two_out", t.merge("m_two", [a, d], late="drop"), epic.collect_sink())
    t.sink("c_out", c, epic.collect_sink())
    return t


@pytest.mark.parametrize("partitions,fuse", [pytest.param(1, False, marks=pytest.mark.slow),
                                             (2, True)])   # ~12 s unfused, ~3 s fused
def test_merge_of_split_outputs_sees_the_watermark_of_an_output_without_rows(
        spark, tmp_path, partitions, fuse):
    """A split's outputs carry one watermark: after a source batch that sent rows to one
    output only, epic run's merge has the other output's watermark too and finds the next
    batch's rows behind it late. The deploy learned it only from that output's next rows
    (found by an independent check in session 37: the late row was kept)."""
    want = epic.run(_split_gap())
    assert {n: want.nodes[n].late_rows for n in ("m", "m_map", "m_two")} == \
        {"m": 2, "m_map": 2, "m_two": 2}
    result = deploy(_split_gap(), str(tmp_path / "wd"), spark=spark, timeout=240, fuse=fuse,
                    partitions=partitions)
    assert result.status["state"] == "finished"
    for sink in ("m_out", "m_map_out", "m_two_out"):
        assert result.collected[sink].to_pylist() == want.collected[sink].to_pylist(), sink
    for node in ("m", "m_map", "m_two"):
        assert result.status["late_rows"][node] == want.nodes[node].late_rows, node


# ~25 s each: the fused case in the default tier
@pytest.mark.parametrize("partitions,fuse", [(3, True),
                                             pytest.param(2, False, marks=pytest.mark.slow)])
def test_split_and_merge_of_one_source_equal_run(spark, tmp_path, partitions, fuse):
    """A merge of one source's split outputs finds epic run's rows late (it applied one
    input's watermark of a step after the other input's rows of that step, and took the
    steps of a faster input before a slower one had delivered them), and everything after it
    follows: same files in the same order, same late counts."""
    rows, batch_rows = _rows(11, 600), 37
    want = epic.run(_split_merge(rows, batch_rows))
    assert want.nodes["m_drop"].late_rows > 10 and want.nodes["m_win"].late_rows > 0
    result = deploy(_split_merge(rows, batch_rows), str(tmp_path / "wd"), spark=spark,
                    timeout=240, fuse=fuse, partitions=partitions, batch_rows=4 * batch_rows)
    assert result.status["state"] == "finished"
    for sink in ("m_emit_out", "m_drop_out", "m_win_out", "tape"):
        assert result.collected[sink].to_pylist() == want.collected[sink].to_pylist(), sink
    for node in ("m_emit", "m_drop", "m_win"):
        assert result.status["late_rows"][node] == want.nodes[node].late_rows, node


def _window_timers(rows: list[dict], batch_rows: int) -> epic.Topology:
    """A slack source, a keyed FEW window with lateness, and a global process node that counts
    the window rows and sets timers after some of them: each timer row shows how many window
    rows the node had met when the timer fired."""
    t = epic.Topology("window_timers")
    src = t.source("events", epic.iterator_source(list(rows), schema=SCHEMA, time="ts", unit="s",
                                                  batch_rows=batch_rows, slack=20))
    w = t.window("w", src, epic.few_time(40, 20, 10, lateness=20), key="k",
                 aggregates=[epic.count("n"), epic.sum("v", name="sv")], late="drop")

    def init(key):
        return {"n": 0, "s": 0}

    def on_element(state, row, ctx):
        state["n"] += 1
        state["s"] += int(row["sv"])
        if state["n"] % 3 == 1:
            ctx.set_timer(int(row["window_end"]) + 25)
        ctx.emit({"ts": int(row["window_end"]), "kind": 0, "n": state["n"], "s": state["s"]})
        return state

    def on_timer(state, time, ctx):
        ctx.emit({"ts": time, "kind": 2 if ctx.at_end else 1, "n": state["n"], "s": state["s"]})
        return state

    p = t.process("p", w, epic.processor(init=init, on_element=on_element, on_timer=on_timer),
                  schema={"ts": "int64", "kind": "int64", "n": "int64", "s": "int64"}, time="ts")
    t.sink("p_out", p, epic.collect_sink())
    return t


@pytest.mark.parametrize("partitions,fuse", [pytest.param(1, False, marks=pytest.mark.slow),
                                             (2, True)])
def test_timers_after_a_window_fire_where_run_fires_them(spark, tmp_path, partitions, fuse):
    """The runner forwards a node's watermark after a watermark it applied, never after rows:
    a window whose hold moved with a step's rows forwards that at the next watermark. The
    deploy forwarded it between the step's output rows, so a process node after the window
    fired its timers before window rows that epic run gives it first (found by an independent
    differential check in session 38: timer rows with 41 window rows counted instead of 46)."""
    rows, batch_rows = _rows(38, 400), 17
    want = epic.run(_window_timers(rows, batch_rows))
    got_want = want.collected["p_out"].to_pylist()
    assert sum(r["kind"] == 1 for r in got_want) > 20
    result = deploy(_window_timers(rows, batch_rows), str(tmp_path / "wd"), spark=spark,
                    timeout=240, fuse=fuse, partitions=partitions)
    assert result.status["state"] == "finished"
    assert result.collected["p_out"].to_pylist() == got_want
