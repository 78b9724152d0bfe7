"""`epic deploy --fuse`: chains of nodes in one query give `epic run`'s output, also after SIGKILLs.

Reuses the helpers of test_deploy (examples, window transcripts) and test_recovery (crash points).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import epic
from epic.cli import load_topology
from epic.spark.planner import DeployPlan, group_name, plan_groups, plan_modes, unit_name
from epic.spark.runtime import deploy

from test_deploy import EXAMPLES, ROOT, TRANSCRIPTS, _csv_lines, _same_rows, _transcript_topology
from test_recovery import _lines, reference  # noqa: F401 - fixture

pytestmark = pytest.mark.spark


def _deploy(topo, wd, out, crash=None, params=(), opts=(), trace=None, fuse=True):
    """test_recovery's subprocess deploy, with --fuse unless ``fuse`` is False (``params``:
    more topology parameters; ``opts``: more deploy options; ``trace``: an EPIC_TRACE file)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("EPIC_CRASH_AT", "EPIC_DRIVER_PGID", "EPIC_TRACE")}
    if crash:
        env["EPIC_CRASH_AT"] = crash
    if trace:
        env["EPIC_TRACE"] = str(trace)
    cmd = [sys.executable, "-m", "epic.spark.cli", "deploy", str(topo), "--workdir", str(wd),
           "--batch-rows", "500", "--no-progress", "--timeout", "240",
           *(("--fuse",) if fuse else ()), *opts, "--",
           "--out", str(out), *params]
    return subprocess.run(cmd, env=env, start_new_session=True, capture_output=True, text=True,
                          timeout=300)


def test_plan_groups():
    """Chains fuse; splitstreams, merges and a stateful node after a keyed one start new queries;
    global stateful nodes chain."""
    t = load_topology(ROOT / "topologies" / "sensor_averages.py", params={"out": "/tmp/x"})
    groups = [group_name(g) for g in plan_groups(t)]
    assert len(groups) < len(t.nodes)
    for topo, params in (("sensor_averages", {}), ("parallel_split", {"replicas": "2"})):
        t = load_topology(ROOT / "topologies" / f"{topo}.py", params={**params, "out": "/tmp/x"})
        modes = plan_modes(t)
        for g in plan_groups(t):
            held = [modes[n.name] for n in g if modes.get(n.name, "stateless") != "stateless"]
            assert held == ["keyed"] or set(held) <= {"global"}, (topo, group_name(g))
        assert [len(g) for g in plan_groups(t, fuse=False)] == [1] * len(t.nodes)
    t = load_topology(ROOT / "topologies" / "parallel_split.py",
                      params={"replicas": "2", "out": "/tmp/x"})
    # the round-robin merge, its global reduce window and the sink: one query
    assert "rr-merge+rr-reduce+combined" in [group_name(g) for g in plan_groups(t)]
    chain = load_topology(_topology_file("/tmp/x", "chain", CHAIN), params={"out": "/tmp/x"})
    assert [group_name(g) for g in plan_groups(chain)] == ["readings+sorter+stamp+counts+out"]
    # DEBS Q4 alone: the splitter has one output, so the merge, the splitter, the ball hitter and
    # the shot detector (all global) and the CSV sink are one query; with all four queries the
    # splitter has four outputs and ends its group.
    debs = ROOT / "topologies" / "debs2013.py"
    q4 = load_topology(debs, params={"input": "game.csv", "out": "/tmp/x", "queries": "q4"})
    assert [group_name(g) for g in plan_groups(q4)][-1] == \
        "merge_by_time+debs_splitter+q2_ball_hitter+q4_shots+q4_csv"
    full = load_topology(debs, params={"input": "game.csv", "out": "/tmp/x"})
    assert "merge_by_time+debs_splitter" in [group_name(g) for g in plan_groups(full)]
    # ... and the groups after it that run in one task are attached to its query: Q1's running
    # process, Q2 and Q4 whole, Q3's heat map; the keyed windows of Q1 and Q3 stay queries.
    plan = DeployPlan(full, "/tmp/x/wd", partitions=1, fuse=True, batch_rows=1000)
    # The two readers feed only the merge: its query plans them (inlets, plan_inlets).
    assert [plan.unit_name(u) for u in plan.units] == [
        "event_reader+mark_events+interrupt_reader+merge_by_time+debs_splitter",
        "q1b_1M_window+q1b_1M_rows+q1b_1M_csv~4", "q3_1M_window+q3_1M_rows+q3_1M_csv~4"]
    # Over 2 partitions the keyed windows' rows reach their flat maps through topics, merged
    # into epic run's order (planner.split_ranked): the maps and sinks are queries of their own.
    plan2 = DeployPlan(full, "/tmp/x/wd", partitions=2, fuse=True, batch_rows=1000)
    two = [plan2.unit_name(u) for u in plan2.units]
    assert two[:3] == ["event_reader+mark_events+interrupt_reader+merge_by_time+debs_splitter",
                       "q1b_1M_window~4", "q1b_1M_rows+q1b_1M_csv"], two
    assert "q3_1M_window~4" in two and "q3_landmark_rows+q3_landmark_csv" in two, two
    assert [unit_name(u) for u in plan.units][0] == "merge_by_time+debs_splitter"
    assert {"q1_running", "q2_ball_hitter", "q4_shots", "q2team_landmark_window", "q3_heatmap",
            "q1a_csv"} <= set(plan.attached)
    assert not {"q1b_1M_window", "q3_1M_window"} & set(plan.attached)
    assert ("debs_splitter", 0) in plan.inner_streams
    assert plan.node_topics(full.node("q1_split")) == [plan.stream_topic(
        full.node("q1_split").outputs[1])]          # the keyed windows' input stays a topic


def test_with_a_live_source_or_source_first_the_other_queries_tasks_run_niced(tmp_path):
    """docs/deploy.md, "Who runs first": a paced DEBS replay's query (the readers, the merge, Q2
    and Q4) runs its tasks at normal priority, the keyed windows' queries at BACKGROUND_NICE;
    unpaced the same with ``source_first``, else all at normal priority, as with the setting 0.
    The default local master then has LIVE_SLOTS_PER_CORE slots per core (live), or
    SOURCE_FIRST_SLOTS_PER_CORE (``source_first``), else local[*]."""
    from epic.spark.planner import BACKGROUND_NICE
    from epic.spark.runtime import LIVE_SLOTS_PER_CORE, SOURCE_FIRST_SLOTS_PER_CORE, local_slots

    debs = ROOT / "topologies" / "debs2013.py"
    params = {"input": "game.csv", "out": str(tmp_path)}

    def nice(topology, **kw):
        plan = DeployPlan(topology, str(tmp_path / f"wd{len(os.listdir(tmp_path))}"),
                          partitions=1, fuse=True, batch_rows=1000, **kw)
        plan.create_topics()
        return {q.name.split("+")[0]: q.make_planner.args[0].nice for q in plan.queries()}

    paced = load_topology(debs, params={**params, "replay_speed": "1"})
    want = {"event_reader": 0, "q1b_1M_window": BACKGROUND_NICE, "q3_1M_window": BACKGROUND_NICE}
    assert nice(paced) == want
    assert set(nice(paced, background_nice=0).values()) == {0}
    unpaced = load_topology(debs, params=params)
    assert set(nice(unpaced).values()) == {0}
    assert nice(unpaced, source_first=True) == want
    assert local_slots(paced) == LIVE_SLOTS_PER_CORE * os.cpu_count()
    assert local_slots(unpaced) is None
    assert local_slots(unpaced, True) == SOURCE_FIRST_SLOTS_PER_CORE * os.cpu_count()


def test_sibling_windows_run_a_task_per_branch(tmp_path):
    """With ``source_first`` (or ``branch_tasks``) the four keyed windows of DEBS Q3 (siblings
    of one query) get ``branches x partitions`` tasks per micro-batch, each running one branch
    for one key partition, and the niced queries take the deploy's ``cpu_slots``; by default,
    or with ``branch_tasks=False``, one task per key partition runs every branch."""
    from epic.spark.direct import GroupPlanner, PlanInput

    debs = ROOT / "topologies" / "debs2013.py"
    topo = load_topology(debs, params={"input": "game.csv", "out": str(tmp_path)})

    class Segments:   # a topic input's planner: two segment files
        def partitions(self, a, b):
            return [type("P", (), {"path": f"/seg/{i}", "rows": 10})() for i in range(2)]

    def tasks(**kw):
        plan = DeployPlan(topo, str(tmp_path / f"wd{len(os.listdir(tmp_path))}"), partitions=2,
                          fuse=True, batch_rows=1000, cpu_slots=2, **kw)
        plan.create_topics()
        q = next(q for q in plan.queries() if q.name.startswith("q3_1M_window"))
        gp = q.make_planner.args[0]
        planner = GroupPlanner(gp, [PlanInput("topic", Segments())], 1000)
        planner._count = lambda end, n: None
        parts = planner._partitions({}, {}, {})
        return gp, [(p.part, p.branch, p.key_part, len(p.items)) for p in parts]

    gp, parts = tasks(source_first=True)
    assert gp.branch_tasks and len(gp.branches) == 4 and gp.cpu_slots == 2 and gp.nice > 0
    assert parts == [(b * 2 + k, b, k, 2) for b in range(4) for k in range(2)]
    gp, parts = tasks(branch_tasks=True)
    assert gp.branch_tasks and gp.cpu_slots == 0 and gp.nice == 0
    assert parts == [(b * 2 + k, b, k, 2) for b in range(4) for k in range(2)]
    for kw in ({}, {"source_first": True, "branch_tasks": False}):
        gp, parts = tasks(**kw)
        assert not gp.branch_tasks
        assert parts == [(k, None, k, 2) for k in range(2)]
    gp, _ = tasks(source_first=True, background_nice=0)
    assert gp.nice == 0 and gp.cpu_slots == 0


def test_cpu_slot_lets_that_many_in_at_once(tmp_path):
    """executor.cpu_slot: with 2 slots of one key, a third holder waits until one leaves;
    another key's slots are its own; 0 slots: no limit."""
    import threading
    import time

    from epic.spark.executor import cpu_slot, cpu_slot_dir, remove_cpu_slots

    key = str(tmp_path)
    inside, most, lock = [0], [0], threading.Lock()

    def hold(k, n, secs):
        with cpu_slot(k, n, poll=0.002):
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(secs)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=hold, args=(key, 2, 0.15)) for _ in range(5)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 2
    assert time.monotonic() - t0 >= 0.4   # 5 holders, 2 at a time: 3 rounds of 0.15 s
    most[0] = 0
    threads = [threading.Thread(target=hold, args=(f"{key}/{i}", 1, 0.1)) for i in range(3)]
    threads += [threading.Thread(target=hold, args=(key, 0, 0.1)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 6
    assert os.path.isdir(cpu_slot_dir(key))
    remove_cpu_slots(key)
    assert not os.path.exists(cpu_slot_dir(key))
    with cpu_slot(key, 1):   # made again by the next holder
        assert os.path.isdir(cpu_slot_dir(key))
    remove_cpu_slots(key)


def test_a_niced_task_runs_on_its_own_thread_and_leaves_the_worker_as_it_was():
    """direct._niced: the work runs at the nice value on a thread of its own (Linux: per
    thread), returns its result or raises its error, and the worker's own priority (Spark
    reuses it for every query's tasks) stays what it was."""
    import threading

    from epic.spark.direct import _niced

    before = os.getpriority(os.PRIO_PROCESS, 0)
    seen = {}

    def work():
        seen["thread"] = threading.get_native_id()
        seen["nice"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        return [1, 2]

    assert _niced(7, work) == [1, 2]
    assert seen["thread"] != threading.get_native_id()
    assert seen["nice"] == max(before, 7)
    assert os.getpriority(os.PRIO_PROCESS, 0) == before

    def fails():
        raise ValueError("bad row")

    with pytest.raises(ValueError, match="bad row"):
        _niced(7, fails)



@pytest.mark.parametrize("columns,expected", [
    # docs/deploy.md, "Settings": about 128 MB (2**27 bytes) of the input's columns per
    # micro-batch, fixed-width columns at their width, others 32 bytes, at least 1 M and at
    # most 8 M rows
    ({"ts": "int64", "key": "int64", "v": "float64"}, 2**27 // 24),
    ({"ts": "int64", **{f"c{i}": "int64" for i in range(12)}}, 2**27 // 104),
    ({"ts": "int64", **{f"s{i}": "string" for i in range(5)}}, 1_000_000),
    ({"ts": "int64"}, 8_000_000),
    ({"ts": "int64", "name": "string"}, 2**27 // (8 + 32)),
])
def test_micro_batch_rows_follow_the_input_width_unless_given(tmp_path, columns, expected):
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = str(tmp_path / "in.parquet")
    pq.write_table(pa.table({c: pa.array([], t) for c, t in columns.items()}), data)
    t = epic.Topology("widths")
    s = t.source("src", epic.parquet_source(data, time="ts", unit="ms"))
    t.sink("out", t.map("m", s, lambda b: b), epic.parquet_sink(str(tmp_path / "out")))
    for fuse in (True, False):   # the source's query: the whole chain, or the source alone
        for rows, want in ((None, expected), (1234, 1234)):
            plan = DeployPlan(t, str(tmp_path / f"wd{fuse}"), partitions=2, fuse=fuse,
                              batch_rows=rows)
            plan.create_topics()
            unit = next(u for u in plan.units if u[0][0].name == "src")
            assert plan.query(unit).batch_rows == want


CHAIN = textwrap.dedent('''
    import os
    import random

    import epic

    out = epic.param("out", "out")


    def readings():
        rnd = random.Random(7)
        for i in range(3000):
            yield {"ts": i * 10 + rnd.randrange(0, 60), "v": (i * 7) % 11}


    class Sorter(epic.Processor):
        """Holds rows until the watermark passes them, then emits them in time order: what it
        emits, and when, follows the watermarks it is given."""

        def init(self, key):
            return []

        def on_element(self, state, row, ctx):
            state.append([row["ts"], row["v"]])  # lists: the state is msgpacked
            ctx.set_timer(row["ts"])
            return state

        def on_timer(self, state, time, ctx):
            keep = []
            for ts, v in sorted(state):
                if ts <= time:
                    ctx.emit({"ts": ts, "v": v})
                else:
                    keep.append([ts, v])
            return keep


    class Stamp(epic.Processor):
        """Each row with the watermark this node had when the row arrived."""

        def on_element(self, state, row, ctx):
            w = ctx.watermark
            ctx.emit({"ts": row["ts"], "v": row["v"], "wm": -1 if w is None else w})
            return state


    topology = epic.Topology("chain")
    s = topology.source("readings", epic.iterator_source(
        readings, schema={"ts": "int64", "v": "int64"}, time="ts", unit="ms", batch_rows=100,
        lateness=0.1))
    a = topology.process("sorter", s, Sorter(), schema={"ts": "int64", "v": "int64"}, time="ts")
    b = topology.process("stamp", a, Stamp(), schema={"ts": "int64", "v": "int64", "wm": "int64"},
                         time="ts")
    w = topology.window("counts", b, epic.tumbling_count(50),
                        aggregates=[epic.count("n"), epic.sum("v", name="total"),
                                    epic.max("wm", name="wm")])
    topology.sink("out", w, epic.csv_sink(os.path.join(out, "counts.csv")))
    if epic.param("split", "no") == "yes":
        # the window's output split in two: one port straight to a file, the other through a
        # second global window (groups attached to the split's query)
        small, big = topology.splitstream("by_total", w, 2, lambda i, r: (r["total"] < 250) == (i == 0))
        topology.sink("small", small, epic.csv_sink(os.path.join(out, "small.csv")))
        w2 = topology.window("pairs", big, epic.tumbling_count(2),
                             aggregates=[epic.sum("n", name="n2"), epic.max("wm", name="wm2")])
        topology.sink("pairs_out", w2, epic.csv_sink(os.path.join(out, "pairs.csv")))
''')


def _killed_then_rerun(topo, tmp_path, crashes, params) -> dict:
    """Deploy ``topo`` into ``tmp_path/wd`` (outputs in ``tmp_path/out``), SIGKILLed at each
    crash point in turn, then to the end; the final status document."""
    for crash in crashes:
        run = _deploy(topo, tmp_path / "wd", tmp_path / "out", crash, params)
        assert run.returncode == -9, (crash, run.returncode, run.stderr[-3000:])
    last = _deploy(topo, tmp_path / "wd", tmp_path / "out", None, params)
    assert last.returncode == 0, last.stderr[-3000:]
    return json.loads((tmp_path / "wd" / "status.json").read_text())


def _topology_file(d, name: str, text: str) -> str:
    """``text`` written as ``<d>/<name>_topology.py``; its path."""
    path = os.path.join(d, f"{name}_topology.py")
    os.makedirs(d, exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


@pytest.mark.slow   # three deploys (~57 s); the default tier kills a fused deploy in
#                    test_deploy_faults.py::test_sigkill_inside_a_fused_csv_sink_commit
@pytest.mark.parametrize("split", ["no", "yes"])
def test_global_chain_equals_run_also_after_kills(tmp_path, split):
    """Three global stateful nodes (two processes, a count window) and a CSV sink as one query:
    the second and third read the first's output in the same task, and their watermarks from
    its snapshot. With ``split``, the window's output also goes through a splitstream whose
    ports feed a CSV sink and another global window: groups attached to the same query
    (``plan_attached``). Every file equals epic run's (the watermark each row met at the second
    node included), also when the deploy is SIGKILLed after snapshots of the chain's nodes and
    rerun."""
    topo = _topology_file(str(tmp_path), "chain", CHAIN)
    params = ["--split", split]
    epic.run(load_topology(topo, params={"out": str(tmp_path / "ref"), "split": split}))
    names = ["counts.csv"] + (["pairs.csv", "small.csv"] if split == "yes" else [])
    want = {n: _lines(tmp_path / "ref" / n) for n in names}
    assert all(len(w[1]) > 5 for w in want.values()), {n: len(w[1]) for n, w in want.items()}
    status = _killed_then_rerun(topo, tmp_path, ("node-state:4", "node-state:9"), params)
    # with the split, the window's output has two consumers (the sink, the split): both run
    # in the query as attached groups, as do the split's
    assert list(status["nodes"]) == ["readings+sorter+stamp+counts" + (
        "" if split == "yes" else "+out")]
    for n in names:
        assert _lines(tmp_path / "out" / n) == want[n], n
    assert sorted(os.listdir(tmp_path / "wd" / "state")) == sorted(
        ["counts", "sorter", "stamp"] + (["pairs"] if split == "yes" else []))
    assert not (tmp_path / "wd" / "topics").exists() or not os.listdir(tmp_path / "wd" / "topics")


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_fused_example_equals_run(spark, tmp_path, name):
    params = EXAMPLES[name]
    ref = load_topology(ROOT / "topologies" / f"{name}.py",
                        params={**params, "out": str(tmp_path / "ref")})
    dep = load_topology(ROOT / "topologies" / f"{name}.py",
                        params={**params, "out": str(tmp_path / "dep")})
    epic.run(ref)
    result = deploy(dep, str(tmp_path / "wd"), spark=spark, timeout=240, fuse=True)
    assert result.status["state"] == "finished"
    files = sorted((tmp_path / "ref").glob("*.csv"))
    assert files
    for f in files:
        assert _csv_lines(tmp_path / "dep" / f.name) == _csv_lines(f), f.name


@pytest.mark.parametrize("tr", TRANSCRIPTS, ids=[t.name for t in TRANSCRIPTS])
def test_fused_transcript_equals_run(spark, tmp_path, tr):
    """source -> window -> collect sink runs as one query and gives epic run's rows."""
    topo = _transcript_topology(tr)
    want = epic.run(topo).collected["out"].to_pylist()
    result = deploy(_transcript_topology(tr), str(tmp_path / "wd"), spark=spark, timeout=120,
                    fuse=True)
    assert list(result.status["nodes"]) == ["input+window+out"]
    assert _same_rows(result.collected["out"].to_pylist(), want)


@pytest.mark.slow
def test_fused_kill_then_rerun(reference, tmp_path):  # noqa: F811 - fixture
    """source -> filter -> window -> CSV as one query, SIGKILLed after the window task saved its
    snapshot (before the sink wrote that batch); the rerun's file is epic run's."""
    topo, want = reference
    for crash in ("node-state:3",):
        run = _deploy(topo, tmp_path / "wd", tmp_path / "out", crash)
        assert run.returncode == -9, (crash, run.returncode, run.stderr[-3000:])
    # Spark's temp directories, which the killed driver could not delete, are in the work
    # directory (not /tmp); the next deploy there deletes them first.
    scratch = tmp_path / "wd" / "spark-local"
    left = set(os.listdir(scratch))
    assert left, "the killed deploy's Spark temp directories are not in <workdir>/spark-local"
    last = _deploy(topo, tmp_path / "wd", tmp_path / "out")
    assert last.returncode == 0, last.stderr[-3000:]
    assert _lines(tmp_path / "out" / "sums.csv") == want
    assert not left & set(os.listdir(scratch)), "the killed deploy's temp directories are left"
    conf = json.loads((tmp_path / "wd" / "spark-conf.json").read_text())
    assert conf["spark.local.dir"] == str(scratch)


MERGED = textwrap.dedent('''
    import os
    import random

    import epic

    out = epic.param("out", "out")
    shared = epic.param("shared", "no")


    def left():
        rnd = random.Random(1)
        for i in range(2000):
            yield {"ts": i * 10 + rnd.randrange(0, 40), "v": i % 13}


    def right():
        rnd = random.Random(2)
        for i in range(1500):
            yield {"ts": i * 13 + rnd.randrange(0, 30), "v": i % 7}


    def scaled(r):
        return {"ts": r["ts"], "v": r["v"] * 3 + 1}


    def odd_v(r):
        return r["v"] % 2 == 1


    class Stamp(epic.Processor):
        """Each row with the watermark the merge forwarded when the row arrived (a global
        process after the merge, in its query)."""

        def on_element(self, state, row, ctx):
            w = ctx.watermark
            ctx.emit({"ts": row["ts"], "v": row["v"], "wm": -1 if w is None else w})
            return state


    topology = epic.Topology("merged")
    sch = {"ts": "int64", "v": "int64"}
    a = topology.source("left", epic.iterator_source(left, schema=sch, time="ts", unit="ms",
                                                     batch_rows=90, lateness=0.05))
    a = topology.filter_rows("left_odd", topology.map_rows("left_scaled", a, scaled), odd_v)
    # a splitstream with one output routes and filters like a stateless node
    (a,) = topology.splitstream("left_route", a, 1, lambda i, r: r["v"] % 5 != 0)
    b = topology.source("right", epic.iterator_source(right, schema=sch, time="ts", unit="ms",
                                                      batch_rows=70, lateness=0.05))
    m = topology.merge("both", [a, b])
    st = topology.process("stamp", m, Stamp(), schema={"ts": "int64", "v": "int64",
                                                       "wm": "int64"}, time="ts")
    # (the watermark each row met is not compared: under epic deploy a merge forwards its
    # inputs' watermarks per micro-batch, docs/deploy.md)
    w = topology.window("counts", st, epic.tumbling_count(40),
                        aggregates=[epic.count("n"), epic.sum("v", name="total"),
                                    epic.min("v", name="low")])
    topology.sink("out", w, epic.csv_sink(os.path.join(out, "counts.csv")))
    if shared == "yes":
        # the right source has a second consumer: it keeps its own query and topic
        topology.sink("right_out", b, epic.csv_sink(os.path.join(out, "right.csv")))
''')


def test_plan_inlets(tmp_path):
    """A source group of stateless nodes whose only consumer is a merge is read by the merge's
    query (an inlet): no query and no topic of its own; one with another consumer is not."""
    topo = _topology_file(str(tmp_path), "merged", MERGED)
    t = load_topology(topo, params={"out": str(tmp_path / "o")})
    plan = DeployPlan(t, str(tmp_path / "wd"), partitions=2, fuse=True, batch_rows=100)
    assert {h: {i: group_name(g) for i, g in d.items()} for h, d in plan.inlets.items()} == {
        "both": {0: "left+left_scaled+left_odd+left_route", 1: "right"}}
    assert [plan.unit_name(u) for u in plan.units] == [
        "left+left_scaled+left_odd+left_route+right+both+stamp+counts+out"]
    plan.create_topics()
    assert not (tmp_path / "wd" / "topics").exists() or not os.listdir(tmp_path / "wd" / "topics")
    t2 = load_topology(topo, params={"out": str(tmp_path / "o"), "shared": "yes"})
    plan2 = DeployPlan(t2, str(tmp_path / "wd2"), partitions=2, fuse=True, batch_rows=100)
    assert [plan2.unit_name(u) for u in plan2.units] == [
        "right", "left+left_scaled+left_odd+left_route+both+stamp+counts+out", "right_out"]
    assert plan2.node_topics(t2.node("right")) and not plan2.node_topics(t2.node("left_route"))
    unfused = DeployPlan(t, str(tmp_path / "wd3"), partitions=2, fuse=False, batch_rows=100)
    assert not unfused.inlets and len(unfused.units) == len(t.nodes)


@pytest.mark.slow   # ~55 s each; the default tier deploys DEBS's inlets (test_end_of_stream)
@pytest.mark.parametrize("shared", ["no", "yes"])
def test_merge_of_inlets_equals_run_also_after_kills(tmp_path, shared):
    """Two disordered sources, one through a map, a filter and a one-output splitstream, merged,
    through a global process,
    counted in windows of 40 rows: the merge's query plans both sources
    itself (inlets; ``shared``: the right one also feeds a sink, so it stays a topic). The file
    equals epic run's, also after SIGKILLs while planning a source and after a snapshot."""
    topo = _topology_file(str(tmp_path), "merged", MERGED)
    params = ["--shared", shared]
    epic.run(load_topology(topo, params={"out": str(tmp_path / "ref"), "shared": shared}))
    names = ["counts.csv"] + (["right.csv"] if shared == "yes" else [])
    want = {n: _lines(tmp_path / "ref" / n) for n in names}
    assert len(want["counts.csv"][1]) > 20
    status = _killed_then_rerun(topo, tmp_path, ("source-plan:3", "node-state:5"), params)
    assert "left+left_scaled+left_odd+left_route+" + ("" if shared == "yes" else "right+") + \
        "both+stamp+counts+out" in status["nodes"]
    for n in names:
        assert _lines(tmp_path / "out" / n) == want[n], n
    spool = tmp_path / "wd" / "spool"
    assert not spool.exists() or not any(p.is_file() for p in spool.rglob("*"))


def _readings(name: str, seed: int, keys: int) -> str:
    """The head of a topology file: a source 'readings' of 3,000 rows over ``keys`` keys
    (seeded), in disorder within its lateness and with ties in time; the parameter 'out'."""
    return textwrap.dedent('''
        import os
        import random

        import epic

        out = epic.param("out", "out")


        def readings():
            rnd = random.Random(SEED)
            for i in range(3000):
                yield {"ts": i * 5 + rnd.randrange(0, 40), "k": rnd.randrange(KEYS), "v": i % 13}


        topology = epic.Topology("NAME")
        s = topology.source("readings", epic.iterator_source(
            readings, schema={"ts": "int64", "k": "int64", "v": "int64"}, time="ts", unit="ms",
            batch_rows=250, lateness=0.05))
    ''').replace("SEED", str(seed)).replace("KEYS", str(keys)).replace("NAME", name)


SIBLINGS = _readings("siblings", 11, 5) + textwrap.dedent('''
    for name, spec in (("tumble", epic.tumbling(0.2)), ("slide", epic.sliding(0.5, 0.1)),
                       ("counts", epic.tumbling_count(40))):
        w = topology.window(name, s, spec, key="k", late="drop",
                            aggregates=[epic.count("n"), epic.sum("v", name="total")])
        topology.sink(f"{name}_out", w, epic.csv_sink(os.path.join(out, f"{name}.csv")))
        if name == "counts":   # a second output of the branch, with the writer's options
            topology.sink("counts_pq", w, epic.parquet_sink(os.path.join(out, "counts.parquet"),
                                                            options={"compression": "zstd"}))
    # a fourth branch written to a topic (an output that is no file)
    w = topology.window("pairs", s, epic.tumbling(0.3), key="k", late="drop",
                        aggregates=[epic.max("v", name="top")])
    topology.sink("tops_out", w, epic.topic_sink(os.path.join(out, "tops")))
''')


@pytest.mark.slow   # ~42 s each: a killed deploy and its rerun, two JVMs
@pytest.mark.parametrize("mode,partitions", [
    ("split", "1"), ("split", "2"), ("sourceFirst", "1"), ("sourceFirst", "2")])
def test_sibling_windows_in_branch_tasks_equal_run_also_after_kills(tmp_path, mode, partitions):
    """Four keyed windows over one stream (siblings: one query) run a task per branch and key
    partition: every micro-batch with ``--conf spark.epic.sourceFirst=true``; with
    ``--conf spark.epic.splitSeconds=0`` every one after the first, whose costs are not yet
    measured, so one query mixes both (``direct.split_branches``). Every file equals epic
    run's, also when the deploy is SIGKILLed after a window task saved its snapshot (the other
    branches' tasks of that micro-batch may or may not have run) and rerun. The query's status
    name shows the four groups, and the trace shows a task per branch."""
    topo = _topology_file(str(tmp_path), "siblings", SIBLINGS)
    epic.run(load_topology(topo, params={"out": str(tmp_path / "ref")}))
    names = ["tumble.csv", "slide.csv", "counts.csv", "counts.parquet", "tops"]

    def lines(d, n):
        if n.endswith(".csv"):
            return _lines(d / n)
        if n.endswith(".parquet"):
            import pyarrow.parquet as pq
            f = pq.ParquetFile(d / n)
            md = f.metadata
            codecs = {md.row_group(g).column(c).compression
                      for g in range(md.num_row_groups) for c in range(md.num_columns)}
            return codecs, sorted(repr(sorted(r.items())) for r in f.read().to_pylist())
        from epic.topics import Topic
        rows = Topic.open(d / n).read_table().to_pylist()
        return "", sorted(repr(sorted(r.items())) for r in rows)

    want = {n: lines(tmp_path / "ref", n) for n in names}
    assert want["counts.parquet"][0] == {"ZSTD"}
    assert all(len(w[1]) > 10 for w in want.values()), {n: len(w[1]) for n, w in want.items()}
    opts = ("--partitions", partitions, "--conf",
            "spark.epic.sourceFirst=true" if mode == "sourceFirst" else "spark.epic.splitSeconds=0")
    # with a task per branch and key partition, 8 snapshots per micro-batch over 2 partitions:
    # the split mode's kill comes after its first micro-batches with rows
    for crash in ("node-state:21" if (mode, partitions) == ("split", "2") else "node-state:9",):
        run = _deploy(topo, tmp_path / "wd", tmp_path / "out", crash, opts=opts,
                      trace=tmp_path / "trace0.jsonl")
        assert run.returncode == -9, (crash, run.returncode, run.stderr[-3000:])
    last = _deploy(topo, tmp_path / "wd", tmp_path / "out", opts=opts,
                   trace=tmp_path / "trace.jsonl")
    assert last.returncode == 0, last.stderr[-3000:]
    status = json.loads((tmp_path / "wd" / "status.json").read_text())
    sib = [q for q in status["nodes"] if q.endswith("~4")]
    assert len(sib) == 1, list(status["nodes"])
    if mode == "split":   # before the kill: the first batch in one task, later ones split
        spans = [json.loads(x) for x in (tmp_path / "trace0.jsonl").read_text().splitlines()]
        planned = [s_.get("split") for s_ in spans if s_["span"] == "partitions"
                   and s_["query"] == sib[0] and s_.get("rows")]
        assert planned[0] is False and True in planned, planned
    spans = [json.loads(x) for x in (tmp_path / "trace.jsonl").read_text().splitlines()]
    parts = {s_.get("part") for s_ in spans if s_["span"] == "task" and s_["query"] == sib[0]}
    assert parts == set(range(4 * int(partitions))), parts
    if mode == "split":
        planned = [s_ for s_ in spans if s_["span"] == "partitions" and s_["query"] == sib[0]
                   and s_.get("rows")]
        assert {s_.get("split") for s_ in planned} == {True}, planned   # costs from the kill
        costs = json.loads(next((tmp_path / "wd" / "stats").glob("*.branches.json")).read_text())
        assert sorted(costs["branches"]) == ["0", "1", "2", "3"], costs
    for n in names:
        assert lines(tmp_path / "out", n) == want[n], n
    if mode == "sourceFirst":   # the niced tasks' CPU slots (lock files) are gone with the deploy
        from epic.spark.executor import cpu_slot_dir
        assert not os.path.exists(cpu_slot_dir(str(tmp_path / "wd")))


DOWNSTREAM = _readings("downstream", 5, 7) + textwrap.dedent('''
    w = topology.window("pairs", s, epic.tumbling(0.3, origin=0, lateness=0.05), key="k",
                        late="drop", aggregates=[epic.max("v", name="top")])
    plus = topology.map("plus", w, lambda b: b)
    g = topology.window("tops", plus, epic.tumbling(0.6, origin=0), late="drop",
                        aggregates=[epic.max("top", name="best"), epic.count("n"),
                                    epic.first("k", name="k1"), epic.last("k", name="kn")])
    topology.sink("tops_out", g, epic.csv_sink(os.path.join(out, "tops.csv")))
    c = topology.window("cnt", w, epic.tumbling_count(7), late="drop",
                        aggregates=[epic.sum("top", name="s"), epic.first("k", name="k1"),
                                    epic.last("k", name="kn")])
    topology.sink("cnt_out", c, epic.csv_sink(os.path.join(out, "cnt.csv")))
''')


@pytest.mark.slow   # ~42 s each: a killed deploy and its rerun, two JVMs
@pytest.mark.parametrize("crash", ["node-state:4", "node-state:9"])
def test_consumers_of_a_partitioned_window_equal_run_after_kills(tmp_path, crash):
    """A keyed window over 2 partitions feeding global windows (one through a map, which then
    runs in the consumer's query): the consumers read the partitions' rows merged into epic
    run's order, also when the deploy is SIGKILLed after a snapshot and rerun. Their files,
    in order (first and last keys, counts per window: nothing found late), equal epic run's."""
    topo = _topology_file(str(tmp_path), "downstream", DOWNSTREAM)
    ref = epic.run(load_topology(topo, params={"out": str(tmp_path / "ref")}))
    assert ref.nodes["tops"].late_rows == 0 and ref.nodes["cnt"].late_rows == 0
    opts = ("--partitions", "2")
    run = _deploy(topo, tmp_path / "wd", tmp_path / "out", crash, opts=opts)
    assert run.returncode == -9, (crash, run.returncode, run.stderr[-3000:])
    last = _deploy(topo, tmp_path / "wd", tmp_path / "out", opts=opts)
    assert last.returncode == 0, last.stderr[-3000:]
    for n in ("tops.csv", "cnt.csv"):
        want = (tmp_path / "ref" / n).read_text().splitlines()
        assert len(want) > 20, n
        assert (tmp_path / "out" / n).read_text().splitlines() == want, n
    queries = json.loads((tmp_path / "wd" / "status.json").read_text())["nodes"]
    # the map left the window's query: it runs in its consumer's (beside 'cnt', a sibling)
    assert "readings+pairs" in queries and any(q.startswith("plus+tops+tops_out")
                                               for q in queries), list(queries)


ORDERED = _readings("ordered", 3, 6) + textwrap.dedent('''
    w = topology.window("tumble", s, epic.tumbling(0.2, origin=0), key="k", late="drop",
                        aggregates=[epic.count("n"), epic.sum("v", name="total")])
    topology.sink("tumble_out", w, epic.csv_sink(os.path.join(out, "tumble.csv")))
    f = topology.window("few", s, epic.few_time(0.5, 0.2, 0.1, origin=0), key="k", late="drop",
                        aggregates=[epic.count("n"), epic.max("v")])
    topology.sink("few_out", f, epic.parquet_sink(os.path.join(out, "few.parquet")))
    sl = topology.window("slide", s, epic.sliding(0.4, 0.1, origin=0), key="k", late="drop",
                         aggregates=[epic.count("n")])
    topology.sink("slide_out", topology.map("slide_plus", sl, lambda b: b),
                  epic.csv_sink(os.path.join(out, "slide.csv")))
    c = topology.window("counts", s, epic.tumbling_count(5), key="k", late="drop",
                        aggregates=[epic.sum("v", name="total")])
    topology.sink("counts_out", c, epic.topic_sink(os.path.join(out, "counts")))
''')


@pytest.mark.slow   # ~45 s each: a killed deploy and its rerun, two JVMs
@pytest.mark.parametrize("fuse,crash,partitions", [
    (True, "sink-commit:3", "2"), (True, "parquet-commit:3", "2"), (True, "parquet-final:1", "2"),
    (False, "sink-commit:5", "2"), (True, "node-state:7", "3")])
def test_files_of_a_partitioned_window_are_in_run_order_also_after_kills(tmp_path, fuse, crash,
                                                                         partitions):
    """Keyed windows over 2 or 3 partitions written straight to a CSV, a Parquet file and a
    topic (and through a map to a CSV): each file holds epic run's rows **in epic run's order**
    (docs/deploy.md, "Event time across partitions"), also when the deploy is SIGKILLed in a
    sink's commit or after a window's snapshot and rerun. Every key of the windows ends on the
    same instants, so each micro-batch's rows come from every partition and only the merge by
    (time, rank) orders them. The Parquet sink's kills: after a commit appended its parts to the
    growing file (before the footer and record), and after the end renamed it to the output."""
    import pyarrow.parquet as pq

    from epic.topics import Topic

    topo = _topology_file(str(tmp_path), "ordered", ORDERED)
    epic.run(load_topology(topo, params={"out": str(tmp_path / "ref")}))

    def files(d):
        return {"tumble": (d / "tumble.csv").read_text().splitlines(),
                "slide": (d / "slide.csv").read_text().splitlines(),
                "few": pq.read_table(d / "few.parquet").to_pylist(),
                "counts": Topic.open(d / "counts").read_table().select(
                    ["k", "window_start", "window_end", "total"]).to_pylist()}

    want = files(tmp_path / "ref")
    assert all(len(v) > 100 for v in want.values()), {k: len(v) for k, v in want.items()}
    opts = ("--partitions", partitions)
    run = _deploy(topo, tmp_path / "wd", tmp_path / "out", crash, opts=opts, fuse=fuse)
    assert run.returncode == -9, (crash, run.returncode, run.stderr[-3000:])
    last = _deploy(topo, tmp_path / "wd", tmp_path / "out", opts=opts, fuse=fuse)
    assert last.returncode == 0, last.stderr[-3000:]
    got = files(tmp_path / "out")
    for name in want:
        assert sorted(map(repr, got[name])) == sorted(map(repr, want[name])), name
        assert got[name] == want[name], name
