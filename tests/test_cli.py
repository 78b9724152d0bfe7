"""The command line: run, validate, graph (DOT compared as text), parameters, discovery."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from epic.cli import app, load_topology, parse_params
from epic.errors import TopologyError

runner = CliRunner()

TOPO = textwrap.dedent('''
    import epic

    n = epic.param("n", 6)
    out = epic.param("out", "out.csv")

    flow = epic.Topology("tiny")
    s = flow.source("nums", epic.iterator_source(
        lambda: ({"ts": i, "k": i % 2} for i in range(n)),
        schema={"ts": "int64", "k": "int64"}, time="ts", unit="s"))
    even, odd = flow.splitstream("split", s, 2, lambda i, r: r["k"] == i)
    m = flow.merge("merged", [even, odd])
    flow.sink("out", m, epic.csv_sink(out, columns=["ts", "k"]))
''')

EXPECTED_DOT = textwrap.dedent('''\
    digraph "tiny" {
      rankdir=LR;
      node [fontname="Helvetica", fontsize=10, style=filled, fillcolor="#f5f5f5"];
      edge [fontname="Helvetica", fontsize=9];
      "nums" [label="nums\\npython <lambda>", shape=cds, fillcolor="#dbeafe"];
      "split" [label="split\\nsplitstream x2: rows <lambda>", shape=trapezium, fillcolor="#fef3c7"];
      "merged" [label="merged\\nmerge 2 streams by ts", shape=invtrapezium];
      "out" [label="out\\ncsv out.csv", shape=folder, fillcolor="#dcfce7"];
      "nums" -> "split" [label="nums", penwidth=1.0];
      "split" -> "merged" [label="split.0", penwidth=1.0, taillabel="0", headlabel="0"];
      "split" -> "merged" [label="split.1", penwidth=1.0, taillabel="1", headlabel="1"];
      "merged" -> "out" [label="merged", penwidth=1.0];
    }
''')


@pytest.fixture
def topo(tmp_path):
    p = tmp_path / "tiny.py"
    p.write_text(TOPO)
    return p


def test_run_with_params_both_ways(topo, tmp_path):
    """`--param k=v` and `-- --k v` both reach epic.param."""
    out = tmp_path / "a.csv"
    r = runner.invoke(app, ["run", str(topo), "--param", f"out={out}", "--", "--n", "4"])
    assert r.exit_code == 0, r.output
    assert out.read_text() == "ts,k\n0,0\n1,1\n2,0\n3,1\n"
    assert "tiny: done in" in r.output


def test_unknown_parameter_is_an_error(topo):
    """A parameter the topology never reads is reported with the ones it does read."""
    r = runner.invoke(app, ["run", str(topo), "-p", "nn=3"])
    assert r.exit_code == 1
    assert "unknown parameter(s) nn; the topology reads: n, out" in r.output


def test_usage_slips_are_named(topo, tmp_path):
    """A mistyped option, a forgotten value, a parameter given twice, an epic call refusing
    its arguments, a file not named *.py: one line naming what and where (docs/topologies.md,
    "Command line")."""
    r = runner.invoke(app, ["run", str(topo), "--stat", "x.json"])
    assert r.exit_code == 1
    assert "unknown parameter(s) stat" in r.output
    assert "--stat: did you mean the option --stats?" in r.output
    r = runner.invoke(app, ["run", str(topo), "--", "--out"])
    assert r.exit_code == 1 and "--out was given without a value" in r.output
    assert not (Path.cwd() / "true").exists()
    r = runner.invoke(app, ["run", str(topo), "-p", "n=3", "--", "--n", "4"])
    assert r.exit_code == 1
    assert "parameter 'n' is given twice (--param n=3 and --n 4)" in r.output
    bad = tmp_path / "unit.py"
    bad.write_text(TOPO.replace('time="ts", unit="s"', 'time="ts", unit="sec"'))
    r = runner.invoke(app, ["validate", str(bad)])
    assert r.exit_code == 1 and f"{bad}:8: " in r.output and "unknown time unit" in r.output
    txt = tmp_path / "tiny.topology"
    txt.write_text(TOPO)
    r = runner.invoke(app, ["validate", str(txt)])
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output


def test_graph_refuses_what_it_cannot_draw_from(topo, tmp_path):
    """`epic graph --stats`: a missing file, a file that is not `epic run --stats` output, the
    counters of another topology, --stats with --run, an unknown suffix: one line each."""
    out = str(tmp_path / "g.svg")
    r = runner.invoke(app, ["graph", str(topo), "-o", out, "--stats", str(tmp_path / "no.json")])
    assert r.exit_code == 1 and "no.json: no such file" in r.output
    (tmp_path / "bad.json").write_text("{oops")
    r = runner.invoke(app, ["graph", str(topo), "-o", out, "--stats", str(tmp_path / "bad.json")])
    assert r.exit_code == 1 and "not an `epic run --stats` file" in r.output
    (tmp_path / "other.json").write_text(json.dumps({"edges": {"readings": 3}}))
    r = runner.invoke(app, ["graph", str(topo), "-o", out, "--stats",
                            str(tmp_path / "other.json")])
    assert r.exit_code == 1 and "streams not in topology" in r.output and "readings" in r.output
    # the counters of another topology sharing a stream name; of this one's, a stream missing
    stats = tmp_path / "stats.json"
    r = runner.invoke(app, ["run", str(topo), "--stats", str(stats), "-p",
                            f"out={tmp_path / 'o.csv'}", "-p", "n=10"])
    assert r.exit_code == 0, r.output
    doc = json.loads(stats.read_text())
    for change, says in (({"topology": "sensors"}, "counts are of topology 'sensors'"),
                         ({"edges": {k: v for k, v in doc["edges"].items() if k != "merged"}},
                          "none for its streams merged")):
        (tmp_path / "changed.json").write_text(json.dumps({**doc, **change}))
        r = runner.invoke(app, ["graph", str(topo), "-o", out, "--stats",
                                str(tmp_path / "changed.json")])
        assert r.exit_code == 1 and says in r.output, r.output
    r = runner.invoke(app, ["graph", str(topo), "-o", out, "--run", "--stats",
                            str(tmp_path / "other.json")])
    assert r.exit_code == 1 and "--stats and --run are alternatives" in r.output
    r = runner.invoke(app, ["graph", str(topo), "-o", str(tmp_path / "g.txt")])
    assert r.exit_code == 1 and ".txt is not a format" in r.output
    assert "Traceback" not in r.output and not list(tmp_path.glob("g.*"))


def test_validate_warns_of_a_missing_input_file(tmp_path):
    p = tmp_path / "csv.py"
    p.write_text(textwrap.dedent('''
        import epic
        t = epic.Topology("c")
        s = t.source("a", epic.csv_source("nope.csv", {"ts": "int64"}, time="ts", unit="ms"))
        t.sink("o", s, epic.collect_sink())
    '''))
    r = runner.invoke(app, ["validate", str(p)])
    assert r.exit_code == 0, r.output
    assert "source 'a': input file nope.csv not found" in r.output
    assert "1 warning(s)" in r.output


def test_validate_lists_nodes_and_schemas(topo):
    """`epic validate` builds the topology and prints every stream's schema and time."""
    r = runner.invoke(app, ["validate", str(topo)])
    assert r.exit_code == 0, r.output
    assert "split.0: [ts, k] time=ts (s)" in r.output
    assert "ok: topology 'tiny', 4 nodes, 4 streams, 0 warning(s)" in r.output


def test_validate_reports_errors_without_traceback(tmp_path):
    """A broken topology exits 1 with the node, field and fix, and no traceback."""
    p = tmp_path / "bad.py"
    p.write_text(TOPO.replace('flow.merge("merged", [even, odd])',
                              'flow.merge("merged", [even, odd])\nflow.merge("merged", [even])'))
    r = runner.invoke(app, ["validate", str(p)])
    assert r.exit_code == 1
    assert "node 'merged', name: a node with this name already exists" in r.output
    assert "Traceback" not in r.output


def test_graph_dot_text(topo, tmp_path):
    """`epic graph -o x.dot` writes the expected DOT text."""
    dot = tmp_path / "g.dot"
    r = runner.invoke(app, ["graph", str(topo), "-o", str(dot)])
    assert r.exit_code == 0, r.output
    assert dot.read_text() == EXPECTED_DOT


def test_graph_svg_without_graphviz_is_drawn_with_matplotlib(topo, tmp_path, monkeypatch):
    """Without Graphviz, `-o graph.svg` is drawn with matplotlib: a real SVG naming the nodes."""
    import shutil
    monkeypatch.setattr(shutil, "which", lambda name: None)
    r = runner.invoke(app, ["graph", str(topo), "-o", str(tmp_path / "graph.svg")])
    assert r.exit_code == 0, r.output
    svg = (tmp_path / "graph.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg


def test_graph_layers_follow_longest_paths(topo):
    """The matplotlib layout puts each node one column right of its furthest input."""
    from epic.cli import load_topology
    from epic.graph_render import layers

    t = load_topology(topo)
    pos = layers(t)
    for n in t.topological_order():
        for s in n.inputs:
            assert pos[n.name][0] > pos[s.node][0]


def test_graph_svg_falls_back_to_dot_when_nothing_can_draw(topo, tmp_path, monkeypatch):
    """Without Graphviz and without matplotlib, `-o graph.svg` writes graph.dot and says so."""
    import shutil

    import epic.graph_render as gr
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(gr, "_matplotlib_available", lambda: False)
    r = runner.invoke(app, ["graph", str(topo), "-o", str(tmp_path / "graph.svg")])
    assert r.exit_code == 0, r.output
    assert "dot` is not installed" in r.output
    assert (tmp_path / "graph.dot").read_text() == EXPECTED_DOT


def test_graph_edge_widths_follow_measured_rows(topo, tmp_path):
    """After a run (--stats), edges carry row counts and widths by volume."""
    stats = tmp_path / "stats.json"
    r = runner.invoke(app, ["run", str(topo), "--stats", str(stats), "-p",
                            f"out={tmp_path / 'o.csv'}", "-p", "n=10"])
    assert r.exit_code == 0, r.output
    assert json.loads(stats.read_text())["edges"] == {"nums": 10, "split.0": 5, "split.1": 5,
                                                      "merged": 10}
    dot = tmp_path / "g.dot"
    r = runner.invoke(app, ["graph", str(topo), "-o", str(dot), "--stats", str(stats)])
    text = dot.read_text()
    assert '"nums" -> "split" [label="nums\\n10 rows", penwidth=8.0];' in text
    assert 'label="split.0\\n5 rows", penwidth=6.23' in text


def test_discovery_by_name(tmp_path):
    """Several module-level topologies need --name; a wrong name lists the choices."""
    p = tmp_path / "two.py"
    p.write_text(TOPO + "\nsecond = epic.Topology('second')\n")
    with pytest.raises(TopologyError, match="several topologies"):
        load_topology(p)
    assert load_topology(p, "flow").name == "tiny"
    assert load_topology(p, "second").name == "second"
    with pytest.raises(TopologyError, match="found: 'tiny' \\(variable flow\\), 'second' "
                                            "\\(variable second\\). Fix: --name takes"):
        load_topology(p, "third")


def test_parse_params():
    """Extra options after `--`: values, flags, key=value, dashes to underscores."""
    assert parse_params(["a-b=1"], ["--referee-events", "dir", "--delays", "--x=2"]) == \
        {"a_b": "1", "referee_events": "dir", "delays": "true", "x": "2"}
    with pytest.raises(TopologyError, match="key=value"):
        parse_params(["oops"], [])
    for pairs, extra in ((["=3"], []), ([], ["--=3"]), ([" =3"], [])):
        with pytest.raises(TopologyError, match="no parameter name"):
            parse_params(pairs, extra)


def test_topics_commands(tmp_path):
    """`epic topics ls|tail|stat` inspect a topic written by a topology."""
    import epic
    t = epic.Topology("w")
    s = t.source("s", epic.iterator_source([{"ts": 1}, {"ts": 2}], schema={"ts": "int64"},
                                           time="ts", unit="ms"))
    t.sink("tp", s, epic.topic_sink(tmp_path / "topic"))
    epic.run(t)
    r = runner.invoke(app, ["topics", "stat", str(tmp_path / "topic")])
    assert r.exit_code == 0 and "rows       2" in r.output
    r = runner.invoke(app, ["topics", "tail", str(tmp_path / "topic"), "-n", "1"])
    assert r.output.splitlines() == ["ts", "2"]
    r = runner.invoke(app, ["topics", "ls", str(tmp_path / "topic")])
    assert r.exit_code == 0 and "eos" in r.output


def test_real_subprocess(topo, tmp_path):
    """Once as a real process: `python -m epic run` exits 0 and writes the output."""
    out = tmp_path / "sub.csv"
    env = dict(os.environ, COLUMNS="120")
    proc = subprocess.run([sys.executable, "-m", "epic", "run", str(topo), "--no-progress",
                           "--", "--out", str(out), "--n", "3"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == "ts,k\n0,0\n1,1\n2,0\n"
    assert "tiny: done in" in proc.stderr
    bad = subprocess.run([sys.executable, "-m", "epic", "run", str(tmp_path / "missing.py")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 1 and "no such topology file" in bad.stderr


def test_a_bare_flag_is_refused_for_a_parameter_without_a_default(tmp_path):
    """docs/topologies.md: a bare ``--flag`` means true only for true/false parameters; one
    read as ``epic.param("dest")`` (no default) took the string 'true' (review s35)."""
    f = tmp_path / "nodef.py"
    f.write_text(TOPO.replace('epic.param("out"', 'epic.param("dest", None) or epic.param("out"'))
    r = runner.invoke(app, ["validate", str(f), "--", "--dest"])
    assert r.exit_code == 1 and "--dest was given without a value" in r.output, r.output
