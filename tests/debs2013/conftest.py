"""Session fixtures of the DEBS correctness tests: one short generated game, read once.

The game is generated once per test session under pytest's session tmp dir (about 8 s): 1.5 min
per half (a 3-minute game, both halves at the official timestamps, so the half-time gap and the
2nd-half side swap are in it), seed 3.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

GAME_MINUTES_PER_HALF = 1.5
GAME_SEED = 3


@dataclass
class Game:
    """A generated game: its CSV path, ground truth, the sensor stream as one Arrow table
    (debs2013 reader) and the last ``ts`` of the stream."""

    path: Path
    truth: dict
    table: pa.Table
    end: int


@pytest.fixture(scope="session")
def short_game(tmp_path_factory) -> Game:
    from debs2013.generator import generate_game
    from debs2013.readers import read_game

    out = tmp_path_factory.mktemp("debs_game") / "game.csv"
    res = generate_game(out, minutes=GAME_MINUTES_PER_HALF, seed=GAME_SEED)
    truth = json.loads(res.truth_path.read_text())
    table = pa.Table.from_batches(list(read_game(out)))
    end = int(np.max(table.column("ts").to_numpy()))
    return Game(out, truth, table, end)
