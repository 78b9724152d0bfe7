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


def test_epic_debs_generate_refuses_bad_arguments_with_a_message_and_no_file(tmp_path):
    """Minutes that are not positive, a negative seed, a missing referee directory or an output
    that is a directory: one line naming the fix, exit code 1, no (empty) game file left."""
    out = tmp_path / "g.csv"
    cases = [(["--minutes", "0"], "positive number of minutes"),
             (["--minutes", "nan"], "positive number of minutes"),
             (["--seed", "-5"], "whole number from 0"),
             (["--referee-events", str(tmp_path / "none")], "is not a directory"),
             (["--out", str(tmp_path)], "is a directory")]
    for extra, words in cases:
        args = ["debs", "generate", "--out", str(out), "--quiet"] + extra
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 1, (extra, res.output)
        assert words in res.output and "Traceback" not in res.output, (extra, res.output)
        assert not out.exists(), extra
