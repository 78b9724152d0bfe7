"""`epic debs ...` is contributed through the epic.cli entry-point group."""

import json

from typer.testing import CliRunner

from epic.cli import app


def test_epic_debs_generate_writes_game_and_truth(tmp_path):
    """The plugin command is reachable from the main CLI and writes both files."""
    out = tmp_path / "game.csv"
    res = CliRunner().invoke(app, ["debs", "generate", "--minutes", "0.1", "--seed", "3",
                                   "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    first = out.read_text().splitlines()[0].split(",")
    assert len(first) == 13 and all(f.lstrip("-").isdigit() for f in first)
    truth = json.loads(out.with_suffix(".truth.json").read_text())
    assert [h["half"] for h in truth["halves"]] == [1, 2]
