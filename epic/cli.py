"""The ``epic`` command line (typer): ``run``, ``validate``, ``graph``, ``topics``.

A topology file is plain Python that builds a module-level :class:`~epic.Topology`. The CLI imports
it and picks the topology: the only one in the module, or the one named by ``--name`` (a variable
name or the topology's own name).

Parameters reach the file without editing it: the file reads ``epic.param("input", default)``, and
the command line sets it, either as ``--param input=data.csv`` (``-p``, repeatable) or after ``--``
as ordinary options: ``epic run topo.py -- --input data.csv --delays``. Dashes in names become
underscores (``--referee-events`` sets ``referee_events``); a bare flag means ``true``. Passing a
parameter the topology never reads is an error, so typos do not go unnoticed.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from .errors import EpicError, TopologyError
from .topology import BareFlag, Topology, param_scope

__all__ = ["app", "load_topology", "parse_params", "say"]

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="epic: continuous queries over streams. `epic run topology.py` runs one "
                       "in this process.")

_err = Console(stderr=True)

_EXTRA = {"allow_extra_args": True, "ignore_unknown_options": True}


def parse_params(pairs: List[str] | None, extra: List[str] | None) -> dict[str, str]:
    """Parameters from ``--param k=v`` items and ``-- --k v`` extra arguments.

    >>> parse_params(["input=a.csv"], ["--out", "o", "--delays", "--n=3"])
    {'input': 'a.csv', 'out': 'o', 'delays': 'true', 'n': '3'}
    """
    out: dict[str, str] = {}
    given: dict[str, str] = {}   # how each was written, for the message on a repeat

    def put(key: str, val: str, how: str) -> None:
        if not key:
            raise TopologyError(f"{how!r}: no parameter name; write name=value (--param) or "
                                "--name value (after `--`)")
        if key in out:
            raise TopologyError(f"parameter {key!r} is given twice ({given[key]} and {how}); "
                                "give it once")
        out[key] = val
        given[key] = how

    for item in pairs or []:
        if "=" not in item:
            raise TopologyError(f"--param {item!r}: write key=value, e.g. --param input=data.csv")
        k, v = item.split("=", 1)
        put(k.strip().replace("-", "_"), v, f"--param {item}")
    args = list(extra or [])
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("--") or a == "--":
            if a == "--":
                i += 1
                continue
            raise TopologyError(f"unexpected argument {a!r}: topology parameters are given as "
                                "--name value after `--`, or as --param name=value")
        key = a[2:]
        if "=" in key:
            key, val = key.split("=", 1)
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            val = args[i + 1]
            i += 1
        else:
            val = BareFlag("true")
        put(key.replace("-", "_"), val, a if isinstance(val, BareFlag) or "=" in a
            else f"{a} {val}")
        i += 1
    return out


def load_topology(path: str | os.PathLike, name: str | None = None,
                  params: dict[str, str] | None = None, options: list[str] | None = None
                  ) -> Topology:
    """Import a topology file and return its topology (see the module docstring).
    ``options``: the command's own option names, to suggest one for a mistyped parameter."""
    path = Path(path)
    if not path.is_file():
        raise TopologyError(f"{path}: no such topology file")
    mod_name = f"epic_topology_{path.stem.replace('-', '_').replace('.', '_')}"
    # A loader of its own: a file not named *.py is Python all the same
    spec = importlib.util.spec_from_file_location(
        mod_name, path, loader=importlib.machinery.SourceFileLoader(mod_name, str(path)))
    module = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        with param_scope(params or {}) as scope:
            spec.loader.exec_module(module)
    except SyntaxError as exc:
        # The file, line and caret, not the import machinery's 45-line traceback.
        where = f"{exc.filename or path}:{exc.lineno}" + (f":{exc.offset}" if exc.offset else "")
        text = (exc.text or "").rstrip("\n")
        caret = ""
        if text and exc.offset:
            lead = len(text) - len(text.lstrip())
            caret = "\n    " + text.strip() + "\n    " + " " * max(0, exc.offset - 1 - lead) + "^"
        raise TopologyError(f"{where}: {type(exc).__name__}: {exc.msg}{caret}\n"
                            "(the topology file does not compile; --debug shows the traceback)"
                            ) from exc
    except EpicError as exc:
        # An epic call in the file refused its arguments: say which line made the call
        where = _file_line(exc, path)
        if where is None or str(exc).startswith(str(path)):
            raise
        exc.args = (f"{where}: {exc}",) + exc.args[1:]   # its fields (path, line) kept
        raise
    except Exception as exc:
        where = _file_line(exc, path) or str(path)
        raise TopologyError(f"{where}: {type(exc).__name__}: {exc} (raised while importing the "
                            "topology file; --debug shows the traceback)") from exc
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:
            pass
    unknown = sorted(set(params or {}) - scope.used)
    if unknown:
        known = ", ".join(sorted(scope.used)) or "none"
        hint = ""
        if options:
            import difflib

            near = {u: difflib.get_close_matches("--" + u.replace("_", "-"), options, n=1)
                    for u in unknown}
            near = {u: m[0] for u, m in near.items() if m}
            if near:
                hint = ("; " + ", ".join(f"--{u.replace('_', '-')}: did you mean the option {m}?"
                                         for u, m in near.items())
                        + " (a command's options are spelled exactly; anything else before or "
                        "after `--` is a topology parameter)")
        raise TopologyError(f"{path}: unknown parameter(s) {', '.join(unknown)}; the topology "
                            f"reads: {known}{hint}")
    found = {k: v for k, v in vars(module).items() if isinstance(v, Topology)}
    for t in found.values():
        # Where it came from: `epic deploy` ships the modules beside it (epic.spark.ship).
        t.source_file = str(path.resolve())
    if name is not None:
        for var, t in found.items():
            if name in (var, t.name):
                return t
        have = ", ".join(f"{t.name!r} (variable {v})" for v, t in found.items()) or "none"
        raise TopologyError(f"{path}: no topology named {name!r}; found: {have}. Fix: --name "
                            "takes a topology's name or its module-level variable")
    unique = {id(t): t for t in found.values()}
    if not unique:
        raise TopologyError(f"{path}: no module-level epic.Topology found; build one at module "
                            "level, e.g. `topology = epic.Topology('name')`")
    if len(unique) > 1:
        raise TopologyError(f"{path}: several topologies ({', '.join(found)}); choose one with "
                            "--name")
    return next(iter(unique.values()))


def _file_line(exc: BaseException, path: Path) -> str | None:
    """``file:line`` of the topology file's last frame in ``exc``'s traceback."""
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if os.path.abspath(f.filename) == str(path.resolve())]
    return f"{path}:{frames[-1].lineno}" if frames else None


def say(console: Console, label: str, style: str, message: object) -> None:
    """Print ``label: message`` with only the label styled: messages hold user data (CSV fields,
    paths, schemas) that must appear literally, never be read as rich markup."""
    from rich.text import Text

    console.print(Text.assemble((f"{label}:", style), " ", str(message)), highlight=False,
                  soft_wrap=True)


def _fail(exc: BaseException) -> None:
    if os.environ.get("EPIC_DEBUG"):
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    say(_err, "error", "bold red", exc)
    raise typer.Exit(code=1)


def _set_debug(debug: bool) -> None:
    if debug:
        os.environ["EPIC_DEBUG"] = "1"  # also read by the deploy command and its helpers


DebugOpt = typer.Option(False, "--debug", help="On an error, also print the full traceback.",
                        callback=_set_debug, is_eager=True, expose_value=False)


def command_options(ctx: typer.Context) -> list[str]:
    """The long option names of ``ctx``'s command (``--stats``, ``--no-summary``, ...)."""
    return [o for p in ctx.command.params for o in (*p.opts, *p.secondary_opts)
            if o.startswith("--")]


def _load(ctx: typer.Context, topology: Path, name, params) -> Topology:
    return load_topology(topology, name, parse_params(params, ctx.args), command_options(ctx))


TopologyArg = typer.Argument(..., help="A Python file building a module-level epic.Topology.",
                             exists=False)
NameOpt = typer.Option(None, "--name", "-n", help="Which topology, if the file has several.")
ParamOpt = typer.Option(None, "--param", "-p", help="Topology parameter key=value (repeatable).")


@app.command(context_settings=_EXTRA)
def run(ctx: typer.Context,
        topology: Path = TopologyArg,
        name: Optional[str] = NameOpt,
        param: Optional[List[str]] = ParamOpt,
        progress: Optional[bool] = typer.Option(None, "--progress/--no-progress",
                                                help="Live progress (default: on a terminal)."),
        summary: bool = typer.Option(True, "--summary/--no-summary",
                                     help="Print a per-node summary at the end."),
        stats: Optional[Path] = typer.Option(None, "--stats",
                                             help="Write run counters as JSON here."),
        graph: Optional[Path] = typer.Option(None, "--graph",
                                             help="Draw the graph with measured edge widths."),
        debug: bool = DebugOpt):
    """Run a topology in this process, deterministically (the reference result).

    Extra options after `--` are topology parameters: epic run topo.py -- --input data.csv
    """
    from .runner import run as run_topology

    try:
        t = _load(ctx, topology, name, param)
        for w in t.validate(warn=False):
            say(_err, "warning", "yellow", w)
        show = sys.stderr.isatty() if progress is None else progress
        result = run_topology(t, progress=show, summary=summary, console=_err, validate=False)
        if stats is not None:
            stats.parent.mkdir(parents=True, exist_ok=True)
            stats.write_text(result.to_json())
        if graph is not None:
            from .graph_render import render
            _, msg = render(t, graph, result.edges)
            _err.print(msg, highlight=False, markup=False)
    except EpicError as exc:
        _fail(exc)


@app.command(context_settings=_EXTRA)
def validate(ctx: typer.Context,
             topology: Path = TopologyArg,
             name: Optional[str] = NameOpt,
             param: Optional[List[str]] = ParamOpt,
             debug: bool = DebugOpt):
    """Build and check a topology without running it; list its nodes and streams."""
    try:
        t = _load(ctx, topology, name, param)
        warnings_ = t.validate(warn=False)
    except EpicError as exc:
        _fail(exc)
    from .sources import CsvSource, ParquetSource
    from .topology import SourceNode

    for n in t.nodes.values():
        src = getattr(n, "source", None) if isinstance(n, SourceNode) else None
        path = getattr(src, "path", None) if isinstance(src, (CsvSource, ParquetSource)) else None
        if isinstance(path, str) and "://" not in path and not os.path.exists(path):
            warnings_.append(f"source {n.name!r}: input file {path} not found (a run stops "
                             "there); check the path or the parameter that sets it")
    for n in t.topological_order():
        outs = "; ".join(f"{s.name}: [{', '.join(s.columns)}] time={s.time} ({s.unit})"
                         + ("" if s.bounded else " unbounded") for s in n.outputs)
        typer.echo(f"{n.name:<24} {n.kind:<12} {outs or '-'}")
    for w in warnings_:
        say(_err, "warning", "yellow", w)
    typer.echo(f"ok: topology {t.name!r}, {len(t.nodes)} nodes, "
               f"{sum(len(n.outputs) for n in t.nodes.values())} streams, "
               f"{len(warnings_)} warning(s)")


@app.command(context_settings=_EXTRA)
def graph(ctx: typer.Context,
          topology: Path = TopologyArg,
          output: Path = typer.Option(Path("graph.svg"), "--output", "-o",
                                      help=".svg/.png/.pdf (Graphviz dot if installed, "
                                           "else matplotlib) or .dot"),
          name: Optional[str] = NameOpt,
          param: Optional[List[str]] = ParamOpt,
          stats: Optional[Path] = typer.Option(None, "--stats",
                                               help="Counters from `epic run --stats` for "
                                                    "edge widths."),
          measure: bool = typer.Option(False, "--run",
                                       help="Run the topology first; widths follow row counts."),
          debug: bool = DebugOpt):
    """Draw the dataflow: nodes, streams, split fan-outs (Graphviz DOT)."""
    import json

    from .graph_render import render

    try:
        t = _load(ctx, topology, name, param)
        t.validate(warn=False)
        counts = None
        if stats is not None and measure:
            raise TopologyError("--stats and --run are alternatives: widths from a run's "
                                "counters file, or from a run made now; give one")
        if stats is not None:
            counts = _edge_counts(stats, t)
        elif measure:
            from .runner import run as run_topology
            counts = run_topology(t, validate=False).edges
        _, msg = render(t, output, counts)
    except EpicError as exc:
        _fail(exc)
    typer.echo(msg)


def _edge_counts(stats: Path, t: Topology) -> dict:
    """The row count per stream in ``stats`` (``epic run --stats``), checked against ``t``."""
    import json

    try:
        doc = json.loads(stats.read_text())
    except FileNotFoundError:
        raise TopologyError(f"--stats {stats}: no such file; write one with `epic run "
                            f"... --stats {stats}`, or draw from a run now with --run") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise TopologyError(f"--stats {stats}: not an `epic run --stats` file ({exc})") from None
    edges = doc.get("edges") if isinstance(doc, dict) else None
    if not isinstance(edges, dict):
        raise TopologyError(f"--stats {stats}: not an `epic run --stats` file (no \"edges\" "
                            "counts)")
    fix = (f"give the counters of a run of this topology (`epic run ... --stats {stats}`), "
           "or draw from a run now with --run")
    name = doc.get("topology")
    if name is not None and name != t.name:
        raise TopologyError(f"--stats {stats}: its counts are of topology {name!r}, not "
                            f"{t.name!r}; {fix}")
    streams = {s.name for n in t.nodes.values() for s in n.outputs}
    other, missing = sorted(set(edges) - streams), sorted(streams - set(edges))
    if other or missing:
        parts = ([f"streams not in topology {t.name!r}: {', '.join(other[:5])}"] if other else [])
        parts += ([f"none for its streams {', '.join(missing[:5])}"] if missing else [])
        raise TopologyError(f"--stats {stats}: its counts are of another topology "
                            f"({'; '.join(parts)}); {fix}")
    return edges


# -- topics ------------------------------------------------------------------------------------
topics_app = typer.Typer(no_args_is_help=True, help="Inspect Arrow topic directories.")
app.add_typer(topics_app, name="topics")


@topics_app.command("ls")
def topics_ls(directory: Path = typer.Argument(..., help="A topic directory.")):
    """List a topic's visible segments."""
    from . import topics
    try:
        typer.echo(topics.format_ls(topics.ls(directory)))
    except EpicError as exc:
        _fail(exc)


@topics_app.command("tail")
def topics_tail(directory: Path = typer.Argument(..., help="A topic directory."),
                rows: int = typer.Option(10, "--rows", "-n", help="How many rows.")):
    """Print a topic's last rows."""
    from . import topics
    try:
        typer.echo(topics.format_tail(topics.tail(directory, rows)))
    except EpicError as exc:
        _fail(exc)


@topics_app.command("stat")
def topics_stat(directory: Path = typer.Argument(..., help="A topic directory.")):
    """Summarise a topic: schema, segments, rows, watermark, consumers."""
    from . import topics
    try:
        typer.echo(topics.format_stat(topics.stat(directory)))
    except EpicError as exc:
        _fail(exc)


def _load_plugins(target: typer.Typer = app) -> None:
    """Add the commands that installed packages register under the ``epic.cli`` entry-point
    group: a typer app becomes a sub-command group (``epic debs ...`` from the debs2013 package),
    a function is called with the app to add top-level commands (``epic deploy``, ``status`` and
    ``stop`` from the Spark runtime, ``epic.spark.cli:register``). The core CLI imports neither."""
    from importlib.metadata import entry_points

    for ep in sorted(entry_points(group="epic.cli"), key=lambda e: e.name):
        try:
            sub = ep.load()
        except Exception as exc:  # a broken plugin must not take the whole CLI down
            typer.echo(f"epic: plugin {ep.name!r} ({ep.value}) failed to load: {exc}", err=True)
            continue
        if isinstance(sub, typer.Typer):
            target.add_typer(sub, name=ep.name)
        else:
            sub(target)


_load_plugins()


def main() -> None:  # pragma: no cover - the console script
    app()
