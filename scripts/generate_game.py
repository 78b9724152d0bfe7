#!/usr/bin/env python3
"""Write a synthetic DEBS 2013 game (exact real format) and its ground truth.

Examples:
    scripts/generate_game.py --minutes 5 --seed 1 --out data/game5.csv
    scripts/generate_game.py --out data/full-game          # the full ~49.6 M-row game
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from debs2013.generator import GeneratorConfig, generate_game  # noqa: E402

app = typer.Typer(add_completion=False, help=__doc__)


@app.command()
def main(
    out: Path = typer.Option(Path("data/full-game"), "--out", help="The game CSV to write."),
    minutes: float = typer.Option(None, "--minutes", help="Minutes per half (default: full game)."),
    seed: int = typer.Option(0, "--seed", help="Seed of every random choice."),
    referee_dir: Path = typer.Option(None, "--referee-events",
                                     help="The real referee-events directory to replay."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress lines."),
) -> None:
    """Generate the game; the ground truth goes to <out stem>.truth.json next to it."""
    cfg = GeneratorConfig() if referee_dir is None else GeneratorConfig(referee_dir=referee_dir)
    started = time.perf_counter()
    last = [0.0]

    def progress(rows: int, game_s: float) -> None:
        now = time.perf_counter()
        if not quiet and now - last[0] > 5:
            last[0] = now
            typer.echo(f"  {rows:>12,} rows  {rows / (now - started):>10,.0f} rows/s", err=True)

    res = generate_game(out, minutes=minutes, seed=seed, config=cfg, progress=progress)
    typer.echo(f"wrote {res.rows:,} rows to {res.game_path} in {res.seconds:.1f} s "
               f"({res.rows / res.seconds:,.0f} rows/s); truth: {res.truth_path}")


if __name__ == "__main__":
    app()
