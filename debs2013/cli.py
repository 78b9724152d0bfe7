"""`epic debs ...`: the DEBS 2013 commands, contributed to the epic CLI as a plugin.

The core CLI knows nothing of this package; it loads every typer app registered under the
``epic.cli`` entry-point group (see pyproject.toml).
"""

from __future__ import annotations

import time
from pathlib import Path

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="The DEBS 2013 Grand Challenge (soccer monitoring) on epic.")


@app.command()
def generate(
    out: Path = typer.Option(Path("data/full-game"), "--out", help="The game CSV to write."),
    minutes: float = typer.Option(None, "--minutes", help="Minutes per half (default: full game)."),
    seed: int = typer.Option(0, "--seed", help="Seed of every random choice."),
    referee_dir: Path = typer.Option(None, "--referee-events",
                                     help="The real referee-events directory to replay."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress lines."),
) -> None:
    """Generate a game in the real sensor format; its ground truth goes beside it (game.csv:
    game.truth.json; another name: <out>.truth.json)."""
    from .generator import GeneratorConfig, generate_game

    cfg = GeneratorConfig() if referee_dir is None else GeneratorConfig(referee_dir=referee_dir)
    started = time.perf_counter()
    last = [0.0]

    def progress(rows: int, game_s: float) -> None:
        now = time.perf_counter()
        if not quiet and now - last[0] > 5:
            last[0] = now
            typer.echo(f"  {rows:>12,} rows  {rows / (now - started):>10,.0f} rows/s", err=True)

    from epic.errors import EpicError

    try:
        res = generate_game(out, minutes=minutes, seed=seed, config=cfg, progress=progress)
    except (EpicError, OSError) as exc:
        typer.echo(f"epic debs generate: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"wrote {res.rows:,} rows to {res.game_path} in {res.seconds:.1f} s "
               f"({res.rows / res.seconds:,.0f} rows/s); truth: {res.truth_path}")
