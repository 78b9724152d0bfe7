"""``epic deploy | status | stop | pack``: the Spark runtime's commands, added to the main typer app.

``epic.cli`` calls :func:`register` with its app; ``python -m epic.spark.cli`` runs these commands
alone (the recovery tests use it).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

__all__ = ["register", "main"]

_EXTRA = {"allow_extra_args": True, "ignore_unknown_options": True}


def register(app: typer.Typer) -> None:
    """Add ``deploy``, ``status``, ``stop`` and ``pack`` to ``app``."""

    @app.command(context_settings=_EXTRA)
    def deploy(ctx: typer.Context,
               topology: Path = typer.Argument(..., help="A Python file building a module-level "
                                                         "epic.Topology."),
               workdir: str = typer.Option(..., "--workdir", "-w",
                                           help="Topics, checkpoints, state and status live "
                                                "here; rerun with the same one to recover. A "
                                                "path, file:// URI, or s3:// (gs://, abfs://, "
                                                "hdfs://) URI (docs/deploy.md, 'Storage')."),
               checkpoint_dir: Optional[str] = typer.Option(
                   None, "--checkpoint-dir",
                   help="Driver-local directory for Spark's checkpoints and the deploy lock "
                        "(default: the work directory; for a remote one ~/.cache/epic/"
                        "checkpoints/...). Restarts need the same one."),
               name: Optional[str] = typer.Option(None, "--name", "-n",
                                                  help="Which topology, if the file has several."),
               param: Optional[List[str]] = typer.Option(None, "--param", "-p",
                                                         help="Topology parameter key=value."),
               master: Optional[str] = typer.Option(None, "--master",
                                                    help="Spark master URL (default local[*])."),
               conf: Optional[List[str]] = typer.Option(
                   None, "--conf", help="A Spark setting key=value (repeatable); overrides "
                                        "epic's; the resolved settings go to "
                                        "<workdir>/spark-conf.json."),
               archive: Optional[Path] = typer.Option(
                   None, "--archive",
                   help="A packed environment (epic pack) whose Python the executors run "
                        "(spark.archives). With it or a non-local --master, epic and the "
                        "topology's code go as pyFiles (docs/cluster.md)."),
               ui: bool = typer.Option(False, "--ui", help="Start the Spark UI."),
               fuse: bool = typer.Option(False, "--fuse",
                                         help="Run chains of nodes in one query each (docs/deploy.md)."),
               progress: Optional[bool] = typer.Option(None, "--progress/--no-progress",
                                                       help="Live per-node table (default: on "
                                                            "a terminal)."),
               batch_rows: Optional[int] = typer.Option(
                   None, "--batch-rows", help="Rows per micro-batch from a source or topic "
                   "(default: about 128 MB of the input's columns, 1 M to 8 M rows)."),
               keep_topics: bool = typer.Option(False, "--keep-topics",
                                                help="Keep consumed topic segments (by default "
                                                     "they are deleted once every reader "
                                                     "passed)."),
               trigger: float = typer.Option(0.1, "--trigger",
                                             help="Seconds between micro-batch triggers of each "
                                                  "query."),
               partitions: Optional[int] = typer.Option(None, "--partitions",
                                                        help="Partitions of keyed stateful "
                                                             "nodes (fixed at first start; "
                                                             "default: the cores divided by "
                                                             "the keyed queries, at least 1)."),
               timeout: Optional[float] = typer.Option(None, "--timeout",
                                                       help="Give up after this many seconds."),
               debug: bool = typer.Option(False, "--debug",
                                          help="On an error, also print the full traceback.")):
        """Run a topology on Spark: every node a streaming query, linked by Arrow topics.

        A finite input exits 0 once every sink has committed everything; a live one runs until
        `epic stop WORKDIR`. Extra options after `--` are topology parameters.
        """
        from rich.console import Console

        from epic.cli import command_options, load_topology, parse_params, say
        from epic.errors import EpicError

        err = Console(stderr=True)
        try:
            t = load_topology(topology, name, parse_params(param, ctx.args),
                              command_options(ctx))
            from epic.spark.runtime import deploy as run_deploy

            show = sys.stderr.isatty() if progress is None else progress
            settings = {}
            for item in conf or []:
                key, eq, value = item.partition("=")
                if not eq or not key.strip():
                    raise EpicError(f"--conf {item!r}: expected key=value, e.g. "
                                    "--conf spark.executor.memory=4g")
                settings[key.strip()] = value
            result = run_deploy(t, workdir, master=master, ui=ui, fuse=fuse,
                                checkpoint_dir=checkpoint_dir,
                                conf=settings, archive=str(archive) if archive else None,
                                retention=not keep_topics, progress=show,
                                console=err, batch_rows=batch_rows, partitions=partitions,
                                trigger_interval=trigger, timeout=timeout)
        except EpicError as exc:
            if debug:
                import traceback

                traceback.print_exception(exc, file=sys.stderr)
            say(err, "error", "bold red", exc)
            raise typer.Exit(code=1)
        err.print(f"{result.topology}: {result.status.get('state')} in {result.seconds:.1f} s "
                  f"(status: epic status {workdir})", highlight=False, markup=False)
        for name, n in (result.status.get("late_rows") or {}).items():
            if n:
                src = getattr(t.nodes.get(name), "source", None)
                lf = getattr(src, "late_file", None)
                where = f", written to {lf}" if lf else ""
                err.print(f"node {name!r}: {n} late row(s) (behind the watermark): counted"
                          f"{where}, see the node's late policy", highlight=False, markup=False)
        for name, n in (result.status.get("dropped_rows") or {}).items():
            if n:
                err.print(f"node {name!r}: {n} row(s) older than their key's previous row "
                          "dropped (out_of_order='drop')", highlight=False, markup=False)

    @app.command()
    def pack(output: Path = typer.Option(Path("epic-env.tar.gz"), "--output", "-o",
                                         help="The archive (.tar.gz or .tgz)."),
             with_: Optional[List[str]] = typer.Option(
                 None, "--with", help="Another installed distribution the topology needs "
                                      "(repeatable), packed with its requirements."),
             everything: bool = typer.Option(False, "--all",
                                             help="Pack every installed distribution (still "
                                                  "without epic, pyspark and py4j)."),
             exclude: Optional[List[str]] = typer.Option(
                 None, "--exclude", help="A distribution to leave out (repeatable; replaces "
                                         "the default pyspark and py4j)."),
             full: bool = typer.Option(False, "--full",
                                       help="Keep the packages' test suites, C headers and "
                                            "Cython sources (left out by default: nothing "
                                            "imports them at run time).")):
        """Pack this environment's dependencies for executors (epic deploy --archive).

        Packed: epic's run-time requirements (pyarrow, pandas, ...) and --with ones.

        Not packed: epic and the topology's code (shipped at every deploy), pyspark.

        The workers need this Python at the same path (docs/cluster.md).
        """
        from rich.console import Console

        from epic.cli import say
        from epic.errors import EpicError
        from epic.spark.ship import SPARK_PROVIDED, describe, pack as do_pack

        err = Console(stderr=True)
        try:
            result = do_pack(str(output), extra=with_ or (), everything=everything,
                             exclude=exclude or SPARK_PROVIDED, slim=not full)
        except EpicError as exc:
            say(err, "error", "bold red", exc)
            raise typer.Exit(code=1)
        err.print(describe(result), highlight=False, markup=False, soft_wrap=True)

    @app.command()
    def status(workdir: str = typer.Argument(..., help="The --workdir of a deploy."),
               as_json: bool = typer.Option(False, "--json", help="Print the raw document.")):
        """Show a running or finished deploy's per-node progress."""
        import json

        from rich.console import Console

        from epic.cli import say
        from epic.errors import EpicError
        from epic.spark.runtime import read_status, status_table

        try:
            doc = read_status(workdir)
        except EpicError as exc:
            say(Console(stderr=True), "error", "bold red", exc)
            raise typer.Exit(code=1)
        if as_json:
            typer.echo(json.dumps(doc, indent=1))
            return
        Console().print(status_table(doc))
        if doc.get("error"):
            typer.echo(f"error: {doc['error']}")

    @app.command()
    def stop(workdir: str = typer.Argument(..., help="The --workdir of a running deploy.")):
        """Ask a running deploy to stop: its queries stop (a micro-batch in flight is abandoned,
        not committed), it exits 0 with status 'stopped', and a rerun resumes from the last
        committed micro-batch."""
        from epic.errors import EpicError
        from epic.spark.runtime import request_stop

        try:
            request_stop(workdir)
        except EpicError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(code=1)
        typer.echo(f"stop requested: {workdir}")


def main() -> None:  # pragma: no cover - python -m epic.spark.cli
    app = typer.Typer(add_completion=False, no_args_is_help=True)
    register(app)
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
