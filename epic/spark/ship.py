"""Code and dependencies for Spark executors, the PySpark way ("Python package management").

Two pieces, as PySpark's documentation describes them:

* **Code** (:func:`build_py_files`): at every deploy, epic's own package goes to
  ``<workdir>/ship/epic.zip`` and the topology's local code to ``<workdir>/ship/topology.zip``;
  both are passed as ``spark.submit.pyFiles``, so every executor's Python workers import them
  first (before anything installed). Local code is every top-level package or module that is
  not installed in a ``site-packages`` directory nor in the standard library, that the topology
  uses (found by walking its nodes' functions, classes and their modules' globals: e.g.
  ``debs2013`` for ``topologies/debs2013.py``), plus the Python modules and packages beside the
  topology file.
* **Dependencies** (:func:`pack`, ``epic pack``): a ``.tar.gz`` holding a virtual environment
  with the distributions epic needs at run time (pyarrow, numpy, pandas, msgpack, ...), without
  epic itself (shipped as code, so the archive does not change with every edit) and without
  pyspark and py4j (every Spark installation has them as ``$SPARK_HOME/python/lib/*.zip``, which
  Spark puts on the workers' path). :func:`session_settings` passes it as
  ``spark.archives=<archive>#environment``, and executors run its ``bin/python`` (through the
  name ``epic-python``: see :func:`session_settings` for why not PySpark's
  ``./environment/bin/python``). Like ``venv-pack``, the archive holds no interpreter: its
  ``bin/python`` links to the base Python it was packed from (:attr:`PackResult.python`), which
  must exist at that path on every worker.

The topology file itself is not imported on executors: it is loaded under a generated name and
importing it again would rebuild the topology with default parameters. Its functions (and those
of modules beside it) are pickled by value (:func:`by_value_modules`), as before; ``pyFiles``
covers what is imported by name (epic, local packages such as ``debs2013``, helper modules
beside the file) and would otherwise have to be installed on every node.
"""

from __future__ import annotations

import io
import os
import re
import sys
import sysconfig
import tarfile
import time
import types
import zipfile
from dataclasses import dataclass, field

from epic.atomic import atomic_path
from epic.errors import EpicError

__all__ = ["ENV_NAME", "PYTHON_NAME", "SHIP_DIR", "SPARK_PROVIDED", "PackResult", "archive_python", "build_py_files", "describe",
           "local_modules", "pack", "runtime_distributions", "session_settings", "shipping"]

#: The directory name the archive is unpacked to on executors (``spark.archives=...#environment``).
ENV_NAME = "environment"
#: Subdirectory of the work directory holding the zips of :func:`build_py_files`.
SHIP_DIR = "ship"
#: The interpreter's name for Spark (``PYSPARK_PYTHON``) with an archive; see :func:`session_settings`.
PYTHON_NAME = "epic-python"
#: Distributions never packed by default: the workers' Spark installation provides them.
SPARK_PROVIDED = ("pyspark", "py4j")
_SKIP_DIRS = {"__pycache__", ".git", ".hg", ".svn", ".mypy_cache", ".pytest_cache",
              ".ruff_cache", ".venv", "venv", "node_modules"}


# --------------------------------------------------------------------------- code (pyFiles)

def _installed_roots() -> list[str]:
    """Directories whose modules are installed, not local: site-packages and the stdlib."""
    roots = set()
    for scheme_vars in ({}, {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}):
        paths = sysconfig.get_paths(vars=scheme_vars or None)
        for k in ("stdlib", "platstdlib", "purelib", "platlib"):
            if paths.get(k):
                roots.add(os.path.realpath(paths[k]))
    import site

    for p in list(getattr(site, "getsitepackages", lambda: [])()) + [site.getusersitepackages()]:
        roots.add(os.path.realpath(p))
    return sorted(roots)


def _module_file(mod: types.ModuleType) -> str | None:
    f = getattr(mod, "__file__", None)
    return os.path.realpath(f) if f else None


def _is_local(mod: types.ModuleType, roots: list[str]) -> bool:
    f = _module_file(mod)
    if f is None:
        return False  # builtins, namespace packages without a file
    return not any(f == r or f.startswith(r + os.sep) for r in roots)


def referenced_modules(topology) -> set[str]:
    """The modules of the objects the topology's nodes hold (functions, classes, instances),
    through closures, the globals functions use and containers."""
    start: set[str] = set()
    seen_obj: set[int] = set()

    def visit(obj, depth):
        if depth > 5 or id(obj) in seen_obj:
            return
        seen_obj.add(id(obj))
        if isinstance(obj, (str, bytes, int, float, bool, type(None))):
            return
        mod = getattr(obj, "__module__", None) if isinstance(obj, (types.FunctionType, type)) \
            else type(obj).__module__
        if isinstance(mod, str):
            start.add(mod)
        if isinstance(obj, types.FunctionType):
            for c in obj.__closure__ or ():
                try:
                    visit(c.cell_contents, depth + 1)
                except ValueError:
                    pass
            for g in obj.__code__.co_names:
                if g in obj.__globals__:
                    visit(obj.__globals__[g], depth + 1)
            return
        if isinstance(obj, (list, tuple, set, frozenset)):
            for x in obj:
                visit(x, depth + 1)
            return
        if isinstance(obj, dict):
            for x in obj.values():
                visit(x, depth + 1)
            return
        d = getattr(obj, "__dict__", None)
        if isinstance(d, dict) and not isinstance(obj, (type, types.ModuleType)):
            for x in d.values():
                visit(x, depth + 1)

    for n in topology.nodes.values():
        visit(n, 0)
    return start


def by_value_modules(topology) -> set[str]:
    """Modules whose functions the nodes use and that Python workers cannot import by name (a
    topology file loaded from a path, modules next to it): their functions are pickled by value
    (``cloudpickle.register_pickle_by_value``). epic, pyarrow and numpy are always importable."""
    out = set()
    for m in referenced_modules(topology):
        if not m or m == "builtins" or m.split(".")[0] in ("epic", "pyarrow", "numpy"):
            continue
        if m in sys.modules and not _importable(m):
            out.add(m)
    return out


def check_picklable(topology) -> None:
    """Pickle every node as its queries' plans will be pickled (after :func:`by_value_modules`
    were registered): a node holding what cannot be pickled (a lock, an open file, a
    ``functools.cached_property`` of Python 3.11 in a class shipped by value) fails here, named,
    instead of deep inside Spark's broadcast with only the type of the object."""
    from pyspark import cloudpickle

    for name, node in topology.nodes.items():
        try:
            cloudpickle.dumps(node)
        except Exception as e:  # noqa: BLE001 - any pickling failure, reported with its node
            raise EpicError(
                f"node {name!r} cannot be shipped to Spark's Python workers: pickling it failed "
                f"with {type(e).__name__}: {e}. Its functions and the objects they use are "
                "pickled (by value when their module is not importable on the workers); keep "
                "locks, open files, sockets and clients out of them, or create them inside the "
                "function on first use") from e


def _importable(module: str) -> bool:
    """Whether a Python worker can import ``module`` by name: its top-level package is found on
    ``sys.path`` (installed, editable or not). Shipping an importable package by value would drag
    its whole module state along (and fail on what cannot be pickled)."""
    import importlib.machinery

    top = module.split(".")[0]
    return importlib.machinery.PathFinder.find_spec(top, sys.path) is not None


def local_modules(topology) -> dict[str, str]:
    """Top-level local packages and modules the topology uses: ``{name: path}``.

    The walk starts at the objects held by the topology's nodes (:func:`referenced_modules`)
    and follows the globals of every local module it reaches. ``epic`` (shipped on its own) and
    modules loaded from a file under a generated name (the topology file, which is pickled by
    value) are left out.
    """
    roots = _installed_roots()
    start = referenced_modules(topology)
    found: dict[str, str] = {}
    queue = sorted(start)
    done: set[str] = set()
    while queue:
        name = queue.pop()
        if name in done:
            continue
        done.add(name)
        mod = sys.modules.get(name)
        if mod is None or not _is_local(mod, roots):
            continue
        top = name.split(".")[0]
        top_mod = sys.modules.get(top)
        if top != "epic" and top_mod is not None and top == top_mod.__name__ \
                and _importable_as(top_mod, top):
            f = _module_file(top_mod)
            found[top] = os.path.dirname(f) if f.endswith("__init__.py") else f
        for v in list(vars(mod).values()):
            if isinstance(v, types.ModuleType):
                queue.append(v.__name__)
            else:
                m = getattr(v, "__module__", None)
                if isinstance(m, str):
                    queue.append(m)
    return dict(sorted(found.items()))


def _importable_as(mod: types.ModuleType, name: str) -> bool:
    """Whether ``mod`` is a real importable module of that name (not a file loaded under a
    generated name, such as a topology file: ``epic_topology_<stem>``)."""
    f = _module_file(mod)
    if f is None:
        return False
    stem = os.path.basename(os.path.dirname(f)) if f.endswith("__init__.py") \
        else os.path.splitext(os.path.basename(f))[0]
    return stem == name


def _add_tree(zf: zipfile.ZipFile, path: str, arcname: str) -> None:
    """Add a package directory (all its files but caches and compiled files) or one module."""
    if os.path.isfile(path):
        zf.write(path, arcname)
        return
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        rel = os.path.relpath(dirpath, path)
        for fn in sorted(filenames):
            if fn.endswith((".pyc", ".pyo")):
                continue
            zf.write(os.path.join(dirpath, fn),
                     os.path.normpath(os.path.join(arcname, rel, fn)))


def _write_zip(path: str, entries: dict[str, str]) -> None:
    """``entries``: ``{arcname: source path}``; written to a temp file renamed over ``path``."""
    tmp = f"{path}.tmp{os.getpid()}"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for arc, src in sorted(entries.items()):
            _add_tree(zf, src, arc)
    os.replace(tmp, path)


def _beside(topology_file: str) -> dict[str, str]:
    """Python modules and packages in the topology file's directory (the file itself excluded)."""
    folder = os.path.dirname(os.path.abspath(topology_file))
    out = {}
    for fn in sorted(os.listdir(folder)):
        p = os.path.join(folder, fn)
        if p == os.path.abspath(topology_file) or fn.startswith("."):
            continue
        if fn.endswith(".py") and os.path.isfile(p) and fn[:-3].isidentifier():
            out[fn] = p
        elif os.path.isdir(p) and fn.isidentifier() and fn not in _SKIP_DIRS \
                and os.path.isfile(os.path.join(p, "__init__.py")):
            out[fn] = p
    return out


def _topology_file(topology) -> str | None:
    """The file the topology was loaded from (``source_file``, set by ``epic.cli.load_topology``
    for ``epic run`` / ``epic deploy``), or None for a topology built in code."""
    f = getattr(topology, "source_file", None)
    return f if isinstance(f, str) and os.path.isfile(f) else None


def build_py_files(topology, workdir: str, *, topology_file: str | None = None) -> list[str]:
    """Write ``<workdir>/ship/epic.zip`` and ``<workdir>/ship/topology.zip``; return their paths.

    ``epic.zip`` holds the ``epic`` package this driver runs; ``topology.zip`` the local packages
    and modules of :func:`local_modules` and those beside ``topology_file`` (default: the file
    the topology was loaded from by ``epic run`` / ``epic deploy``, when known). Both are
    rewritten at every deploy, so executors always get the driver's code.
    """
    ship = os.path.join(workdir, SHIP_DIR)
    os.makedirs(ship, exist_ok=True)
    epic_zip = os.path.join(ship, "epic.zip")
    # This file is epic/spark/ship.py: the package is two levels up.
    epic_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    _write_zip(epic_zip, {"epic": epic_dir})
    entries = {}
    topology_file = topology_file or _topology_file(topology)
    if topology_file:
        entries.update(_beside(topology_file))
    for name, path in local_modules(topology).items():
        entries[name if os.path.isdir(path) else os.path.basename(path)] = path
    entries.pop("epic", None)
    topo_zip = os.path.join(ship, "topology.zip")
    _write_zip(topo_zip, entries)
    return [epic_zip, topo_zip]


def session_settings(topology, workdir: str, *, archive: str | None = None,
                     conf: dict | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """Spark settings and driver environment variables that ship code (and ``archive``).

    Returns:
        ``(conf, env)``: ``spark.submit.pyFiles`` (and ``spark.archives`` with the executors'
        ``PATH``) to pass to the session, and the ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON``
        / ``PATH`` to set before it starts (only with an archive). PySpark's recipe,
        ``PYSPARK_PYTHON=./environment/bin/python``, cannot work for epic: Python data sources
        plan on the driver with the same interpreter setting, from the driver JVM's working
        directory, which has no ``environment/``. So the interpreter is the bare name
        ``epic-python``, which each JVM looks up on its own ``PATH``: the driver's finds a
        script running this Python, an executor's the archive's ``bin/epic-python``. With a
        ``local`` master the executor is the driver's JVM, so the archive is unpacked but
        this Python runs the tasks.

    Raises:
        EpicError: ``archive`` is missing or not an archive Spark unpacks with links intact.
    """
    files = build_py_files(topology, workdir)
    given = (conf or {}).get("spark.submit.pyFiles")
    settings = {"spark.submit.pyFiles": ",".join(files + ([given] if given else []))}
    env = {}
    if archive:
        path = os.path.abspath(archive)
        if not os.path.isfile(path):
            raise EpicError(f"--archive {archive}: no such file; build one with `epic pack -o "
                            f"{archive}`")
        if not path.endswith((".tar.gz", ".tgz")):
            raise EpicError(f"--archive {archive}: expected a .tar.gz or .tgz made by `epic pack`"
                            " (Spark unpacks those with the system's tar, which keeps the link "
                            "to the interpreter; a .tar or .zip is unpacked by Spark's own code, "
                            "which refuses or drops it)")
        given = (conf or {}).get("spark.archives")
        settings["spark.archives"] = ",".join([f"{path}#{ENV_NAME}"] + ([given] if given else []))
        # One interpreter name, two meanings (see _driver_python): the JVM finds a bare command
        # name on its own PATH. The driver's JVM, which runs the Python data sources' planners,
        # finds <workdir>/ship/bin/epic-python (this Python); an executor's, whose PATH starts
        # with the archive's bin/ (relative to the worker's directory, where Spark unpacks it),
        # finds the archive's.
        shim = _driver_python(workdir)
        settings["spark.executorEnv.PATH"] = f"{ENV_NAME}/bin:" + os.environ.get(
            "PATH", "/usr/local/bin:/usr/bin:/bin")
        env["PYSPARK_PYTHON"] = PYTHON_NAME
        env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        env["PATH"] = os.path.dirname(shim) + os.pathsep + os.environ.get("PATH", "")
    return settings, env


def shipping(topology, workdir: str, *, master: str | None, archive: str | None,
             conf: dict | None) -> dict[str, str]:
    """The settings for a session a deploy starts: ``conf`` plus what ships code (and
    ``archive``) to executors, with ``PYSPARK_PYTHON`` set for the archive.

    Nothing is added for a ``local`` master without an archive: its Python workers are children
    of this process and run this environment already.
    """
    out = dict(conf or {})
    if archive is None and (master is None or master.startswith("local")):
        return out
    settings, env = session_settings(topology, workdir, archive=archive, conf=conf)
    os.environ.update(env)
    out.update(settings)
    return out


def _driver_python(workdir: str) -> str:
    """``<workdir>/ship/bin/epic-python``: a script running this interpreter (a link would not
    do: Python finds its virtual environment from the path it was started by)."""
    d = os.path.join(workdir, SHIP_DIR, "bin")
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, PYTHON_NAME)
    text = f'#!/bin/sh\nexec "{sys.executable}" "$@"\n'
    try:
        same = open(p).read() == text
    except OSError:
        same = False
    if not same:
        with open(p + ".tmp", "w") as f:
            f.write(text)
        os.chmod(p + ".tmp", 0o755)
        os.replace(p + ".tmp", p)
    return p


# --------------------------------------------------------------------------- dependencies (pack)

@dataclass
class PackResult:
    """What :func:`pack` wrote."""

    path: str
    #: The interpreter ``bin/python`` links to; it must exist at this path on every worker.
    python: str
    distributions: list[str] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(dist) -> list[str]:
    """Names of ``dist``'s unconditional requirements (markers evaluated here; extras skipped)."""
    out = []
    for req in dist.requires or []:
        try:
            from packaging.requirements import Requirement

            r = Requirement(req)
            if r.marker is not None and not r.marker.evaluate({"extra": ""}):
                continue
            out.append(r.name)
        except ImportError:  # pragma: no cover - packaging is nearly always there
            name, _, marker = req.partition(";")
            if "extra" in marker:
                continue
            m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", name)
            if m:
                out.append(m.group(1))
    return out


def _distributions() -> dict[str, object]:
    from importlib import metadata

    out = {}
    for d in metadata.distributions():
        name = d.metadata["Name"]
        if name and _norm(name) not in out:
            out[_norm(name)] = d
    return out


def runtime_distributions(extra: tuple[str, ...] | list[str] = (), *,
                          everything: bool = False,
                          exclude: tuple[str, ...] | list[str] = ()) -> list[str]:
    """The distributions :func:`pack` packs: epic's run-time requirements and ``extra`` (each
    with its requirements, transitively), or with ``everything`` every installed one; never epic
    itself, nor ``exclude`` (default: pyspark and py4j)."""
    dists = _distributions()
    skip = {_norm(x) for x in (*SPARK_PROVIDED, *exclude)} | {"epic"}
    if everything:
        return sorted(n for n in dists if n not in skip)
    todo = [_norm(r) for r in _requirements(dists["epic"])] if "epic" in dists else []
    for x in extra:
        if _norm(x) not in dists:
            raise EpicError(f"--with {x}: no such distribution is installed in {sys.prefix}")
        todo.append(_norm(x))
    out: set[str] = set()
    while todo:
        n = todo.pop()
        if n in out or n in skip or n not in dists:
            continue
        out.add(n)
        todo.extend(_norm(r) for r in _requirements(dists[n]))
    return sorted(out)


#: What a slim pack (the default) leaves out: files only a build or a package's own test suite
#: reads. pyarrow, pandas and numpy ship ~3,000 test files (38% of the files, 18% of the bytes
#: of the default pack); every driver and executor unpacks the archive at start.
_BUILD_ONLY = (".h", ".hpp", ".pyx", ".pxd", ".pxi", ".c", ".cc", ".cpp")


def _slim_skips(rel: str) -> bool:
    """Whether a slim pack leaves out ``rel`` (a path below site-packages): a file in a
    ``tests`` directory inside a package, a C/C++ header or source, or a Cython file."""
    parts = rel.split(os.sep)
    return "tests" in parts[1:-1] or rel.endswith(_BUILD_ONLY)


def _dist_files(dist, site: str, *, slim: bool = True) -> list[str]:
    """Files of ``dist`` under ``site`` (relative paths), with the compiled ``.pyc`` of each
    ``.py`` (RECORD lists sources; compiled files spare every executor a compile); with
    ``slim``, without what :func:`_slim_skips`."""
    out = []
    tag = sys.implementation.cache_tag
    for f in dist.files or []:
        p = os.path.normpath(os.path.join(site, str(f)))
        if not p.startswith(site + os.sep) or not os.path.isfile(p):
            continue  # scripts in bin/ (their shebangs name this venv), missing files
        rel = os.path.relpath(p, site)
        if "__pycache__" in rel.split(os.sep) or (slim and _slim_skips(rel)):
            continue
        out.append(rel)
        if rel.endswith(".py"):
            d, fn = os.path.split(rel)
            pyc = os.path.join(d, "__pycache__", f"{fn[:-3]}.{tag}.pyc")
            if os.path.isfile(os.path.join(site, pyc)):
                out.append(pyc)
    return out


def pack(output: str, *, extra: tuple[str, ...] | list[str] = (), everything: bool = False,
         exclude: tuple[str, ...] | list[str] = (), level: int = 1,
         slim: bool = True) -> PackResult:
    """Write a virtual environment for executors to ``output`` (``.tar.gz`` or ``.tgz``).

    The archive holds ``pyvenv.cfg``, ``bin/python`` (a link to this environment's base
    interpreter) and ``lib/pythonX.Y/site-packages`` with the files of the distributions of
    :func:`runtime_distributions`. Use it with ``epic deploy --archive OUTPUT``.

    Args:
        output: the archive; written to a temp name and renamed.
        extra: more distributions (the topology's own dependencies), with their requirements.
        everything: every distribution installed here (still without epic and ``exclude``).
        exclude: distributions to leave out; default pyspark and py4j (the workers' Spark has
            them).
        level: gzip level (1: fast; the content is mostly compiled libraries).
        slim: leave out the packages' test suites, C headers and sources and Cython files
            (:func:`_slim_skips`): a third fewer files for every driver and executor to unpack.

    Raises:
        EpicError: ``output`` has another suffix, or this Python does not run in a virtual
            environment's layout the archive can reproduce.
    """
    t0 = time.perf_counter()
    if not output.endswith((".tar.gz", ".tgz")):
        raise EpicError(f"{output}: give a .tar.gz or .tgz name (Spark unpacks those with the "
                        "system's tar, which keeps bin/python's link to the interpreter; a .tar "
                        "or .zip goes through Spark's own unpacker, which refuses or drops it)")
    mode = "w:gz"
    site = os.path.realpath(sysconfig.get_paths()["purelib"])
    base = getattr(sys, "_base_executable", None) or sys.executable
    base = os.path.realpath(base)
    if not os.path.isfile(base):
        raise EpicError(f"cannot find the base interpreter of {sys.executable} ({base})")
    names = runtime_distributions(extra, everything=everything,
                                  exclude=tuple(exclude) if exclude else ())
    dists = _distributions()
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    prefix = f"lib/python{ver}/site-packages"
    files: set[str] = set()
    for n in names:
        files.update(_dist_files(dists[n], site, slim=slim))
    cfg = (f"home = {os.path.dirname(base)}\ninclude-system-site-packages = false\n"
           f"version = {'.'.join(map(str, sys.version_info[:3]))}\n"
           f"executable = {base}\n").encode()
    os.makedirs(os.path.dirname(os.path.abspath(output)) or ".", exist_ok=True)
    total = 0
    kwargs = {"compresslevel": level}
    # not fsynced: a pack is rebuilt by running the command again
    with atomic_path(output, fsync=False) as tmp:
        with tarfile.open(tmp, mode, **kwargs) as tar:
            info = tarfile.TarInfo("pyvenv.cfg")
            info.size, info.mode, info.mtime = len(cfg), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(cfg))
            for d in ("bin", "lib", f"lib/python{ver}", prefix):
                info = tarfile.TarInfo(d)
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
                tar.addfile(info)
            for link, target in (("bin/python", base), ("bin/python3", "python"),
                                 (f"bin/python{ver}", "python"), (f"bin/{PYTHON_NAME}", "python")):
                info = tarfile.TarInfo(link)
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
                info.mtime = int(time.time())
                tar.addfile(info)
            for rel in sorted(files):
                src = os.path.join(site, rel)
                total += os.path.getsize(src)
                tar.add(src, f"{prefix}/{rel}", recursive=False)
    return PackResult(output, base, names, len(files) + 4, total, time.perf_counter() - t0)


def archive_python(archive: str) -> str:
    """The interpreter an archive from :func:`pack` links to (``bin/python``'s target)."""
    with tarfile.open(archive) as tar:
        try:
            m = tar.getmember("bin/python")
        except KeyError:
            raise EpicError(f"{archive}: no bin/python; build the archive with `epic pack`")
        return m.linkname


def describe(result: PackResult) -> str:
    """One paragraph for the CLI: what was packed and what the workers need."""
    return (f"{result.path}: {len(result.distributions)} distributions, {result.files} files, "
            f"{result.bytes / 1e6:.0f} MB unpacked, in {result.seconds:.1f} s. Executors run "
            f"{ENV_NAME}/bin/python -> {result.python}: that Python must exist at that path on "
            "every worker. Deploy with: epic deploy TOPOLOGY -w WORKDIR --master URL "
            f"--archive {result.path}")


