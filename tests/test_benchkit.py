"""The shared measuring code of the benchmark scripts (scripts/benchkit): its pure functions,
without running a benchmark."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from benchkit import debs_report, docs, proc, tables  # noqa: E402

PARENTS = {1: 0, 10: 1, 11: 10, 12: 11, 13: 10, 20: 1, 21: 20}


def test_tree_pids_walks_the_descendants_of_a_fake_parent_map():
    """A tree is its root and every descendant, and nothing else."""
    assert proc.tree_pids(10, PARENTS) == {10, 11, 12, 13}
    assert proc.tree_pids(21, PARENTS) == {21}
    assert proc.tree_pids(1, PARENTS) == set(PARENTS) - {0} | {1}
    assert proc.tree_pids(99, PARENTS) == {99}      # an unknown root is alone


def test_tree_pids_stops_on_a_cycle():
    """A pid reused while its parent map was read (a cycle) does not loop forever."""
    assert proc.tree_pids(5, {5: 6, 6: 5}) == {5, 6}


def test_this_process_tree_from_proc():
    """The live /proc readers see this process, a child of it, its CPU and its memory."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             start_new_session=True)
    try:
        assert proc.parent_map()[os.getpid()] == os.getppid()
        pss, pids = proc.tree_pss(os.getpid())
        assert {os.getpid(), child.pid} <= pids and pss > 0
        assert proc.tree_cpu_seconds() > 0 and proc.machine_cpu_seconds() > 0
        with proc.Sampler(child.pid, every=0.05, load_every=0.05) as s:
            pass
        assert s.peak_pss > 0 and s.machine_cpu_s >= 0 and s.mean_load is not None
    finally:
        proc.kill_tree(child, grace=5)
    assert child.poll() is not None


def test_fmt_num():
    """Thousands separators, fixed digits, a dash for a missing value."""
    assert tables.fmt_num(1234567) == "1,234,567"
    assert tables.fmt_num(1.25, 1) == "1.2" and tables.fmt_num(None) == "-"


def test_md_table_aligns_numbers_right_and_escapes_pipes():
    """Columns named in ``left`` are left-aligned, the rest right; a ``|`` in a cell is not a
    column break."""
    text = tables.md_table(["case", "rows"], [["a|b", "1,000"]], left=("case",))
    assert text.splitlines() == ["| case | rows |", "|---|---:|", "| a/b | 1,000 |"]


def test_text_table_pads_columns():
    """The console form has the same cells, padded to one width per column."""
    lines = tables.text_table(["engine", "s"], [["numpy", "0.10"], ["spark", "12.50"]],
                              left=("engine",)).splitlines()
    assert lines[0] == "| engine |     s |"
    assert lines[1] == "|--------|-------|"
    assert lines[3] == "| spark  | 12.50 |"
    assert len({len(ln) for ln in lines}) == 1


def test_replace_section_keeps_the_rest():
    """Only the text between the markers is replaced; missing markers append the section."""
    b, e = "<!-- x:begin -->", "<!-- x:end -->"
    text = f"head\n\n{b}\nold\n{e}\ntail\n"
    assert docs.replace_section(text, f"{b}\nnew\n{e}\n", b, e) == f"head\n\n{b}\nnew\n{e}\ntail\n"
    assert docs.replace_section("head\n", f"{b}\nnew\n{e}\n", b, e) == f"head\n\n{b}\nnew\n{e}\n"


def tiny_results(wall_s=500.0):
    """The smallest results dict scripts/bench_debs.py writes: one ``all`` case and a floor."""
    case = {"case": "all", "runtime": "deploy", "fuse": True, "command": "c", "status": "ok",
            "rc": 0, "wall_s": wall_s, "input_rows": 1000, "game_s": 60, "game_done": 60,
            "peak_rss": 2**30, "rows_out": 5, "out_bytes": 100, "progress": {},
            "top_nodes": [["q", 1000, 5]], "log_tail": "", "started": "",
            "streams": [{"stream": "q4.csv", "query": "q4", "rows": 5, "sampled": "all",
                         "p50_ms": 1.0, "p99_ms": 2.0, "max_ms": 3.0, "bytes": 100,
                         "read_s": 0.1, "error": None}]}
    return {"argv": "scripts/bench_debs.py --cases all", "date": "d", "machine": "m",
            "load_start": "l0", "load_end": "l1", "input": "g.csv", "input_bytes": 10**9,
            "input_rows": 1000, "game_s": 60, "target_seconds": 600.0, "runtime_label": "deploy",
            "timed_delays": True,   # the case has delay logging: hold it to the 600 s too
            "floor": {"rows": 1000, "wall_s": 0.5, "rows_per_s": 2000.0, "x_real_time": 120.0},
            "cases": [case]}


def test_results_to_markdown():
    """The JSON -> markdown step: the command, a case table with the floor, the verdict and the
    delay table."""
    text = debs_report.docs_section(tiny_results(), "a note")
    assert text.startswith(debs_report.DOC_BEGIN) and text.rstrip().endswith(debs_report.DOC_END)
    assert "scripts/bench_docs.py" in text and "scripts/bench_debs.py --cases all" in text
    rows = [ln for ln in text.splitlines() if ln.startswith("| ")]
    assert rows[0].startswith("| case | runtime | input rows | wall s |")
    assert rows[1].startswith("| all | deploy --fuse | 1,000 | 500.0 | 2 | 0.12 |")
    assert rows[2].startswith("| floor: pyarrow parse |")
    assert "| q4.csv | q4 | 5 | 1.0 | 2.0 | 3.0 | all |" in rows
    assert "targets met** (500 s <= 600 s)" in text and "a note" in text
    missed = debs_report.docs_section(tiny_results(wall_s=700.0), "")
    assert "MISSED**: 700 s > 600 s target" in missed


def test_bench_docs_renders_a_results_file(tmp_path):
    """scripts/bench_docs.py RESULTS.json rewrites the section and draws both plots."""
    pytest.importorskip("matplotlib")
    sys.path.insert(0, str(ROOT / "scripts"))
    import bench_docs

    res = tmp_path / "results.json"
    res.write_text(json.dumps(tiny_results()))
    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n\nby hand\n")
    img = tmp_path / "img"
    assert bench_docs.main([str(res), "--doc", str(doc), "--img-dir", str(img)]) == 0
    text = doc.read_text()
    assert text.startswith("# Performance\n\nby hand\n\n" + debs_report.DOC_BEGIN)
    assert sorted(p.name for p in img.iterdir()) == ["debs_delays.png", "debs_throughput.png"]
    assert bench_docs.main([str(res), "--doc", str(doc), "--img-dir", str(img)]) == 0
    assert doc.read_text() == text


def _hop(case, hop, rows_per_s, us, fused=False):
    return {"case": case, "hop": hop, "query": hop, "fused": fused, "rows": 4_000_000,
            "batches": 4, "busy_s": 4.0, "ms_per_batch": 1000.0, "rows_per_s": rows_per_s,
            "us_per_row": us, "cpu_us_per_row_hop": 1.0, "wall_s": 10.0,
            "phases_ms": {"addBatch": 3000, "latestOffset": 600, "walCommit": 100,
                          "triggerExecution": 4000}}


def test_topics_report_checks_the_unfused_hops_and_says_where_time_goes():
    from benchkit import topics_report as tr

    res = {"stateless_target": 1_000_000, "stateful_us_target": 1.0, "hops": [
        _hop("chain", "scale", 1_200_000, 0.8), _hop("chain", "keep", 900_000, 1.1),
        _hop("stateful 16", "count", 2_000_000, 0.5),
        _hop("stateful 10000", "count", 100_000, 9.0),          # not a target
        _hop("chain+fuse", "fused", 10, 9.0, fused=True)]}      # unfused ran: not checked
    miss = tr.misses(res)
    assert len(miss) == 1 and "keep" in miss[0] and "900,000" in miss[0]
    res["hops"][2]["us_per_row"] = 1.5
    assert len(tr.misses(res)) == 2
    only_fused = {**res, "hops": [_hop("chain+fuse", "fused", 2e6, 0.5, True),
                                  _hop("stateful 16+fuse", "fused", 3e6, 1.2, True)]}
    assert ["stateful 16+fuse" in m for m in tr.misses(only_fused)] == [True]
    assert tr.where(res["hops"][0]["phases_ms"], 4000) == \
        "addBatch 75%, latestOffset 15%, other 10%"
    assert tr.where({}, 0) == "-"
    text = tr.table_text(res)
    assert "addBatch 75%" in text and "1,200,000" in text


def test_topics_docs_section_replaces_only_its_markers(tmp_path):
    from benchkit import topics_report as tr

    doc = tmp_path / "perf.md"
    doc.write_text(f"# P\n\nhand\n\n{tr.DOC_BEGIN}\nold\n{tr.DOC_END}\n\ntail\n")
    res = {"argv": "x", "date": "d", "machine": "m", "io": "direct", "rows": 4_000_000,
           "batch_rows": 1_000_000, "load_start": "a", "load_end": "b",
           "stateless_target": 1_000_000, "stateful_us_target": 1.0,
           "hops": [_hop("chain", "scale", 1_200_000, 0.8)]}
    tr.write_docs(res, "a note", doc)
    text = doc.read_text()
    assert text.startswith("# P\n\nhand\n\n") and text.endswith("\n\ntail\n")
    assert "old" not in text and "**All met.**" in text and "a note" in text
