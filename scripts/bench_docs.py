#!/usr/bin/env python
"""Regenerate the DEBS benchmark's section of docs/performance.md from measured results.

The second step after ``scripts/bench_debs.py``, which measures and writes
``<out-root>/results.json``: this script runs nothing. It rewrites the section between
``<!-- bench_debs:begin -->`` and ``<!-- bench_debs:end -->`` (tables, verdicts, notes; the rest of
the file is kept) and the plots ``docs/img/debs_throughput.png`` and ``docs/img/debs_delays.png``.
``bench_debs.py --write-docs`` calls the same code (``benchkit.debs_report.render``).

    .venv/bin/python scripts/bench_docs.py out/bench_debs/results.json
    .venv/bin/python scripts/bench_docs.py out/bench_debs/results.json --notes notes.md \\
        --also-json out/bench_debs_slice6m/results.json     # another input, rendered after it
    .venv/bin/python scripts/bench_docs.py r.json --doc /tmp/perf.md --img-dir /tmp/img  # a trial
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchkit import debs_report  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path, help="results.json written by scripts/bench_debs.py")
    ap.add_argument("--also-json", type=Path, action="append", default=[],
                    help="another results.json (e.g. another input), rendered after the main run")
    ap.add_argument("--notes", type=Path, default=None, help="markdown appended to the section")
    ap.add_argument("--doc", type=Path, default=ROOT / "docs" / "performance.md")
    ap.add_argument("--img-dir", type=Path, default=ROOT / "docs" / "img")
    args = ap.parse_args(argv)
    results = json.loads(args.results.read_text())
    extras = [json.loads(p.read_text()) for p in args.also_json]
    notes = args.notes.read_text() if args.notes else ""
    for p in debs_report.render(results, notes, args.doc, args.img_dir, extras):
        print(f"wrote {os.path.relpath(p)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
