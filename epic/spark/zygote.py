"""A warm zygote for the Python processes Spark starts for epic's data sources (local masters).

Spark starts a fresh interpreter, ``python -m pyspark.sql.streaming.python_streaming_source_runner``,
for every streaming query's source planner, and one ``python -m pyspark.daemon <module>`` per kind of
worker. Each pays the interpreter's start, pyspark's and pyarrow's imports and then epic's, while
unpickling the data source: 0.5-1.5 s per query here, half of a fused 1.92 M-event deploy.

The zygote is one process per driver, started with the session, that imports all of that once and
then forks a child per request. Spark's ``pythonExec`` for epic's data sources becomes a small
script (:mod:`epic.spark.zygote_client`, run with ``-I -S``); for the planner and the daemons it asks
the zygote for a child running the module with its arguments, environment, working directory and
standard streams (passed as file descriptors), relays signals and exits with the child's status.
Anything else, or any failure to reach the zygote, runs the real interpreter as before.

Only on local masters (the children must run on the driver's machine: a cluster's executors
have no zygote, and run the data source's interpreter too), only when Spark's interpreter is this
one, and not when ``EPIC_ZYGOTE=0``. What a child can differ in from a fresh interpreter:

* modules imported by the zygote come from the driver's ``sys.path`` (the same environment: epic,
  pyspark, pyarrow, numpy); ``sys.path`` is then rebuilt from the request's ``PYTHONPATH``, so what
  a child imports later (a topology's own modules) is found as in a fresh interpreter;
* the hash seed is the zygote's; a request with another ``PYTHONHASHSEED`` is refused (it runs a
  fresh interpreter), as is any request while the zygote is not ready.

Each child's command line is the zygote's; ``<run dir>/pids/<pid>`` holds its real one for tools
that classify processes (scripts/benchkit/proc.py).
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

__all__ = ["ENV", "enabled", "ensure", "prestart", "python_for", "socket_path", "stop",
           "sweep_stale", "write_script"]

#: ``EPIC_ZYGOTE=0`` turns the zygote off (every Python process is a fresh interpreter).
ENV = "EPIC_ZYGOTE"

#: What the zygote imports before it serves (then every module of epic but :data:`SKIP`): what a
#: planner, a daemon and their workers import for epic's data sources. ``pyarrow.dataset``
#: imports pandas (0.5 s), which a planner opening a Parquet source and a task writing one paid.
PRELOAD = (
    "pyspark.sql.streaming.python_streaming_source_runner",
    "pyspark.daemon",
    "pyspark.worker",
    "pyspark.sql.worker.create_data_source",
    "pyspark.sql.worker.plan_data_source_read",
    "pyspark.sql.worker.write_into_data_source",
    "pyspark.sql.worker.python_streaming_sink_runner",
    "pyspark.sql.worker.commit_data_source_write",
    "pandas",
    "pyarrow.dataset",
    "pyarrow.parquet",
    "pyarrow.csv",
    "pyarrow.compute",
    "pyarrow.fs",
    "epic",
    # The planner resolves "localhost" to connect back to the JVM: without this, that first
    # import searches the child's PYTHONPATH, whose zip files (pyspark.zip, py4j, Spark's core
    # jar) Python then reads whole, twice (pyspark invalidates the import caches): 0.4 s.
    "encodings.idna",
)

#: epic's modules the zygote does not import: the command line's (typer, rich) and its own.
SKIP = ("epic.__main__", "epic.cli", "epic.spark.cli", "epic.spark.zygote",
        "epic.spark.zygote_client")

_lock = threading.Lock()
_state: dict = {}


def enabled(spark) -> bool:
    """Whether ``spark``'s data sources may use the zygote: a local master, this interpreter as
    Spark's, ``os.fork`` and descriptor passing available, and not ``EPIC_ZYGOTE=0``."""
    sc = spark.sparkContext
    return _usable(sc.master, getattr(sc, "pythonExec", None))


def _usable(master: str | None, exe: str | None) -> bool:
    return (os.environ.get(ENV, "1") != "0" and hasattr(os, "fork")
            and hasattr(socket, "send_fds") and sys.platform == "linux"
            and (master or "").startswith("local") and bool(exe) and _same_python(exe))


def _same_python(exe: str) -> bool:
    # Not the resolved paths: a virtual environment's python links to the base interpreter,
    # which lacks the environment's packages.
    return os.path.abspath(exe) == os.path.abspath(sys.executable)


def ensure() -> str | None:
    """Start this process's zygote if it is not running; the path of the interpreter script
    that uses it (None if it could not start)."""
    with _lock:
        proc = _state.get("proc")
        if proc is not None and proc.poll() is None and _state.get("pid") == os.getpid():
            return _state["script"]
        try:
            return _start()
        except OSError:
            return None


def sweep_stale(tmp_dir: str | None = None) -> list[str]:
    """Remove the run directories of zygotes that are gone (killed with SIGKILL: a zygote
    that ends normally removes its own); return them. A directory counts as gone when nothing
    listens on its socket any more (bound over a minute ago); one still listening stays."""
    tmp_dir = tmp_dir or tempfile.gettempdir()
    removed = []
    try:
        names = [n for n in os.listdir(tmp_dir) if n.startswith("epic-zygote-")]
    except OSError:
        return removed
    for name in names:
        run_dir = os.path.join(tmp_dir, name)
        sock_path = os.path.join(run_dir, "sock")
        try:
            st = os.stat(sock_path)
            # Bound a moment ago: its driver may not have called listen() yet.
            if st.st_uid != os.getuid() or time.time() - st.st_mtime < 60:
                continue
        except OSError:  # no socket (yet): not a zygote's run directory, or one being made
            continue
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(sock_path)
        except ConnectionRefusedError:  # no listener: its zygote is gone
            shutil.rmtree(run_dir, ignore_errors=True)
            removed.append(run_dir)
        except OSError:
            pass
        finally:
            probe.close()
    return removed


def _start() -> str:
    sweep_stale()
    run_dir = tempfile.mkdtemp(prefix="epic-zygote-")
    sock_path = os.path.join(run_dir, "sock")
    script = os.path.join(run_dir, "python")
    write_script(script, sock_path)
    env = dict(os.environ)
    # What Spark gives its workers (pyspark's context: the driver's seed, else 0); the zygote's
    # seed is every child's, so a request with another one is refused.
    env["PYTHONHASHSEED"] = os.environ.get("PYTHONHASHSEED", "0")
    env["PYTHONUNBUFFERED"] = "YES"
    # The zygote ends when this process does: it reads the pipe's other end until EOF.
    rfd, wfd = os.pipe()
    # Bound here, so that a request made while the zygote still starts waits in the backlog
    # instead of finding no socket (a fresh interpreter instead).
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(sock_path)
        listener.listen(64)
        proc = subprocess.Popen([sys.executable, "-m", "epic.spark.zygote", sock_path, str(rfd),
                                 str(listener.fileno())],
                                env=env, pass_fds=(rfd, listener.fileno()),
                                stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        os.close(rfd)
        listener.close()
    _state.update(proc=proc, script=script, run_dir=run_dir, wfd=wfd, pid=os.getpid())
    return script


def write_script(path: str, sock_path: str, served: tuple[str, ...] | None = None) -> None:
    """Write the interpreter script for the zygote at ``sock_path`` to ``path``
    (:mod:`epic.spark.zygote_client` with its settings filled in; ``served``: the modules it
    asks the zygote for, default the client's :data:`~epic.spark.zygote_client.SERVED`)."""
    from epic.spark import zygote_client

    with open(zygote_client.__file__, encoding="utf-8") as f:
        body = f.read()
    settings = (f"PYTHON = {sys.executable!r}\nSOCKET = {sock_path!r}\n"
                + (f"SERVED = {tuple(served)!r}\n" if served is not None else ""))
    marker = "\n\ndef _become_python"
    assert marker in body
    body = body.replace(marker, "\n" + settings + marker, 1)
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"#!{sys.executable} -IS\n{body}")
    os.chmod(path, 0o755)


def stop() -> None:
    """Stop this process's zygote (its children run on)."""
    with _lock:
        proc = _state.pop("proc", None)
        wfd = _state.pop("wfd", None)
        if wfd is not None:
            os.close(wfd)
        if proc is not None:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()


def prestart(master: str | None) -> None:
    """Start the zygote before a session's JVM on ``master`` (None: local), if it will be used
    (:func:`enabled`), so that its imports overlap the JVM's start."""
    if _usable(master or "local", os.environ.get("PYSPARK_PYTHON")):
        ensure()


def socket_path() -> str | None:
    """This process's zygote's socket (None when none was started)."""
    run_dir = _state.get("run_dir")
    return os.path.join(run_dir, "sock") if run_dir else None


def python_for(spark) -> str | None:
    """The ``pythonExec`` for epic's data sources in ``spark``: the zygote's script, or None to
    keep Spark's own."""
    if not enabled(spark):
        return None
    return ensure()


# -- the zygote process -----------------------------------------------------------------------

def _serve(sock_path: str, parent_fd: int, listen_fd: int) -> None:
    listener = socket.socket(fileno=listen_fd)
    pids_dir = os.path.join(os.path.dirname(sock_path), "pids")
    os.makedirs(pids_dir, exist_ok=True)
    # Requests wait in the backlog while the zygote imports: a planner asked for during that
    # time still starts sooner than a fresh interpreter.
    _preload()
    import gc

    gc.collect()
    gc.freeze()  # children share these pages: no collection should touch (and copy) them
    base_path = _base_path()
    seed = os.environ.get("PYTHONHASHSEED")
    children: dict[int, socket.socket] = {}
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(parent_fd, selectors.EVENT_READ, "parent")
    rwake, wwake = os.pipe()
    os.set_blocking(wwake, False)
    os.set_blocking(rwake, False)
    signal.set_wakeup_fd(wwake)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel.register(rwake, selectors.EVENT_READ, "chld")
    while True:
        for key, _ in sel.select(timeout=1.0):
            what = key.data
            if what == "parent":
                if not os.read(parent_fd, 4096):
                    shutil.rmtree(os.path.dirname(sock_path), ignore_errors=True)
                    return
            elif what == "chld":
                try:
                    while os.read(rwake, 4096):
                        pass
                except BlockingIOError:
                    pass
            elif what == "accept":
                try:
                    conn, _ = listener.accept()
                except OSError:  # e.g. out of descriptors: the client runs a fresh interpreter
                    continue
                pid = _fork_for(conn, seed, base_path, pids_dir,
                                close=[listener, parent_fd, rwake, wwake, *children.values()])
                if pid > 0:
                    children[pid] = conn
                    sel.register(conn, selectors.EVENT_READ, ("client", pid))
                else:
                    conn.close()
            else:  # a client's connection: readable means it closed (the client died)
                try:
                    closed = not key.fileobj.recv(1)
                except OSError:
                    closed = True
                if closed:
                    sel.unregister(key.fileobj)  # reaped below or later, then closed
                    try:
                        os.kill(what[1], signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        _reap(children, sel, pids_dir)


def _preload() -> None:
    import importlib
    import pkgutil

    def load(name):
        try:
            return importlib.import_module(name)
        except Exception:  # noqa: BLE001 - what cannot import here is the child's to import
            return None

    for name in PRELOAD:
        load(name)
    epic = sys.modules.get("epic")
    if epic is not None:
        for info in pkgutil.walk_packages(epic.__path__, "epic."):
            if not info.name.startswith(SKIP):
                load(info.name)


def _reap(children: dict, sel, pids_dir: str) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        try:
            os.unlink(os.path.join(pids_dir, str(pid)))
        except OSError:
            pass
        if conn is not None:
            try:
                sel.unregister(conn)
            except KeyError:  # its client had closed it
                pass
            try:
                conn.sendall(struct.pack("!i", status))
            except OSError:
                pass
            conn.close()


def _base_path() -> list[str]:
    """This interpreter's ``sys.path`` without its script directory and ``PYTHONPATH``."""
    own = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [p for p in sys.path[1:] if p not in own]


def _recv_request(conn: socket.socket):
    conn.settimeout(10)
    head, fds, _flags, _addr = socket.recv_fds(conn, 4, 3)
    if len(head) < 4:
        raise OSError("short request")
    (n,) = struct.unpack("!I", head)
    body = b""
    while len(body) < n:
        part = conn.recv(n - len(body))
        if not part:
            raise OSError("short request")
        body += part
    conn.settimeout(None)
    return json.loads(body), fds


def _fork_for(conn: socket.socket, seed, base_path, pids_dir, close) -> int:
    """Fork a child for ``conn``'s request; its pid (also sent to the client), or -1 (the client
    was told to run a fresh interpreter)."""
    fds: list[int] = []
    try:
        req, fds = _recv_request(conn)
        if len(fds) != 3 or req["env"].get("PYTHONHASHSEED") != seed:
            raise ValueError("not served here")
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
    except (OSError, ValueError, KeyError):
        # Its streams are closed here: a pipe's reader waits for every writer's end
        for fd in fds:
            os.close(fd)
        try:
            conn.sendall(struct.pack("!q", -1))
        except OSError:
            pass
        return -1
    if pid == 0:
        _child(req, fds, conn, base_path, close)
    for fd in fds:
        os.close(fd)
    try:
        with open(os.path.join(pids_dir, str(pid)), "w") as f:
            f.write("\0".join([req["env"].get("PYSPARK_PYTHON", "python")] + req["argv"]))
        conn.sendall(struct.pack("!q", pid))
    except OSError:
        pass
    return pid


def _child(req, fds, conn, base_path, close) -> None:
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for obj in close:
            obj.close() if hasattr(obj, "close") else os.close(obj)
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        extra = [p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [req["cwd"]] + extra + [p for p in base_path if p not in extra]
        argv = req["argv"]
        module = argv[1]
        sys.argv[:] = [module] + argv[2:]
        import runpy

        sys.modules.pop(module, None)  # run as __main__ only, as in a fresh interpreter
        # The zygote's imports stay frozen: no collection touches (and so copies) their pages.
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported as a fresh interpreter would
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
