"""``python -m epic``: the same command line as the ``epic`` script."""

from epic.cli import app

if __name__ == "__main__":
    app(prog_name="epic")
