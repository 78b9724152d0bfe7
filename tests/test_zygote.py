"""The warm zygote (epic/spark/zygote.py, docs/deploy.md "Python processes"): no JVM here.

The client script is written for a probe module (tests/zygote_probe.py) instead of Spark's; the
probe reports whether it started with the zygote's imports (``pyarrow`` already loaded), and what
it got of its arguments, environment, working directory, standard streams and exit status.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from epic.spark import zygote

TESTS = str(Path(__file__).resolve().parent)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the zygote is Linux-only")


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    assert zygote.ensure() is not None
    path = str(tmp_path_factory.mktemp("epic-zygote-test") / "python")
    zygote.write_script(path, zygote.socket_path(), served=("zygote_probe",))
    return path


def _env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = TESTS
    env["PYTHONHASHSEED"] = os.environ.get("PYTHONHASHSEED", "0")
    env["ZYGOTE_PROBE"] = "seen"
    env.update(extra)
    return env


def _run(script, *args, env=None, cwd=None, stdin=""):
    p = subprocess.run([script, "-m", "zygote_probe", *args], env=env or _env(), cwd=cwd,
                       input=stdin, capture_output=True, text=True, timeout=60)
    return p, json.loads(p.stdout.splitlines()[0])


def test_a_served_module_runs_in_a_forked_child_with_the_callers_process_state(script, tmp_path):
    p, got = _run(script, "echo", "7", cwd=str(tmp_path), stdin="hello\n")
    assert got["preloaded"] is True          # a fork of the zygote, not a fresh interpreter
    assert p.returncode == 7
    assert got["argv"] == ["echo", "7"]
    assert got["name"] == "__main__"
    assert got["cwd"] == str(tmp_path)
    assert got["probe"] == "seen"
    assert got["stdin"] == "hello"
    assert p.stderr.strip() == "to stderr"
    # as in a fresh `python -m`: the working directory, then PYTHONPATH
    assert got["path"][:2] == [str(tmp_path), TESTS]


def test_the_hash_seed_is_the_one_asked_for(script):
    fresh = subprocess.run([sys.executable, "-m", "zygote_probe", "x"], env=_env(),
                           capture_output=True, text=True, timeout=60)
    _, got = _run(script, "x")
    assert got["preloaded"] is True
    assert got["hash"] == json.loads(fresh.stdout)["hash"]


def test_other_modules_and_other_seeds_run_a_fresh_interpreter(script, tmp_path):
    _, got = _run(script, "x", env=_env(PYTHONHASHSEED="12345"))
    assert got["preloaded"] is False
    other = tmp_path / "python"
    zygote.write_script(str(other), zygote.socket_path(), served=("something_else",))
    p, got = _run(str(other), "x", "3")
    assert got["preloaded"] is False and p.returncode == 3
    gone = tmp_path / "gone"
    zygote.write_script(str(gone), str(tmp_path / "no-socket"), served=("zygote_probe",))
    p, got = _run(str(gone), "x", "4")
    assert got["preloaded"] is False and p.returncode == 4


def _start_waiting(script):
    p = subprocess.Popen([script, "-m", "zygote_probe", "wait"], env=_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    got = json.loads(p.stdout.readline())
    assert got["preloaded"] is True and got["pid"] != p.pid
    return p, got["pid"]


def _gone(pid, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_tools_see_what_a_child_stands_for(script):
    sys.path.insert(0, str(Path(TESTS).parent / "scripts"))
    from benchkit.proc import argv_of, process_kind

    p, child = _start_waiting(script)
    try:
        assert argv_of(child)[1:] == ["-m", "zygote_probe", "wait"]
        assert process_kind(argv_of(child)) == "python -m zygote_probe"
        assert process_kind(argv_of(p.pid)) == "zygote relay"
        assert process_kind(argv_of(zygote._state["proc"].pid)) == "epic zygote"
    finally:
        p.kill()
        p.wait(10)


def test_a_signal_to_the_relay_reaches_the_child_and_its_status_comes_back(script):
    p, child = _start_waiting(script)
    p.send_signal(signal.SIGTERM)
    assert p.wait(10) == -signal.SIGTERM
    assert _gone(child)


def test_a_killed_relay_takes_its_child_along(script):
    p, child = _start_waiting(script)
    p.kill()
    p.wait(10)
    assert _gone(child)


def test_used_only_on_local_masters_with_this_interpreter(monkeypatch):
    from types import SimpleNamespace

    def spark(master, exe=sys.executable):
        return SimpleNamespace(sparkContext=SimpleNamespace(master=master, pythonExec=exe))

    monkeypatch.delenv(zygote.ENV, raising=False)
    assert zygote.enabled(spark("local[*]"))
    assert not zygote.enabled(spark("spark://host:7077"))
    assert not zygote.enabled(spark("local[2]", "epic-python"))       # an --archive's name
    assert not zygote.enabled(spark("local[2]", os.path.realpath(sys.executable) + "-other"))
    monkeypatch.setenv(zygote.ENV, "0")
    assert not zygote.enabled(spark("local[*]"))


def test_run_directories_of_killed_zygotes_are_swept(tmp_path):
    """A zygote killed with SIGKILL cannot remove its run directory: the next start does, when
    nothing listens on its socket any more. A live one (its socket listening) stays."""
    import socket

    dead, live = tmp_path / "epic-zygote-dead", tmp_path / "epic-zygote-live"
    other = tmp_path / "unrelated"
    for d in (dead, live, other):
        d.mkdir()
    gone = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    gone.bind(str(dead / "sock"))
    gone.listen(1)
    gone.close()   # the socket file stays, nothing listens: what SIGKILL leaves
    fresh = tmp_path / "epic-zygote-fresh"   # just bound: maybe not listening yet
    fresh.mkdir()
    just = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    just.bind(str(fresh / "sock"))
    just.close()
    old = time.time() - 3600
    os.utime(dead / "sock", (old, old))
    (dead / "python").write_text("#!script\n")
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listening.bind(str(live / "sock"))
    listening.listen(1)
    try:
        assert zygote.sweep_stale(str(tmp_path)) == [str(dead)]
        assert not dead.exists() and live.exists() and other.exists() and fresh.exists()
    finally:
        listening.close()
