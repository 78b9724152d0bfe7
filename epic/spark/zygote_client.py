"""The interpreter Spark runs for epic's Python processes when a warm zygote is up (stdlib only).

:mod:`epic.spark.zygote` writes this file, after a ``#!<python> -IS`` line and with the settings
below filled in, as the ``pythonExec`` of epic's data sources. Spark runs it as ``<it> -m <module> ...``.
For a module the zygote serves (:data:`SERVED`) it asks the zygote for a forked child that runs
the module with this process's arguments, environment, working directory and standard streams,
forwards the signals Spark sends to that child and exits with its status; for any other module,
or when the zygote cannot serve, it becomes the real interpreter (``exec``), exactly as without a
zygote. It imports nothing but the standard library and runs with ``-I -S``: about 20 ms.
"""

import json
import os
import signal
import socket
import struct
import sys

#: Set by :mod:`epic.spark.zygote` when it writes the script: the real interpreter and the
#: zygote's socket. (These defaults keep the module importable for its tests.)
PYTHON = sys.executable
SOCKET = ""

#: Modules started through the zygote: the streaming source planner (a fresh interpreter per
#: query) and ``pyspark.daemon`` (one per worker module, forking the task workers).
SERVED = ("pyspark.sql.streaming.python_streaming_source_runner", "pyspark.daemon")


def _become_python(args):
    os.execv(PYTHON, [PYTHON] + args)


def _recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            return None
        buf += part
    return buf


def _ask(args):
    """The zygote's forked child for ``args`` (its pid and the connection that reports its
    status), or None when the zygote cannot serve."""
    if not SOCKET:
        return None
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # Spark gives the process 10 s to connect back: a zygote that has not forked within 5 s
        # (still importing on a loaded machine) leaves time for a fresh interpreter.
        sock.settimeout(5)
        sock.connect(SOCKET)
        body = json.dumps({"argv": args, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
        head = struct.pack("!I", len(body))
        socket.send_fds(sock, [head], [0, 1, 2])
        sock.sendall(body)
        reply = _recv_exact(sock, 8)
    except OSError:
        return None
    if reply is None:
        return None
    pid = struct.unpack("!q", reply)[0]
    if pid <= 0:
        return None
    sock.settimeout(None)
    return pid, sock


def main(args):
    if len(args) < 2 or args[0] != "-m" or args[1] not in SERVED:
        _become_python(args)
    got = _ask(args)
    if got is None:
        _become_python(args)
    pid, sock = got

    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
                signal.SIGUSR2):
        signal.signal(sig, forward)
    while True:
        try:
            reply = _recv_exact(sock, 4)
            break
        except InterruptedError:
            continue
    if reply is None:  # the zygote died: the child's status is lost
        os._exit(1)
    status = struct.unpack("!i", reply)[0]
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


if __name__ == "__main__":
    main(sys.argv[1:])
