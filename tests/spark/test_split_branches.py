"""When a micro-batch of siblings runs a task per branch (``direct.split_branches``), the costs the
tasks measure (``add_costs`` / ``read_costs``), and the planner's tasks for such micro-batches.

No Spark session: the planner is driven with a fake topic input. The deploy itself (files equal
``epic run``'s with split and unsplit micro-batches mixed, also after a kill) is
tests/spark/test_fuse.py::test_sibling_windows_in_branch_tasks_equal_run_also_after_kills.
"""

from __future__ import annotations

import itertools
import json
import os

import pytest

from epic.cli import load_topology
from epic.spark.direct import (COST_DECAY, SPLIT_SECONDS, SPLIT_SECONDS_FINAL, GroupPlanner,
                               PlanInput, add_costs, read_costs, split_branches,
                               upstream_batches)
from epic.spark.planner import DeployPlan
from epic.topics import _segment_name

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _expected(costs: dict, batches: int) -> float:
    # the docs' rule, written out: seconds per upstream micro-batch of each branch, summed
    return batches * sum(s / n for s, n in costs.values())


@pytest.mark.parametrize("final", [False, True])
def test_split_follows_the_expected_seconds_and_orders_the_costliest_first(final):
    """Brute force over small cost tables: a micro-batch splits exactly when its expected
    seconds reach the threshold (the last one from the lower final threshold), or when it is
    the last and nothing was measured; the order is by descending cost per batch, ties by
    branch."""
    values = [(0.0, 1), (1.0, 1), (3.0, 2), (9.0, 1), (12.0, 4)]
    for n in (2, 3):
        for combo in itertools.product(values, repeat=n):
            costs = dict(enumerate(combo))
            for batches in (1, 2, 5):
                order, est = split_branches(n, costs, batches, final)
                want = _expected(costs, batches)
                assert est == pytest.approx(want)
                split = want >= SPLIT_SECONDS or (final and want >= SPLIT_SECONDS_FINAL)
                assert (order is not None) == split, (costs, batches, final, est)
                if order is not None:
                    rate = {b: s / k for b, (s, k) in costs.items()}
                    assert sorted(order) == list(range(n))
                    assert all((-rate[a], a) < (-rate[b], b) for a, b in zip(order, order[1:]))
    # nothing measured yet: only the last micro-batch splits, in branch order
    assert split_branches(4, {}, 3, final) == (([0, 1, 2, 3] if final else None), None)
    # a branch not measured yet: no estimate
    assert split_branches(2, {0: (50.0, 1)}, 3, False) == (None, None)
    # one branch: nothing to split
    assert split_branches(1, {0: (50.0, 1)}, 3, final) == (None, None)
    # the threshold is the deploy's (spark.epic.splitSeconds; inf: the last micro-batch only)
    assert split_branches(2, {0: (0.2, 1), 1: (0.2, 1)}, 1, False, seconds=0.3)[0] == [0, 1]
    assert split_branches(2, {0: (9.0, 1), 1: (9.0, 1)}, 9, final,
                          seconds=float("inf"))[0] == ([0, 1] if final else None)


def test_costs_add_up_with_decay(tmp_path):
    """Each commit weighs the sums before it by COST_DECAY and adds its tasks' seconds and
    upstream batches per branch (several tasks of a branch add up); a missing or broken file
    reads as nothing measured."""
    path = str(tmp_path / "stats" / "q.branches.json")
    assert read_costs(path) == {}
    add_costs(path, [])
    assert not os.path.exists(path)
    add_costs(path, [{"b": 0, "s": 2.0, "n": 1}, {"b": 1, "s": 1.0, "n": 1},
                     {"b": 1, "s": 3.0, "n": 1}])
    assert read_costs(path) == {0: (2.0, 1.0), 1: (4.0, 2.0)}
    add_costs(path, [{"b": 0, "s": 10.0, "n": 2}])
    got = read_costs(path)
    assert got[0] == pytest.approx((2.0 * COST_DECAY + 10.0, COST_DECAY + 2.0))
    assert got[1] == pytest.approx((4.0 * COST_DECAY, 2.0 * COST_DECAY))
    with open(path, "w") as f:
        f.write("{not json")
    assert read_costs(path) == {}


def test_upstream_batches_counts_distinct_producer_batches_per_input():
    seg = lambda seq, prod, b, part=0, parts=1: (  # noqa: E731
        f"/t/{_segment_name(seq, prod, b, part, parts, 10)}")
    items = [(0, seg(1, "a", 7, 0, 2), "topic"), (0, seg(2, "a", 7, 1, 2), "topic"),
             (0, seg(3, "a", 8), "topic"), (0, seg(4, "b", 8), "topic"),
             (1, seg(5, "a", 1), "topic")]
    assert upstream_batches(items) == 3
    assert upstream_batches([(0, "/spool/1-2-0.arrow", "spool")]) == 1
    assert upstream_batches([]) == 0


def test_the_planner_splits_the_last_and_the_long_micro_batches(tmp_path):
    """DEBS Q3's four windows (one query) on the default plan: one task for a micro-batch
    expected short; a task per branch, costliest first, for the last micro-batch of the input
    and for one expected to take SPLIT_SECONDS or more; no split without rows."""
    debs = os.path.join(ROOT, "topologies", "debs2013.py")
    topo = load_topology(debs, params={"input": "game.csv", "out": str(tmp_path)})
    plan = DeployPlan(topo, str(tmp_path / "wd"), partitions=1, fuse=True, batch_rows=1000)
    plan.create_topics()
    q = next(q for q in plan.queries() if q.name.startswith("q3_1M_window"))
    gp = q.make_planner.args[0]
    assert gp.costs.endswith(".branches.json") and not gp.branch_tasks
    segs = [f"/seg/{_segment_name(i, 'src', i, 0, 1, 10)}" for i in range(3)]

    class Segments:   # a topic input's planner: three segments of three upstream batches
        rows = 10

        def partitions(self, a, b):
            return [type("P", (), {"path": p, "rows": Segments.rows})() for p in segs]

    planner = GroupPlanner(gp, [PlanInput("topic", Segments())], 1000)
    planner._count = lambda end, n: None

    def tasks(eos=False):
        sp: dict = {}
        parts = planner._partitions({}, {"eos": eos}, sp)
        return [p.branch for p in parts], sp

    assert tasks() == ([None], {"rows": 30, "split": False})   # nothing measured yet
    got, sp = tasks(eos=True)
    assert got == [0, 1, 2, 3] and sp["split"]          # the last one
    per_batch = {0: 0.5, 1: 1.0, 2: 1.5, 3: 0.2}        # seconds per upstream batch
    add_costs(gp.costs, [{"b": b, "s": v, "n": 1} for b, v in per_batch.items()])
    got, sp = tasks()                                    # 3 x 3.2 s expected
    assert got == [None] and sp == {"rows": 30, "split": False, "expected_s": 9.6}
    got, sp = tasks(eos=True)
    assert got == [2, 1, 0, 3] and sp["expected_s"] == 9.6
    add_costs(gp.costs, [{"b": 2, "s": 10.0, "n": 1}])
    got, sp = tasks()
    assert got == [2, 1, 0, 3] and sp["split"] and sp["expected_s"] >= SPLIT_SECONDS
    # the task indexes are Spark's partitions in that order; each task keeps its branch's
    # state and output partition (0: one key partition)
    parts = planner._partitions({}, {}, {})
    assert [(p.part, p.branch, p.out_part) for p in parts] == [
        (0, 2, 0), (1, 1, 0), (2, 0, 0), (3, 3, 0)]
    Segments.rows = 0
    assert tasks(eos=True)[0] == [None]                 # no rows: nothing to split
    assert json.loads(open(gp.costs).read())["branches"].keys() == {"0", "1", "2", "3"}


def test_the_committer_adds_the_measured_costs_and_never_fails_on_them(tmp_path):
    """The committer hands each output its own messages and adds the cost messages of the
    tasks to the costs file; a costs file it cannot write (its directory is a file) leaves the
    commit done."""
    import msgpack

    from epic.spark.direct import Committer, Output

    got = []

    class Writer:
        def commit(self, msgs, batch_id):
            got.append((batch_id, msgs))

    class Ptrs:   # the collected pointer rows of a task
        def __init__(self, *data):
            self.data = data

    costs = [msgpack.packb({"o": -1, "k": "cost", "b": b, "s": 2.0 * (b + 1), "n": 2})
             for b in range(2)]
    path = str(tmp_path / "stats" / "q.branches.json")
    committer = Committer([Output("file", Writer())], "q", "", path)
    committer.commit([Ptrs(*costs), None], 7)
    assert got == [(7, [])]
    assert read_costs(path) == {0: (2.0, 2.0), 1: (4.0, 2.0)}
    (tmp_path / "blocked").write_text("")
    Committer([Output("file", Writer())], "q", "",
              str(tmp_path / "blocked" / "q.branches.json")).commit([Ptrs(*costs)], 8)
    assert got[-1] == (8, [])
