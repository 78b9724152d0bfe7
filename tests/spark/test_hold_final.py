"""A consumer query waits for its producer's last micro-batch (``direct.mark_ending`` and
``GroupPlanner._hold``), so the end of a bounded input reaches it as one micro-batch.

No Spark session: the planners of the DEBS deploy plan are driven directly, with the topics the
plan creates. That the deploy's outputs equal ``epic run``'s with the wait in place is what every
fused deploy test checks (tests/spark/test_fuse.py, test_debs_parquet.py).
"""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from epic.cli import load_topology
from epic.spark import direct
from epic.spark.direct import ENDING, HOLD_SECONDS, GroupPlanner, PlanInput, mark_ending
from epic.spark.planner import DeployPlan
from epic.spark.topic_source import TopicStreamReader

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture()
def debs(tmp_path):
    topo = load_topology(os.path.join(ROOT, "topologies", "debs2013.py"),
                         params={"input": "game.csv", "out": str(tmp_path)})
    plan = DeployPlan(topo, str(tmp_path / "wd"), partitions=1, fuse=True, batch_rows=1000)
    plan.create_topics()
    queries = plan.queries()
    source = next(q for q in queries if q.name.startswith("event_reader"))
    q3 = next(q for q in queries if q.name.startswith("q3_1M_window"))
    return source, q3


def _reader_topic(q):
    """The topic a query reads (its only input) and its planner."""
    gp, inputs, rows = q.make_planner.args
    (x,) = inputs
    assert x.kind == "topic" and isinstance(x.planner, TopicStreamReader)
    return x.planner.topic, GroupPlanner(gp, inputs, rows)


def _producer_of(source_q, topic):
    gp = source_q.make_planner.args[0]
    outs = [o for o in gp.outputs if o.kind == "topic" and o.writer.topic.root == topic.root]
    assert len(outs) == 1, "the source query writes the topic q3 reads"
    return gp, outs[0].writer.producer


def _data(topic, n=3):
    return pa.RecordBatch.from_arrays([pa.nulls(n, f.type) for f in topic.schema],
                                      schema=topic.schema)


def _commit(topic, producer, batch_id, *, rows=3, eos=False, step=None):
    temps = [topic.write_temp([_data(topic, rows)], producer=producer, batch_id=batch_id,
                              eos=eos, step=step)] if rows else []
    topic.commit_batch(producer, batch_id, temps, eos=eos, step=step, write_marker=True
                       if not rows else None)


def test_a_reader_waits_while_its_producer_runs_its_last_micro_batch(debs, monkeypatch):
    source, q3 = debs
    topic, consumer = _reader_topic(q3)
    gp, producer = _producer_of(source, topic)
    _commit(topic, producer, 0)                         # a batch before the last
    start = consumer.initial_offset()
    end = consumer.latest_offset(start, None)
    assert end != start and not end["eos"]              # no marker: the rows are planned

    mark_ending(gp)                                     # the producer plans its last batch
    doc = json.loads(open(os.path.join(topic.root, ENDING, f"{producer}.json")).read())
    assert doc == {"producer": producer, "after": 0}
    assert consumer.latest_offset(start, None) == start     # held: no partial micro-batch
    assert consumer._hold([{"eos": True}]) is False          # an input at its end is not held

    _commit(topic, producer, 1, rows=0, eos=True)       # the last batch is committed
    end = consumer.latest_offset(start, None)
    assert end["eos"] and end["seq"] > json.loads(json.dumps(start))["seq"]


def test_the_wait_is_bounded_and_off_for_available_now(debs, monkeypatch):
    source, q3 = debs
    topic, consumer = _reader_topic(q3)
    gp, producer = _producer_of(source, topic)
    _commit(topic, producer, 0)
    mark_ending(gp)
    now = [1000.0]
    monkeypatch.setattr(direct.time_, "monotonic", lambda: now[0])
    assert consumer._hold([{"eos": False}])
    now[0] += HOLD_SECONDS - 1
    assert consumer._hold([{"eos": False}])
    now[0] += 2                                         # in all, not per wait
    assert not consumer._hold([{"eos": False}])

    _, fresh = _reader_topic(q3)
    fresh.prepare_available_now()   # an empty batch would end such a query: never held
    assert not fresh._hold([{"eos": False}])


def test_a_producer_marks_its_outputs_once_when_every_input_reaches_its_end(debs, tmp_path):
    source, q3 = debs
    topic, _ = _reader_topic(q3)
    gp, producer = _producer_of(source, topic)
    marker = os.path.join(topic.root, ENDING, f"{producer}.json")

    class Source:   # a source input's planner: its offsets only
        def __init__(self):
            self.ends = [{"seq": 5, "eos": False}, {"seq": 9, "eos": True}]

        def latestOffset(self, start, limit):
            return self.ends.pop(0) if self.ends else start

    planner = GroupPlanner(gp, [PlanInput("source", Source())], 1000)
    planner.latest_offset({"seq": 0, "eos": False}, None)
    assert not os.path.exists(marker)                   # not the end yet
    planner.latest_offset({"seq": 5, "eos": False}, None)
    assert json.loads(open(marker).read()) == {"producer": producer, "after": None}
    os.remove(marker)
    planner.latest_offset({"seq": 9, "eos": True}, None)    # past the end: no new mark
    assert not os.path.exists(marker)


def test_no_wait_while_another_input_has_more_to_come(debs, tmp_path):
    """With several inputs, the wait holds only when every input the batch would not take to
    its end is a topic whose producer runs its last micro-batch: rows of an input with more to
    come are planned now (a merge's other input, a source)."""
    from epic.topics import Topic

    source, q3 = debs
    topic, consumer = _reader_topic(q3)
    gp, producer = _producer_of(source, topic)
    _commit(topic, producer, 0)
    mark_ending(gp)
    other = Topic.create(str(tmp_path / "other"), topic.schema)

    class Reader:
        def __init__(self, t):
            self.topic = t

    two = GroupPlanner(q3.make_planner.args[0],
                       [PlanInput("topic", Reader(topic)), PlanInput("topic", Reader(other))], 10)
    assert not two._hold([{"eos": False}, {"eos": False}])     # the other topic goes on
    assert two._hold([{"eos": False}, {"eos": True}])          # ... or is at its end
    with_source = GroupPlanner(q3.make_planner.args[0],
                               [PlanInput("topic", Reader(topic)), PlanInput("source", None)], 10)
    assert not with_source._hold([{"eos": False}, {"seq": 3, "eos": False}])
    assert with_source._hold([{"eos": False}, {"seq": 3, "eos": True}])


def test_the_wait_reads_a_listing_only_never_failing_on_a_batch_retention_cut(debs):
    """Retention deletes by sequence number and may leave a later part of an old batch; the
    topic's checked listing (``segments``) calls that corrupt. The wait and the mark use the
    names alone: neither fails the query (the 'events' topic of a test deploy once did)."""
    from epic.spark.direct import _ending

    source, q3 = debs
    topic, consumer = _reader_topic(q3)
    gp, producer = _producer_of(source, topic)
    temps = [topic.write_temp([_data(topic)], producer=producer, batch_id=0, part=p)
             for p in (0, 1)]
    topic.commit_batch(producer, 0, temps)
    first = min(s.path for s in topic.segments() if s.part == 0)
    os.remove(first)                                    # part 0 gone, part 1 kept
    with pytest.raises(Exception):
        topic.last_batch_id(producer)                   # the checked listing refuses it
    mark_ending(gp)
    doc = json.loads(open(os.path.join(topic.root, ENDING, f"{producer}.json")).read())
    assert doc["after"] == 0
    assert _ending(topic) and consumer._hold([{"eos": False}])
    _commit(topic, producer, 1, rows=0, eos=True)
    assert not _ending(topic) and not consumer._hold([{"eos": False}])
