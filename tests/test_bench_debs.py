"""Pure helpers of scripts/bench_debs.py and its report (benchkit.debs_report); no Spark, no
subprocess."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from benchkit import debs_report as report  # noqa: E402


def _load():
    spec = importlib.util.spec_from_file_location("bench_debs", ROOT / "scripts" / "bench_debs.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_debs"] = mod
    spec.loader.exec_module(mod)
    return mod


bd = _load()
PS = 10**12


def test_cases_and_files():
    assert bd.parse_cases(" q1, all ,q1") == ["q1", "all"]
    with pytest.raises(ValueError):
        bd.parse_cases("q5")
    with pytest.raises(ValueError):
        bd.parse_cases(" , ")
    assert bd.case_queries("all") == ["q1", "q2", "q3", "q4"]
    assert bd.case_files("q4") == ["q4.csv"]
    assert len(bd.case_files("q1")) == 5 and len(bd.case_files("q3")) == 4
    assert len(bd.case_files("all")) == 15


def test_game_seconds_counts_seconds_of_the_halves_with_data():
    h1, h2 = bd.HALF_STARTS
    ts = np.concatenate([
        np.arange(h1 - 100 * PS, h1 + 30 * PS, PS // 7),    # 100 s before kick-off: not counted
        np.arange(h2, h2 + 30 * PS, PS // 3),               # a 30 s second half
    ]).astype(np.int64)
    assert bd.game_seconds(ts) == 60
    assert bd.game_seconds(np.zeros(0, dtype=np.int64)) == 0


def test_percentiles_and_stride():
    p50, p99 = bd.percentiles_ms(np.arange(1, 101, dtype=np.int64) * 1_000_000)
    assert p50 == pytest.approx(50.5) and p99 == pytest.approx(99.01)
    assert bd.percentiles_ms(np.zeros(0, dtype=np.int64)) == [None, None]
    assert bd.sample_stride(10, 100) == 1
    assert bd.sample_stride(1000, 100) == 10
    assert bd.sample_stride(1001, 100) == 11


def test_game_clock():
    assert report.game_clock(bd.HALF_STARTS[1] + 754 * PS) == "half 2 +12:34"


def test_read_delays_streaming_and_sampled(tmp_path):
    f = tmp_path / "q4.csv"
    n = 1000
    entry = np.arange(n, dtype=np.int64) * 10
    write = entry + np.arange(n, dtype=np.int64) * 1_000_000   # delay i ms
    lines = ["entry_time,write_time,ts,player_id"] + [
        f"{e},{w},{i},\"p,{i}\"" for i, (e, w) in enumerate(zip(entry, write))]
    f.write_text("\n".join(lines) + "\n")
    sd = bd.read_delays(f, "q4", max_values=0)
    assert sd.rows == n and sd.sampled == "all"
    assert sd.p50_ms == pytest.approx(499.5) and sd.max_ms == pytest.approx(999.0)
    sd = bd.read_delays(f, "q4", max_values=100)
    assert sd.rows == n and sd.sampled.startswith("1/") and sd.max_ms == pytest.approx(999.0)
    assert 400 < sd.p50_ms < 600
    assert bd.read_delays(tmp_path / "none.csv", "q4", 10).error == "missing"


def test_docs_section_replaces_only_its_own_part(tmp_path):
    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n\nother text\n")
    results = {
        "argv": "scripts/bench_debs.py --cases all", "date": "d", "machine": "m",
        "load_start": "l", "load_end": "l", "input": "g.csv", "input_bytes": 10**9,
        "input_rows": 1000, "game_s": 60, "target_seconds": 600.0, "runtime_label": "deploy",
        "floor": {"rows": 1000, "wall_s": 0.5, "rows_per_s": 2000.0, "x_real_time": 120.0},
        "timed_delays": True,   # the wall-time target on a case with delay logging too
        "cases": [dict(case="all", runtime="deploy", fuse=True, command="c", status="ok", rc=0,
                       wall_s=700.0, input_rows=1000, game_s=60, game_done=60, peak_rss=2**30,
                       rows_out=5,
                       out_bytes=100, progress={}, top_nodes=[["q", 1000, 5]],
                       streams=[dict(stream="q4.csv", query="q4", rows=5, sampled="all",
                                     p50_ms=1.0, p99_ms=2.0, max_ms=3.0, bytes=100, read_s=0.1,
                                     error=None)],
                       log_tail="", started="")],
    }
    report.write_docs(results, "", doc)
    text = doc.read_text()
    assert text.startswith("# Performance\n\nother text\n")
    assert "MISSED" in text and "700 s > 600 s" in text
    results["cases"][0]["wall_s"] = 500.0
    report.write_docs(results, "note", doc)
    text2 = doc.read_text()
    assert text2.count(report.DOC_BEGIN) == 1 and "targets met" in text2 and "note" in text2
    assert text2.startswith("# Performance\n\nother text\n")


def test_game_done_counts_whole_seconds_before_the_watermark():
    h1, h2 = bd.HALF_STARTS
    starts = np.array([h1 + i * PS for i in range(10)] + [h2 + i * PS for i in range(5)],
                      dtype=np.int64)
    assert bd.game_done(starts, None) is None
    assert bd.game_done(starts, h1) == 0
    assert bd.game_done(starts, h1 + 3 * PS + 1) == 3
    assert bd.game_done(starts, h2 + 2 * PS) == 12
    r = report.CaseResult(case="all", runtime="deploy", fuse=True, command="c", status="timeout",
                      wall_s=100.0, game_s=15, game_done=5)
    assert r.x_real_time == pytest.approx(0.05) and r.est_total_s == pytest.approx(300.0)


def test_case_timeouts():
    assert bd.parse_cases("all:1200, q4:300,q1") == ["all", "q4", "q1"]
    assert bd.case_timeouts("all:1200, q4:300,q1") == {"all": 1200.0, "q4": 300.0}


def test_peer_cases_on_another_runtime():
    assert bd.parse_cases("all, all@run:900") == ["all", "all@run"]
    assert bd.case_timeouts("all, all@run:900") == {"all@run": 900.0}
    assert report.split_case("all@run") == ("all", "run") and report.split_case("q2") == ("q2", None)
    assert len(bd.case_files("all@run")) == 15
    with pytest.raises(ValueError):
        bd.parse_cases("all@flink")
    peer = report.CaseResult(case="all@run", runtime="run", fuse=False, command="c", status="ok",
                         wall_s=700.0)
    assert report.case_missed(peer, 600.0) is None      # the target is for the deploy's all case


def _delay_results(p99s, target=500.0):
    streams = [{"stream": f"{q}_{i}.csv", "query": q, "rows": None if v is None else 10,
                "p50_ms": v, "p99_ms": v, "max_ms": v, "sampled": "all", "error": None}
               for i, (q, v) in enumerate(p99s)]
    return {"delay_target_ms": target, "delay_queries": ["q2", "q4"],
            "cases": [{"case": "all", "streams": streams}]}


def test_delay_target_applies_to_the_chosen_queries_only():
    ok = _delay_results([("q1", 9000.0), ("q2", 120.0), ("q4", 499.0)])
    assert report.delay_misses(ok) == []
    assert "target met" in report.delay_verdicts(ok)[0]
    bad = _delay_results([("q2", 120.0), ("q2", 501.0), ("q4", None)])
    why = [m for _, m in report.delay_misses(bad)]
    assert len(why) == 2 and "501 ms > 500 ms" in why[0] and "no rows" in why[1]
    assert "MISSED" in report.delay_verdicts(bad)[0]
    no_target = _delay_results([("q2", 9000.0)], target=None)
    assert report.delay_misses(no_target) == [] and report.delay_verdicts(no_target) == []


def test_slice_game_keeps_a_contiguous_stretch_of_one_half(tmp_path):
    h1, h2 = bd.HALF_STARTS
    ts = [h1 - PS, h1, h1 + 59 * PS, h1 + 60 * PS, h2, h2 + PS]
    src = tmp_path / "g.csv"
    src.write_text("".join(f"{i},{t},1,2,3,4,5,6,7,8,9,10,11\n" for i, t in enumerate(ts)))
    assert bd.slice_game(src, tmp_path / "s.csv", 1, 1.0) == 2
    lines = (tmp_path / "s.csv").read_text().splitlines()
    assert lines == [f"1,{h1},1,2,3,4,5,6,7,8,9,10,11", f"2,{h1 + 59 * PS},1,2,3,4,5,6,7,8,9,10,11"]
    assert bd.slice_game(src, tmp_path / "s2.csv", 2, 0.5) == 2


def test_read_delays_reads_parquet_too(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    e = np.arange(100, dtype=np.int64) * 10**9
    pq.write_table(pa.table({"entry_time": e, "write_time": e + np.arange(100) * 10**6,
                             "ts": e}), tmp_path / "q4.parquet")
    sd = bd.read_delays(tmp_path / "q4.parquet", "q4", 1000)
    assert sd.rows == 100 and sd.max_ms == 99.0 and sd.p50_ms == pytest.approx(49.5)


def test_command_passes_replay_speed_and_format(tmp_path):
    import argparse

    args = argparse.Namespace(input=Path("g.csv"), runtime="deploy", fuse=True, replay_speed=1.0,
                              format="parquet")
    cmd = bd.build_command(args, "all", tmp_path / "o", tmp_path / "w", tmp_path / "s.json")
    assert cmd[cmd.index("--replay-speed") + 1] == "1"
    assert cmd[cmd.index("--format") + 1] == "parquet"


def test_case_modifiers_set_runtime_format_and_delay_logging(tmp_path):
    import argparse

    assert report.case_mods("all@run+parquet") == {"runtime": "run", "format": "parquet"}
    assert report.case_mods("q3@nodelays") == {"delays": False}
    assert report.split_case("all@parquet+run") == ("all", "run")
    for bad in ("all@fast", "all@run+deploy", "all@"):
        with pytest.raises(ValueError):
            bd.parse_cases(bad)
    args = argparse.Namespace(input=Path("g.csv"), runtime="deploy", fuse=True, format="csv")
    cmd = bd.build_command(args, "all@parquet+nodelays", tmp_path / "o", tmp_path / "w",
                           tmp_path / "s.json")
    assert cmd[1] == "deploy" and "--delays" not in cmd
    assert cmd[cmd.index("--format") + 1] == "parquet"
    cmd = bd.build_command(args, "all@run", tmp_path / "o", tmp_path / "w", tmp_path / "s.json")
    assert cmd[1] == "run" and "--delays" in cmd and "--format" not in cmd


def _case(case, runtime, wall, fmt="csv", delays=True, pss=None, status="ok"):
    return {"case": case, "runtime": runtime, "fuse": runtime == "deploy", "command": "c",
            "status": status, "wall_s": wall, "format": fmt, "delays": delays, "peak_rss": pss}


def test_deploy_targets_time_format_peer_and_memory():
    res = {"target_seconds": 150.0, "parquet_target_seconds": 100.0, "mem_target_gb": 4.0,
           "cases": [_case("all@run", "run", 140.0), _case("all", "deploy", 145.0),
                     _case("all@parquet+nodelays", "deploy", 120.0, fmt="parquet",
                           delays=False),
                     _case("all@nodelays", "deploy", 90.0, delays=False, pss=5 * 2**30),
                     _case("all@parquet", "deploy", 120.0, fmt="parquet", pss=5 * 2**30),
                     _case("q1", "deploy", 400.0), _case("q2", "deploy", 1.0, status="failed")]}
    why = {r["case"]: report.missed(res, r) for r in res["cases"]}
    assert why["all@run"] is None and why["q1"] is None    # peers and single queries: no time
    assert "slower than epic run" in why["all"] and "145.0 s > 140.0 s, 1.036x" in why["all"]
    # the Parquet target, no CSV peer
    assert "120 s > 100 s target" in why["all@parquet+nodelays"]
    assert "peak PSS 5.0 GiB > 4 GiB" in why["all@nodelays"]
    # with delay logging: memory and the peer, not the wall-time target (unless asked for)
    assert why["all@parquet"] == "peak PSS 5.0 GiB > 4 GiB"
    res["timed_delays"] = True
    assert "120 s > 100 s target" in report.missed(res, res["cases"][4])
    del res["timed_delays"]
    assert why["q2"] == "failed"
    res["cases"][1]["wall_s"] = 139.0
    assert report.missed(res, res["cases"][1]) is None
    res["cases"][1]["wall_s"] = 151.0   # over 150 s with delay logging, still faster than run
    res["cases"][0]["wall_s"] = 160.0
    assert report.missed(res, res["cases"][1]) is None


def test_write_floor_and_row_counts(tmp_path):
    fl = bd.floor_write(tmp_path, 3 * (1 << 20) + 5, chunk=1 << 20)
    assert fl["bytes"] == 3 * (1 << 20) + 5 and fl["wall_s"] > 0
    assert list(tmp_path.iterdir()) == []                  # the floor's file is gone
    (tmp_path / "a.csv").write_text("h1,h2\n1,2\n3,4")     # no newline at the end
    assert bd.count_rows(tmp_path / "a.csv", "q1").rows == 2
    (tmp_path / "b.csv").write_text("h1,h2\n")
    assert bd.count_rows(tmp_path / "b.csv", "q1").rows == 0


def test_cpu_by_process_kind():
    from benchkit.proc import process_kind

    assert process_kind(["/usr/bin/python", "x"], is_root=True) == "epic driver"
    assert process_kind(["/usr/lib/jvm/bin/java", "-cp", "x"]) == "JVM"
    assert process_kind(["python3", "-m", "pyspark.daemon", "pyspark.worker"]) == \
        "pyspark worker: worker"
    assert process_kind(["python3", "-m", "pyspark.daemon",
                         "pyspark.sql.worker.python_streaming_sink_runner"]) == \
        "pyspark worker: python_streaming_sink_runner"
    assert process_kind(["python3", "-m", "pyspark.sql.streaming.source_runner"]) == \
        "python -m source_runner"
    res = {"cases": [{"case": "all", "wall_s": 10.0, "cpu_kinds": {"JVM": 12.0, "x": 0.1}}]}
    line = report.cpu_lines(res)[0]
    assert "12 CPU-s" in line and "JVM 12 s" in line and "x 0" not in line


def test_encode_floor_counts_the_rows_and_bytes_of_pyarrows_writers(tmp_path):
    import io

    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq
    t = pa.table({"ts": np.arange(5000, dtype=np.int64), "x": np.linspace(0, 1, 5000),
                  "p": pa.array(["a", "b"] * 2500)})
    pq.write_table(t, tmp_path / "q4.parquet", row_group_size=1000)
    pq.write_table(t.slice(0, 7), tmp_path / "q2playerpossession.parquet")
    got = bd.floor_encode(tmp_path, ["q4.csv", "q2playerpossession.csv"], batch_rows=1024)
    assert got["rows"] == 5007
    # the same bytes as pyarrow's writer on each batch (a header per batch)
    want = 0
    for name in ("q4", "q2playerpossession"):
        for b in pq.ParquetFile(tmp_path / f"{name}.parquet").iter_batches(batch_size=1024):
            buf = io.BytesIO()
            pacsv.write_csv(b, buf)
            want += len(buf.getvalue())
    assert got["csv_bytes"] == want
    assert got["parquet_bytes"] > 0 and got["csv_cpu_s"] >= 0 and got["parquet_cpu_s"] >= 0
    rows = report._encode_floor_rows("all@parquet", got)
    assert [r[0] for r in rows] == ["floor: encode all@parquet's rows as csv",
                                    "floor: encode all@parquet's rows as parquet"]
    assert rows[0][9] == "5,007"


def test_peer_again_and_the_mean_of_its_runs():
    import argparse

    assert report.base_case("all@run+nodelays#2") == "all@run+nodelays"
    assert report.split_case("all@run+nodelays#2") == ("all", "run")
    assert report.case_mods("all@run+nodelays#2") == {"runtime": "run", "delays": False}
    assert len(bd.case_files("all@run#2")) == 15
    assert bd.parse_cases("all@run, all, all@run#2") == ["all@run", "all", "all@run#2"]
    args = argparse.Namespace(peer_again=True)
    run1 = _case("all@run+nodelays", "run", 130.0, delays=False)
    dep = _case("all@nodelays", "deploy", 134.0, delays=False)
    done = [run1, dep]
    # the peer runs again right after the deploy, once
    assert bd.peer_again(args, dep, done) == "all@run+nodelays#2"
    assert bd.peer_again(argparse.Namespace(peer_again=False), dep, done) is None
    assert bd.peer_again(args, run1, done) is None                      # not a deploy case
    assert bd.peer_again(args, {**dep, "status": "failed"}, done) is None
    assert bd.peer_again(args, _case("all@parquet", "deploy", 90.0, fmt="parquet"),
                         done) is None                                   # no peer ran before it
    assert bd.peer_again(args, _case("q1", "deploy", 50.0), done) is None
    res = {"target_seconds": 150.0, "parquet_target_seconds": 100.0, "mem_target_gb": 4.0,
           "cases": done}
    # one peer run: slower than it
    assert "134.0 s > 130.0 s, 1.031x" in report.missed(res, dep)
    # the second run of the peer, slower: the deploy is held to the mean (130 + 140) / 2
    run2 = _case("all@run+nodelays#2", "run", 140.0, delays=False)
    done.append(run2)
    assert bd.peer_again(args, dep, done) is None                       # it ran already
    assert report.missed(res, dep) is None
    assert report.peer_wall(dep, done) == (135.0, [130.0, 140.0])
    # and faster: the mean 128 is beaten by 134, named with both runs
    run2["wall_s"] = 126.0
    why = report.missed(res, dep)
    assert "134.0 s > 128.0 s (the mean of its runs: 130.0, 126.0 s), 1.047x" in why
    # a failed second run does not count; another format's or delay logging's run neither
    run2["status"] = "failed (rc 1)"
    assert report.peer_wall(dep, done) == (130.0, [130.0])
    done.append(_case("all@run", "run", 10.0))
    assert report.peer_wall(dep, done) == (130.0, [130.0])
    assert report.missed(res, run2) == "failed (rc 1)"
    # the delay tables show the first run of a peer, not its repeat
    for c in done:
        c["streams"] = [{"stream": "q4.csv", "query": "q4"}]
    assert [c["case"] for c in report.delay_cases({"cases": done})] == [
        "all@run+nodelays", "all@nodelays", "all@run"]
    # the docs' verdict line names the ratio against the peer's runs
    run2["status"] = "ok"
    run2["wall_s"] = 140.0
    assert report.peer_note(dep, done) == (" Against its peer: 0.993x (`epic run` 130.0, 140.0 s; "
                                          "mean 135.0 s).")
    assert report.peer_note(run1, done) == ""
