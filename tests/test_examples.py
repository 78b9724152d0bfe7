"""The example topologies run through `epic run`, and their results are checked."""

import csv
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from epic.cli import app

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGIES = ROOT / "topologies"
runner = CliRunner()


def run_example(name, out, *extra):
    r = runner.invoke(app, ["run", str(TOPOLOGIES / f"{name}.py"), "--no-progress",
                            "-p", f"out={out}", *extra])
    assert r.exit_code == 0, r.output
    return r


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("name", ["sensor_averages", "parallel_split", "monitoring"])
def test_example_validates(name):
    """Every example builds and validates without warnings."""
    r = runner.invoke(app, ["validate", str(TOPOLOGIES / f"{name}.py")])
    assert r.exit_code == 0, r.output
    assert "0 warning(s)" in r.output


def test_sensor_averages_match_brute_force(tmp_path):
    """Final 60 s windows equal a direct computation; early results come every second."""
    run_example("sensor_averages", tmp_path)
    rows = read(tmp_path / "averages.csv")
    data = read(TOPOLOGIES / "data" / "sensors.csv")
    sid = np.array([int(r["sid"]) for r in data])
    ts = np.array([int(r["ts"]) for r in data])
    temp = np.array([float(r["temp"]) for r in data])
    finals = [r for r in rows if r["final"] == "true"]
    assert finals
    for r in finals:
        s, a, b = int(r["sid"]), int(r["window_start"]), int(r["window_end"])
        sel = (sid == s) & (ts >= a) & (ts < b)
        assert int(r["n"]) == sel.sum()
        assert float(r["avg_temp"]) == pytest.approx(temp[sel].mean(), abs=1e-3)
        assert float(r["max_temp"]) == pytest.approx(temp[sel].max(), abs=1e-3)
    first = [r for r in rows if r["sid"] == "1"][:3]
    assert [(r["window_end"], r["final"]) for r in first] == \
        [("1000", "false"), ("2000", "false"), ("3000", "false")]


def test_parallel_split_reduce_equals_hash_partitioned(tmp_path):
    """Round robin + combine and hash partitioning + merge give the same windows."""
    run_example("parallel_split", tmp_path, "-p", "replicas=3", "-p", "events=20000")
    combined = read(tmp_path / "combined.csv")
    by_key = read(tmp_path / "by_key.csv")
    assert len(combined) == 16 * 20
    key = lambda r: (int(r["window_end"]), int(r["key"]))  # noqa: E731
    assert sorted(combined, key=key) == sorted(by_key, key=key)
    assert sum(int(r["n"]) for r in combined) == 20000


def test_monitoring_alerts(tmp_path):
    """Silences are detected by timers; alerts are merged in time order."""
    run_example("monitoring", tmp_path)
    alerts = read(tmp_path / "alerts.csv")
    silent = [(int(a["ts"]), a["machine"]) for a in alerts if a["kind"] == "silent"]
    assert silent == [(204002, "2"), (404002, "2")]
    times = [int(a["ts"]) for a in alerts]
    assert times == sorted(times)
    episodes = read(tmp_path / "episodes.csv")
    assert episodes and all(float(e["peak"]) > 80 for e in episodes)
    assert len([a for a in alerts if a["kind"] == "overheat"]) == len(episodes)
