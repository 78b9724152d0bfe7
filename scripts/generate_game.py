#!/usr/bin/env python3
"""Write a synthetic DEBS 2013 game (exact real format) and its ground truth.

The same command as `epic debs generate`. Examples:
    scripts/generate_game.py --minutes 5 --seed 1 --out data/game5.csv
    scripts/generate_game.py --out data/full-game          # the full ~49.6 M-row game
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from debs2013.cli import generate  # noqa: E402

if __name__ == "__main__":
    import typer

    typer.run(generate)
