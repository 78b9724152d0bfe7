"""Process trees and the machine, from ``/proc`` (Linux only).

A *process tree* is a root pid and all its live descendants, e.g. ``epic deploy``, its JVM and the
JVM's Python workers. Memory is the sum of the tree's PSS (proportional set size: pages shared
between processes are split between them, so forked Python workers are not counted twice). CPU is
user + system time, of the tree (live processes only: a process that has exited is gone from
``/proc``) or of the whole machine (``/proc/stat``, which also counts other users' jobs).

Example::

    proc = subprocess.Popen(cmd, start_new_session=True)
    with Sampler(proc.pid, every=5.0) as s:
        proc.wait()
    print(s.peak_pss / 2**30, s.machine_cpu_s, s.tree_cpu_s)
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

__all__ = ["Sampler", "free_gb", "kill_tree", "machine_cpu_seconds", "parent_map", "process_kind",
           "pss_bytes", "tree_cpu_seconds", "tree_pids", "tree_pss", "uptime"]

TICKS = os.sysconf("SC_CLK_TCK")


def tree_pids(root: int, parents: dict[int, int]) -> set[int]:
    """``root`` and all its descendants, given ``pid -> ppid`` (pure: see :func:`parent_map`)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = set(), [root]
    while todo:
        p = todo.pop()
        if p in out:
            continue
        out.add(p)
        todo.extend(children.get(p, ()))
    return out


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (``state`` first), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    # The command name is in parentheses and may itself hold spaces or ")".
    return s[s.rindex(")") + 2:].split()


def _stats() -> dict[int, list[str]]:
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            f = _stat_fields(int(d))
            if f is not None and len(f) > 12:
                out[int(d)] = f
    return out


def parent_map() -> dict[int, int]:
    """``pid -> ppid`` of every process now running."""
    return {pid: int(f[1]) for pid, f in _stats().items()}


def _kib_field(path: str, key: str) -> int | None:
    """The ``key: N kB`` line of a /proc file, in bytes (None: unreadable or missing)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def pss_bytes(pid: int) -> int:
    """Proportional set size (shared pages split between the processes sharing them, so forked
    Python workers are not counted twice); VmRSS where smaps_rollup is not readable; 0 for a
    process that is gone."""
    pss = _kib_field(f"/proc/{pid}/smaps_rollup", "Pss:")
    if pss is None:
        pss = _kib_field(f"/proc/{pid}/status", "VmRSS:")
    return pss or 0


def tree_pss(root: int) -> tuple[int, set[int]]:
    """Sum of the PSS of ``root``'s tree (bytes) and the tree's pids."""
    pids = tree_pids(root, parent_map())
    return sum(pss_bytes(p) for p in pids), pids


def cpu_by_pid(root: int) -> dict[int, float]:
    """User + system CPU seconds of each live process in ``root``'s tree."""
    stats = _stats()
    pids = tree_pids(root, {pid: int(f[1]) for pid, f in stats.items()})
    return {p: (int(stats[p][11]) + int(stats[p][12])) / TICKS for p in pids if p in stats}


def process_kind(argv: list[str], is_root: bool = False) -> str:
    """What a process of a run's tree is, from its command line: ``epic driver`` (the root),
    ``JVM``, ``epic zygote`` and ``zygote relay`` (epic/spark/zygote.py: pass :func:`argv_of`'s
    command line, which gives a zygote child's real one), ``pyspark worker: <module>`` (a Python worker forked by ``pyspark.daemon``; the module
    says what for: ``worker`` runs tasks, ``write_into_data_source`` the sink's writer factory,
    ``python_streaming_sink_runner`` the sink's commit, ...), ``python -m <module>`` (e.g. the
    streaming source planner), else the program's name."""
    if is_root:
        return "epic driver"
    if not argv:
        return "?"
    prog = os.path.basename(argv[0])
    if any("epic-zygote-" in a for a in argv[1:3]):
        return "zygote relay"  # epic/spark/zygote_client.py: waits for its zygote child
    if "epic.spark.zygote" in argv:
        return "epic zygote"
    if prog == "java":
        return "JVM"
    if "-m" in argv[:-1]:
        mod = argv[argv.index("-m") + 1]
        if mod == "pyspark.daemon":
            rest = argv[argv.index("-m") + 2:]
            return "pyspark worker: " + (rest[0] if rest else "pyspark.worker").split(".")[-1]
        return "python -m " + mod.split(".")[-1]
    if prog.startswith("python") and len(argv) > 1:
        return "python " + os.path.basename(argv[1])
    return prog


def argv_of(pid: int) -> list[str]:
    """``pid``'s command line; for a child of epic's zygote (epic/spark/zygote.py), whose own
    is the zygote's, the command line it stands for (a worker forked by such a child: its
    parent's, as for any worker forked by ``pyspark.daemon``)."""
    argv = _cmdline(pid)
    if "epic.spark.zygote" not in argv:
        return argv
    sock = argv[argv.index("epic.spark.zygote") + 1] if argv[-1] != "epic.spark.zygote" else ""
    pids = os.path.join(os.path.dirname(sock), "pids")
    for p in (pid, _parent(pid)):
        try:
            with open(os.path.join(pids, str(p)), "rb") as f:
                return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
    return argv


def _parent(pid: int) -> int:
    f = _stat_fields(pid)
    return int(f[1]) if f else 0


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def tree_cpu_seconds(root: int | None = None) -> float:
    """User + system CPU seconds of ``root`` (default: this process) and its live descendants."""
    return sum(cpu_by_pid(os.getpid() if root is None else root).values())


def machine_cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine since boot (``/proc/stat``: all but idle and
    iowait), summed over the cores."""
    with open("/proc/stat") as f:
        parts = f.readline().split()[1:]
    vals = [int(x) for x in parts]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    return (sum(vals[:8]) - idle) / TICKS


def kill_tree(proc: subprocess.Popen, grace: float = 15.0) -> None:
    """SIGTERM then SIGKILL ``proc``'s process group and every descendant still alive (only
    processes the caller started: start it with ``start_new_session=True``)."""
    pids = tree_pids(proc.pid, parent_map())
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        pids = {p for p in pids if os.path.exists(f"/proc/{p}")}
        if proc.poll() is not None and not pids:
            return


def free_gb(path: Path) -> float:
    """Free disk (GB) of the file system holding ``path`` (or its nearest existing parent)."""
    p = Path(path)
    while not p.exists():
        p = p.parent
    return shutil.disk_usage(p).free / 1e9


def settle(max_s: float = 120.0, dirty_bytes: int = 256 << 20) -> dict:
    """Let the disk settle before a run: ``sync`` (the previous run's dirty pages written back,
    not left for this run to pay), then wait, at most ``max_s`` s in all, until the kernel's
    Dirty + Writeback pages are below ``dirty_bytes``. Returns the seconds it took and the dirty
    bytes before and after."""
    def dirty() -> int:
        return ((_kib_field("/proc/meminfo", "Dirty:") or 0)
                + (_kib_field("/proc/meminfo", "Writeback:") or 0))
    t0 = time.perf_counter()
    before = dirty()
    os.sync()
    after = dirty()
    while after >= dirty_bytes and time.perf_counter() - t0 < max_s:
        time.sleep(0.5)
        after = dirty()
    return {"s": round(time.perf_counter() - t0, 2), "dirty_before": before,
            "dirty_after": after}


def uptime() -> str:
    """The ``uptime`` line (load averages), or ``"?"``."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


class Sampler:
    """Samples a process tree in a background thread while a run goes on.

    Every ``every`` seconds: the tree's PSS (:attr:`last_pss`, :attr:`peak_pss`; short spikes
    between samples are missed, and a PSS read costs CPU: ~0.1 s per GB-sized process) and each
    live process's CPU seconds (kept per pid, so :attr:`tree_cpu_s` still counts a process that
    has exited since, up to its last sample), also summed by :func:`process_kind`
    (:attr:`cpu_by_kind`). The 1-min load average is sampled every
    ``load_every`` seconds (:attr:`mean_load`). :attr:`machine_cpu_s` is the machine's busy CPU
    seconds between :meth:`start` and :meth:`stop` (other jobs included).

    Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(self, root: int, every: float = 5.0, load_every: float = 1.0):
        self.root, self.every, self.load_every = root, every, load_every
        self.last_pss = 0
        self.peak_pss = 0
        self.loads: list[float] = []
        self.machine_cpu_s: float | None = None
        self._cpu: dict[int, float] = {}
        self._kind: dict[int, str] = {}
        #: PSS bytes by :func:`process_kind` at the sample with the largest total.
        self.peak_by_kind: dict[str, int] = {}
        #: processes of each kind at the peak sample
        self.peak_procs_by_kind: dict[str, int] = {}
        self._cpu0 = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="benchkit-sampler", daemon=True)

    @property
    def tree_cpu_s(self) -> float:
        """CPU seconds of the tree's processes, as last sampled."""
        return sum(self._cpu.values())

    @property
    def cpu_by_kind(self) -> dict[str, float]:
        """CPU seconds of the tree's processes by :func:`process_kind`, largest first."""
        out: dict[str, float] = {}
        for p, c in self._cpu.items():
            k = self._kind.get(p, "?")
            out[k] = out.get(k, 0.0) + c
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    @property
    def mean_load(self) -> float | None:
        return sum(self.loads) / len(self.loads) if self.loads else None

    def sample(self) -> None:
        """One memory and CPU sample (also called once by :meth:`stop`)."""
        cpu = cpu_by_pid(self.root)
        for p, s in cpu.items():
            self._cpu[p] = max(s, self._cpu.get(p, 0.0))
            if p not in self._kind or self._kind[p] in ("?", "epic", "python", "bash"):
                # read again while it may still exec (a launcher script becoming the JVM)
                self._kind[p] = process_kind(argv_of(p), p == self.root)
        pss = {p: pss_bytes(p) for p in cpu}
        self.last_pss = sum(pss.values())
        if self.last_pss > self.peak_pss:
            self.peak_pss = self.last_pss
            by_kind: dict[str, int] = {}
            procs: dict[str, int] = {}
            for p, b in pss.items():
                k = self._kind.get(p, "?")
                by_kind[k] = by_kind.get(k, 0) + b
                procs[k] = procs.get(k, 0) + 1
            self.peak_by_kind = dict(sorted(by_kind.items(), key=lambda kv: -kv[1]))
            self.peak_procs_by_kind = {k: procs[k] for k in self.peak_by_kind}

    def _loop(self) -> None:
        next_mem = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_mem:
                self.sample()
                next_mem = now + self.every
            self.loads.append(os.getloadavg()[0])
            self._stop.wait(self.load_every)

    def start(self) -> Sampler:
        self._cpu0 = machine_cpu_seconds()
        self._thread.start()
        return self

    def stop(self) -> Sampler:
        self._stop.set()
        self._thread.join()
        self.machine_cpu_s = machine_cpu_seconds() - self._cpu0
        if os.path.exists(f"/proc/{self.root}"):
            self.sample()
        return self

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
