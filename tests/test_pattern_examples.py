"""The four ESL-TS example topologies: they validate, run, and equal the brute-force matcher."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
import epic
from epic.cli import load_topology
from epic.topology import param_scope
from pattern_reference import brute_matches

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"
# file -> (pattern node, generator function); small parameters keep each run well under 1 s
EXAMPLES = {
    "web_purchases": ("ad_purchases", "clicks", {"sessions": "120"}),
    "web_first_description": ("first_description", "clicks", {"sessions": "150"}),
    "highway_jams": ("jams", "readings", {"segments": "8", "hours": "4"}),
    "highway_accidents": ("accidents", "differences", {"segments": "6", "hours": "3"}),
}


def load(name):
    node, gen, params = EXAMPLES[name]
    with param_scope(params):
        mod = runpy.run_path(str(TOPOLOGIES / f"{name}.py"))
    return mod["topology"], mod["topology"]._nodes[node], mod[gen]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_validates(name):
    """Each example builds and validates without warnings (what `epic validate` checks)."""
    assert load_topology(TOPOLOGIES / f"{name}.py").validate(warn=False) == []


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_equals_brute_force(name):
    """The pattern node's matches (run by epic.run) are the brute-force matcher's, per key."""
    topo, node, gen = load(name)
    cfg = node.processor
    src = topo._nodes[node.input.node]
    t = epic.Topology(f"check_{name}")
    s = t.source("in", epic.iterator_source(gen, schema=src.source.schema, time=src.source.time,
                                            unit=src.source.unit))
    out_schema = cfg.output_schema
    select = dict(cfg.select)
    p = t.pattern("p", s, cfg.pattern, key=list(cfg.key), select=select,
                  schema={n: out_schema.field(n).type for n in select})
    t.sink("out", p, epic.collect_sink())
    got_rows = epic.run(t).collected["out"].to_pylist()
    assert got_rows, "the generated data should contain matches"
    rows = [r for b in gen() for r in b.to_pylist()]
    want = brute_matches(cfg.pattern, rows, key=cfg.key[0], time=src.source.time,
                         within=cfg.within, select=select)
    got: dict = {}
    for r in got_rows:
        got.setdefault(r[cfg.key[0]], []).append(
            (r["match_start"], r["match_end"], *[r[n] for n in select]))
    assert got == {k: v for k, v in want.items() if v}


def test_example_outputs_make_sense(tmp_path):
    """Spot checks of the four semantics on the CSV files the examples write (default sizes)."""
    import csv
    out = {}
    for name in EXAMPLES:
        epic.run(load_topology(TOPOLOGIES / f"{name}.py", params={"out": str(tmp_path / name)}))
        (f,) = (tmp_path / name).glob("*.csv")
        out[name] = list(csv.DictReader(f.open()))
    assert all(int(r["ad_time"]) < int(r["bought"]) for r in out["web_purchases"])
    paths = out["web_first_description"]
    assert all(int(r["pages"]) < 20 for r in paths)
    assert len({r["session"] for r in paths}) == len(paths)          # anchored: one per session
    for r in out["highway_jams"]:
        assert float(r["from_speed"]) > 50 and 1 <= int(r["readings"]) <= 6
        assert float(r["to_speed"]) < 0.3 * float(r["from_speed"]) + 0.05
        assert int(r["match_end"]) - int(r["match_start"]) <= 360
    for r in out["highway_accidents"]:
        assert float(r["baseline"]) <= 15 and int(r["rise"]) <= 6
        assert 3 <= int(r["disturbed"]) <= 60
