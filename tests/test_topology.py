"""The graph model: node configs, schemas at build time, and one test per validation rule."""

import dataclasses
import warnings

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import epic
from epic.errors import TopologyError
from epic.operators import build as build_operator
from epic.topology import MapNode, Topology, TopologyWarning

SCHEMA = {"sid": "int64", "ts": "int64", "v": "float64"}


def source(t, name="src", rows=(), **kw):
    return t.source(name, epic.iterator_source(list(rows), schema=SCHEMA, time="ts", unit="ps",
                                               **kw))


def test_nodes_are_frozen_configs_with_schemas_at_build_time():
    """Every node is a frozen dataclass and exposes output schema, time column and unit."""
    t = Topology("t")
    s = source(t)
    w = t.window("w", s, epic.few_time(1, 1, None), key="sid", aggregates=[epic.mean("v")])
    node = t.node("w")
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.name = "other"
    assert node.output_schema.names == ["sid", "window_start", "window_end", "final", "mean_v"]
    assert (w.time, w.unit, w.bounded) == ("window_end", "ps", True)
    assert t.node("src").output.schema.names == ["sid", "ts", "v"]


def test_build_returns_an_operator_without_a_runner():
    """The registry builds a node's runtime logic from its config alone (as the Spark tasks do)."""
    t = Topology("t")
    s = source(t)
    f = t.filter("f", s, lambda b: pc.greater(b["v"], 1.0))
    op = build_operator(t.node("f"))
    out = op.on_batch(pa.record_batch([[1, 2], [0, 1], [0.5, 2.5]], schema=s.schema))
    assert out[0].column("v").to_pylist() == [2.5]
    assert isinstance(op, epic.Operator)
    assert f.schema == s.schema


def test_delay_logging_adds_the_entry_column_everywhere():
    """With delay logging, every stream carries ``_entry``; user-visible columns hide it."""
    t = Topology("t", delay_logging=True)
    s = source(t)
    m = t.map("m", s, lambda b: {"ts": b["ts"], "w": pc.multiply(b["v"], 2)})
    assert m.schema.names == ["ts", "w", "_entry"]
    assert m.columns == ["ts", "w"]


# --- validation rules: one test each ---------------------------------------------------------


def test_rule_unique_names():
    """Two nodes with one name: the error names the node, the field and the fix."""
    t = Topology("t")
    s = source(t)
    t.filter("f", s, lambda b: pc.greater(b["v"], 0))
    with pytest.raises(TopologyError, match=r"node 'f', name: .*already exists.*Fix: give every"):
        t.filter("f", s, lambda b: pc.greater(b["v"], 0))


def test_rule_dangling_stream():
    """A stream from another topology is dangling here."""
    a, b = Topology("a"), Topology("b")
    s = source(a)
    source(b)
    with pytest.raises(TopologyError, match=r"node 'f', input: stream 'src' does not belong .*"
                                            r"dangling.*Fix"):
        b.filter("f", s, lambda x: x)


def test_rule_unused_stream_is_a_warning():
    """A stream nobody reads is a warning, not an error."""
    t = Topology("t")
    s = source(t)
    a, b = t.splitstream("split", s, 2, epic.broadcast())
    t.sink("out", a, epic.console_sink())
    with pytest.warns(TopologyWarning, match=r"node 'split': stream 'split.1' is never read"):
        found = t.validate()
    assert len(found) == 1


def test_rule_no_cycles():
    """Nodes assembled by hand into a loop are rejected by validate()."""
    t = Topology("t")
    s = source(t)
    m1 = t.map_rows("m1", s, lambda r: r)
    t.map_rows("m2", m1, lambda r: r)
    m2_out = t.node("m2").output
    looped = dataclasses.replace(t.node("m1"), inputs=(m2_out,))
    cyc = Topology.from_nodes("cyc", [t.node("src"), looped, t.node("m2")])
    with pytest.raises(TopologyError, match=r"cycle m\d <- m\d <- m\d.*Fix: topologies are acyclic"):
        cyc.validate()


def test_rule_schema_compatibility_between_producer_and_consumer():
    """Merging streams of different schemas names the node, the input and the fix."""
    t = Topology("t")
    a = source(t, "a")
    b = t.map("b", source(t, "b0"), lambda x: {"ts": x["ts"], "v": x["v"]})
    with pytest.raises(TopologyError, match=r"node 'm', inputs\[1\]: stream 'b' has schema .*"
                                            r"Fix: map both to the same columns"):
        t.merge("m", [a, b])


def test_rule_schema_compatibility_sink_columns():
    """A sink asking for a column the stream lacks fails when built."""
    t = Topology("t")
    s = source(t)
    with pytest.raises(TopologyError, match=r"node 'out', sink: columns \['speed'\] are not in"):
        t.sink("out", s, epic.csv_sink("x.csv", columns=["ts", "speed"]))


def test_rule_schema_compatibility_map_output_keeps_time():
    """A map dropping the event-time column is told to keep it or name a new one."""
    t = Topology("t")
    s = source(t)
    with pytest.raises(TopologyError, match=r"node 'm', time: the output has no event-time "
                                            r"column 'ts'.*Fix: keep 'ts'"):
        t.map("m", s, lambda b: {"v": b["v"]})


def test_rule_valid_window_parameters():
    """A window length that is not a whole number of ticks is refused with the node named."""
    t = Topology("t")
    s = t.source("s", epic.iterator_source([], schema=SCHEMA, time="ts", unit="s"))
    with pytest.raises(TopologyError, match=r"node 'w', spec: .*whole number of s ticks"):
        t.window("w", s, epic.few_time(1.5, 0.5), aggregates=[epic.count()])


def test_window_spec_errors_say_the_fix_itself():
    """A spec's error carries its own fix (never "Fix: see the message"): the nearest whole
    number of ticks, the merge panes=True needs, the columns to choose from, the right
    landmark constructor."""
    from epic.errors import SpecError

    t = Topology("t")
    s = t.source("s", epic.iterator_source([], schema=SCHEMA, time="ts", unit="ms"))
    cases = [
        (lambda: t.window("w1", s, epic.tumbling(0.0015), aggregates=[epic.count()]),
         r"length 0.0015 s is not a whole number of ms ticks .*1.5 ticks; give a multiple of "
         r"1 ms, e.g. 0.002 s \(2 ticks\)"),
        (lambda: t.window("w2", s, epic.few_time(1, 0.5, panes=True), aggregates=[
            epic.agg(epic.aggregate_function("s_only", init=lambda: 0, add=lambda a, e: a + e,
                                             remove=lambda a, e: a - e, replace=True), "v")]),
         r"panes=True needs a merge hook; define merge\(older, newer\)"),
        (lambda: t.window("w3", s, epic.tumbling(1), aggregates=[epic.mean("nope")]),
         r"column 'nope' is not in the input; aggregate one of its columns: sid, ts, v"),
        (lambda: t.window("w4", s, epic.tumbling(1), key="nope", aggregates=[epic.count()]),
         r"key column 'nope' is not in the input; key by one of its columns: sid, ts, v"),
    ]
    for make, message in cases:
        with pytest.raises(TopologyError, match=message) as info:
            make()
        assert "see the message" not in str(info.value) and "Fix: see" not in str(info.value)
    with pytest.raises(SpecError, match=r"e\.g\. landmark_count\(ef=1\)"):
        epic.landmark_count(None)


def test_rule_valid_aggregate_parameters():
    """An aggregate on a missing column, and an aggregate without remove/merge on a sliding window."""
    t = Topology("t")
    s = source(t)
    with pytest.raises(TopologyError, match=r"node 'w', aggregates: .*column 'speed' is not in"):
        t.window("w", s, epic.tumbling(1), aggregates=[epic.mean("speed")])
    plain = epic.aggregate_function("plain_sum_topo", init=lambda: 0, add=lambda s, e: s + e,
                                    replace=True)
    with pytest.raises(TopologyError, match=r"node 'w2', aggregates: .*neither remove nor merge"):
        t.window("w2", s, epic.few_time(2, 1), aggregates=[epic.agg(plain, "v")])
    with pytest.raises(TopologyError, match=r"node 'w3', aggregates: no aggregates"):
        t.window("w3", s, epic.tumbling(1), aggregates=[])


def test_rule_no_blocking_operator_on_unbounded_stream():
    """A Parquet sink (complete only at the end) on a live source is refused."""
    t = Topology("t")
    s = source(t, bounded=False)
    t.sink("out", s, epic.parquet_sink("x.parquet"))
    with pytest.raises(TopologyError, match=r"node 'out', input: .*emits only when its input ends"
                                            r".*unbounded.*Fix"):
        t.validate()


# --- other build-time checks --------------------------------------------------------------


def test_invalid_node_name():
    """Names must be usable as checkpoint and topic identities."""
    t = Topology("t")
    with pytest.raises(TopologyError, match="not valid"):
        source(t, "has space")


def test_map_schema_probe_failure_asks_for_schema():
    """When the output schema cannot be probed, the fix is to declare it."""
    t = Topology("t")
    s = source(t)

    def needs_rows(b):
        return {"ts": b["ts"], "first": [b["v"][0].as_py()] * len(b)}
    with pytest.raises(TopologyError, match=r"node 'm', schema: could not infer.*pass schema="):
        t.map("m", s, needs_rows)
    out = t.map("m", s, needs_rows, schema={"ts": "int64", "first": "float64"})
    assert out.schema.names == ["ts", "first"]


def test_source_time_column_must_be_integer():
    """Event time is an integer column; a float time column is refused at the source."""
    t = Topology("t")
    with pytest.raises(TopologyError, match=r"node 's', source.time: .*has type double"):
        t.source("s", epic.iterator_source([], schema={"ts": "float64"}, time="ts", unit="s"))


@pytest.mark.parametrize(("make", "message"), [
    (lambda: epic.iterator_source([], schema=[("ts", "int64"), ("ts", "int64")], time="ts",
                                  unit="s"), r"column 'ts' given more than once"),
    (lambda: epic.csv_source("x.csv", [("ts", "int64"), ("a", "int64"), ("a", "int64")],
                             time="ts", unit="s"), r"column 'a' given more than once"),
    (lambda: epic.iterator_source([], schema=SCHEMA, time="ts", unit="ms", lateness=-1),
     r"lateness=-1 must be >= 0"),
    (lambda: epic.iterator_source([], schema=SCHEMA, time="ts", unit="ms",
                                  lateness=float("nan")), r"lateness must be a finite number"),
    (lambda: epic.csv_source("x.csv", SCHEMA, time="ts", unit="s", batch_rows=0),
     r"csv_source: batch_rows=0 must be a whole number >= 1"),
    (lambda: epic.iterator_source([], schema=SCHEMA, time="ts", unit="s", batch_rows=-5),
     r"iterator_source: batch_rows=-5 must be a whole number >= 1"),
    (lambda: epic.parquet_source("x.parquet", schema=SCHEMA, time="ts", unit="s",
                                 batch_rows=0),
     r"parquet_source: batch_rows=0 must be a whole number >= 1"),
])
def test_a_source_refuses_what_it_cannot_read_when_built(make, message):
    """Duplicate columns, a negative or NaN lateness (a negative one made rows in order late)
    and a batch size below 1 are refused when the source is made, naming the parameter."""
    with pytest.raises(epic.errors.SpecError, match=message):
        make()


def test_numpy_numbers_are_taken_as_durations_and_batch_sizes():
    import numpy as np

    s = epic.iterator_source([], schema=SCHEMA, time="ts", unit="ms", lateness=np.float64(1.5),
                             batch_rows=np.int64(1000))
    assert (s.lateness_ticks(), s.batch_rows) == (1500, 1000)


@pytest.mark.parametrize("length", [float("nan"), float("inf")])
def test_a_window_length_that_is_no_number_is_a_spec_error(length):
    t = Topology("t")
    s = t.source("s", epic.iterator_source([], schema=SCHEMA, time="ts", unit="s"))
    with pytest.raises(TopologyError, match=r"node 'w', spec: length must be a finite number"):
        t.window("w", s, epic.tumbling(length), aggregates=[epic.count()])


def test_window_then_aggregate_form():
    """``t.window(...).aggregate(...)`` is the same node as passing aggregates."""
    t = Topology("t")
    s = source(t)
    a = t.window("w", s, epic.tumbling(1), key="sid").aggregate(epic.count(), epic.max("v"))
    assert a.schema.names == ["sid", "window_start", "window_end", "final", "count", "max_v"]
    assert isinstance(t.node("w").spec, epic.windows.FewTimeWindow)


def test_predicate_window_node():
    """Predicate windows dispatch to their own operator; the output time column is ``ts``."""
    t = Topology("t")
    s = source(t)
    w = t.window("w", s, epic.predicate_window(lambda cur: cur["v"] > 1, "newstart"),
                 key="sid", aggregates=[epic.count()])
    assert w.time == "ts"
    assert type(build_operator(t.node("w"))).__name__ == "PredicateWindowOperator"


def test_param_defaults_and_scope():
    """``epic.param`` returns the default, or the converted value set by the CLI."""
    from epic.topology import param_scope
    assert epic.param("n", 3) == 3
    with param_scope({"n": "7", "flag": "yes"}) as scope:
        assert epic.param("n", 3) == 7
        assert epic.param("flag", False) is True
    assert scope.used == {"n", "flag"}
    with param_scope({"n": "x"}):
        with pytest.raises(TopologyError, match="cannot convert 'x'"):
            epic.param("n", 3)


def test_validate_requires_source_and_sink():
    """A topology without a sink writes nothing and is refused."""
    t = Topology("t")
    source(t)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(TopologyError, match="has no sink"):
            t.validate()


def test_window_without_aggregate_is_a_warning():
    """t.window(...) without .aggregate(...) adds nothing: validation says so instead of
    dropping it silently."""
    import warnings

    t = epic.Topology("pending_window")
    s = t.source("s", epic.iterator_source([], schema={"ts": "int64", "v": "float64"},
                                           time="ts", unit="s"))
    t.window("forgotten", s, epic.tumbling(10))
    t.sink("out", s, epic.collect_sink())
    with warnings.catch_warnings(record=True):
        found = t.validate()
    assert any("'forgotten'" in w and ".aggregate(" in w for w in found)
