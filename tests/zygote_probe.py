"""Run by tests/test_zygote.py as ``python -m zygote_probe MODE [CODE]``: reports, as one JSON
line on stdout, what this process looks like, then exits with CODE or waits for a signal."""

import sys

PRELOADED = "pyarrow" in sys.modules  # before any import of ours: true in a zygote child

import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402


def main(argv):
    mode = argv[0]
    line = sys.stdin.readline().strip() if mode == "echo" else ""
    print(json.dumps({"preloaded": PRELOADED, "argv": argv, "cwd": os.getcwd(),
                      "probe": os.environ.get("ZYGOTE_PROBE"), "path": sys.path[:3],
                      "stdin": line, "pid": os.getpid(), "name": __name__,
                      "hash": hash("epic")}), flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    if mode == "wait":
        time.sleep(60)
    sys.exit(int(argv[1]) if len(argv) > 1 else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
