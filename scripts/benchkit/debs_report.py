"""The DEBS 2013 benchmark's results and how they are shown.

``scripts/bench_debs.py`` measures and writes ``results.json`` (a dict: the run's command, date,
machine, load, input, target, the floor, and one :class:`CaseResult` per case as a dict);
``scripts/bench_docs.py`` (and ``bench_debs.py --write-docs``, the same code) turns one or more
such files into the generated section of ``docs/performance.md`` (between :data:`DOC_BEGIN` and
:data:`DOC_END`) and ``docs/img/debs_*.png``. Both print the console tables from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchkit import docs, plots
from benchkit.tables import fmt_num, md_table, print_table
from debs2013 import constants as C

REAL_TIME_RATE = 15_000          # events/s of the real game (spec section 9)
CASES = ("q1", "q2", "q3", "q4", "all")
DOC_BEGIN = "<!-- bench_debs:begin -->"
DOC_END = "<!-- bench_debs:end -->"
HALF_STARTS = (C.FIRST_HALF_START, C.SECOND_HALF_START)
LEFT = ("case", "runtime", "status", "target", "stream", "query", "sampled")


MODIFIERS = {"deploy": ("runtime", "deploy"), "run": ("runtime", "run"),
             "csv": ("format", "csv"), "parquet": ("format", "parquet"),
             "delays": ("delays", True), "nodelays": ("delays", False)}


def base_case(case: str) -> str:
    """A case without its repeat number: ``"all@run+nodelays#2"`` (the second run of that case
    in one benchmark run) -> ``"all@run+nodelays"``."""
    return case.partition("#")[0]


def case_mods(case: str) -> dict:
    """The modifiers after ``@``, joined by ``+``: ``"all@run+parquet"`` -> ``{"runtime": "run",
    "format": "parquet"}``; ``runtime`` (``deploy``, ``run``), ``format`` (``csv``,
    ``parquet``), ``delays`` (``delays``, ``nodelays``: delay logging on or off). Missing keys
    take the command line's defaults. A repeat number (``#2``, :func:`base_case`) is ignored."""
    name, _, mods = base_case(case).partition("@")
    out: dict = {}
    for m in (x.strip() for x in mods.split("+") if x.strip()) if mods else ():
        if m not in MODIFIERS:
            raise ValueError(f"unknown modifier {m!r} in case {case!r} (one of "
                             f"{', '.join(MODIFIERS)})")
        key, value = MODIFIERS[m]
        if key in out and out[key] != value:
            raise ValueError(f"case {case!r} sets {key} twice")
        out[key] = value
    if mods == "" and "@" in case:
        raise ValueError(f"case {case!r}: no modifier after @")
    return out


def split_case(case: str) -> tuple[str, str | None]:
    """``"all@run"`` -> ``("all", "run")`` (a case on another runtime, e.g. a peer in the same
    run); ``"q1"`` -> ``("q1", None)``; other modifiers (:func:`case_mods`) are checked, not
    returned, and a repeat number (:func:`base_case`) is dropped."""
    return base_case(case).partition("@")[0], case_mods(case).get("runtime")


def game_clock(ts_ps: int) -> str:
    """An event time (ps) as ``"half 2 +12:34"`` (time since that half's kick-off)."""
    half = 2 if ts_ps >= C.SECOND_HALF_START else 1
    d = (ts_ps - HALF_STARTS[half - 1]) / C.PS_PER_S
    sign = "-" if d < 0 else "+"
    d = abs(int(d))
    return f"half {half} {sign}{d // 60}:{d % 60:02d}"

@dataclass
class StreamDelay:
    stream: str
    query: str
    rows: int | None = None
    sampled: str = "all"
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    bytes: int | None = None
    read_s: float | None = None
    error: str | None = None


@dataclass
class CaseResult:
    case: str
    runtime: str
    fuse: bool
    command: str
    status: str = "not run"       # ok | failed (rc N) | timeout | disk | not run
    rc: int | None = None
    wall_s: float | None = None
    input_rows: int | None = None
    game_s: int | None = None
    peak_rss: int | None = None
    rows_out: int | None = None
    out_bytes: int | None = None
    load: float | None = None      # mean 1-min load average during the run
    cpu_s: float | None = None     # CPU s of the process tree (each process as last sampled)
    machine_cpu_s: float | None = None   # busy CPU s of the whole machine during the run
    game_done: int | None = None   # game seconds behind the slowest sink's watermark
    progress: dict = field(default_factory=dict)
    top_nodes: list = field(default_factory=list)
    streams: list = field(default_factory=list)
    log_tail: str = ""
    started: str = ""
    format: str = "csv"            # the topology's output format
    delays: bool = True            # delay logging (--delays)
    cpu_kinds: dict = field(default_factory=dict)   # CPU s by process kind (benchkit.proc)
    pss_kinds: dict = field(default_factory=dict)   # GiB by process kind at the peak sample
    pss_procs: dict = field(default_factory=dict)   # processes of each kind at the peak sample
    write_floor: dict | None = None   # a plain writer of the same bytes: bytes, wall_s
    encode_floor: dict | None = None  # pyarrow's encoders on the same rows: rows, *_cpu_s, *_bytes

    @property
    def events_per_s(self):
        return None if not self.wall_s or self.input_rows is None else self.input_rows / self.wall_s

    @property
    def x_real_time(self):
        """Game s / wall s; for a killed run the game seconds its slowest sink got through."""
        g = self.game_s if self.status == "ok" else self.game_done
        return None if not self.wall_s or not g else g / self.wall_s

    @property
    def est_total_s(self):
        """A killed run's wall time extrapolated linearly from its progress (optimistic for
        windows whose cost grows with time, e.g. landmark heat maps)."""
        if self.status == "ok" or not self.game_done or not self.game_s or not self.wall_s:
            return None
        return self.wall_s * self.game_s / self.game_done

def case_missed(r: CaseResult, target_s: float, parquet_target_s: float | None = None,
                mem_target_gb: float | None = None, peer_wall_s: float | None = None,
                timed_delays: bool = False, peer_walls: list[float] | None = None) -> str | None:
    """Why a case misses its targets (None: it does not). Every case must succeed; the
    all-queries case on ``epic deploy`` must finish within ``peer_wall_s`` (the same case on
    ``epic run`` in the same run: the mean of its runs ``peer_walls`` when it ran more than once,
    for the message) and below ``mem_target_gb`` of peak PSS, and without delay
    logging (issue 16's configuration: the 15 outputs of about 31 GB of CSV) within
    ``target_s`` (``parquet_target_s`` when it writes Parquet); with delay logging the wall-time
    target applies only if ``timed_delays``. Peers on ``epic run`` have only the first rule."""
    if r.status != "ok":
        return r.status
    if r.runtime != "deploy" or split_case(r.case)[0] != "all" or r.wall_s is None:
        return None
    why = []
    t, timed = _wall_rule(r.format, r.delays, target_s, parquet_target_s, timed_delays)
    if timed and r.wall_s > t:
        why.append(f"{r.wall_s:.0f} s > {t:.0f} s target ({r.wall_s / t:.2f}x)")
    if peer_wall_s is not None and r.wall_s > peer_wall_s:
        runs = (f" (the mean of its runs: {', '.join(f'{w:.1f}' for w in peer_walls)} s)"
                if peer_walls and len(peer_walls) > 1 else "")
        why.append(f"slower than epic run of the same case ({r.wall_s:.1f} s > "
                   f"{peer_wall_s:.1f} s{runs}, {r.wall_s / peer_wall_s:.3f}x)")
    if mem_target_gb is not None and r.peak_rss is not None and r.peak_rss > mem_target_gb * 2**30:
        why.append(f"peak PSS {r.peak_rss / 2**30:.1f} GiB > {mem_target_gb:g} GiB")
    return "; ".join(why) or None


def peers_of(r: dict, cases: list[dict]) -> list[dict]:
    """The successful ``epic run`` cases with the same queries, format and delay logging as
    deploy case ``r``: the peer's runs (one, or two when it ran again right after ``r``)."""
    if r["runtime"] != "deploy":
        return []
    return [c for c in cases
            if c["runtime"] == "run" and split_case(c["case"])[0] == split_case(r["case"])[0]
            and c.get("format", "csv") == r.get("format", "csv")
            and c.get("delays", True) == r.get("delays", True) and c["status"] == "ok"
            and c.get("wall_s") is not None]


def peer_wall(r: dict, cases: list[dict]) -> tuple[float | None, list[float]]:
    """``(the mean wall s of the peer's runs, their wall s)`` for deploy case ``r`` (None
    without a peer). The VM's speed drifts by up to tens of per cent within minutes; the peer
    run before and after the deploy and their mean cancels a steady drift."""
    walls = [c["wall_s"] for c in peers_of(r, cases)]
    return (sum(walls) / len(walls) if walls else None), walls


def _wall_rule(fmt: str | None, delays: bool, target_s: float, parquet_target_s: float | None,
               timed_delays: bool) -> tuple[float, bool]:
    """``(seconds, applies)``: the wall-time target of an all-queries deploy case writing
    ``fmt`` (Parquet's when it writes Parquet and one is set) and whether it applies (without
    delay logging, or with it when ``timed_delays``)."""
    t = parquet_target_s if fmt == "parquet" and parquet_target_s else target_s
    return t, not delays or bool(timed_delays)


def wall_target(results: dict, r: dict) -> tuple[float, bool]:
    """:func:`_wall_rule` of all-queries deploy case ``r`` with the run's targets."""
    return _wall_rule(r.get("format"), r.get("delays", True), results["target_seconds"],
                      results.get("parquet_target_seconds"), bool(results.get("timed_delays")))


def peer_note(r: dict, cases: list[dict]) -> str:
    """`` Against its peer: 0.906x (epic run 182.8, 169.1 s; mean 176.0 s).`` for a deploy case
    with a peer, else ``""``."""
    mean, walls = peer_wall(r, cases)
    if mean is None or not r.get("wall_s"):
        return ""
    runs = ", ".join(f"{w:.1f}" for w in walls)
    return (f" Against its peer: {r['wall_s'] / mean:.3f}x (`epic run` {runs} s"
            + (f"; mean {mean:.1f} s" if len(walls) > 1 else "") + ").")


def missed(results: dict, r: dict) -> str | None:
    """:func:`case_missed` of case ``r`` with the run's targets and its peer (the mean of the
    peer's runs, :func:`peer_wall`)."""
    mean, walls = peer_wall(r, results["cases"])
    known = {k for k in CaseResult.__dataclass_fields__}
    return case_missed(CaseResult(**{k: v for k, v in r.items() if k in known}),
                       results["target_seconds"], results.get("parquet_target_seconds"),
                       results.get("mem_target_gb"), mean, bool(results.get("timed_delays")),
                       walls)


def delay_misses(results: dict) -> list[tuple[str, str]]:
    """``(case, why)`` for every stream of ``results["delay_queries"]`` that misses the p99 delay
    target ``results["delay_target_ms"]`` (none without a target), in every case that read its
    streams; a stream without rows (or unreadable) misses: nothing was measured."""
    target = results.get("delay_target_ms")
    if target is None:
        return []
    queries = set(results.get("delay_queries") or ())
    out = []
    for r in results["cases"]:
        for s in r.get("streams") or ():
            if s["query"] not in queries:
                continue
            if s.get("p99_ms") is None:
                out.append((r["case"], f"{s['stream']}: no delay measured ("
                                       f"{s.get('error') or 'no rows'})"))
            elif s["p99_ms"] > target:
                out.append((r["case"], f"{s['stream']}: p99 delay {s['p99_ms']:,.0f} ms > "
                                       f"{target:g} ms target"))
    return out


def delay_verdicts(results: dict) -> list[str]:
    """One line per case with a delay target: met, or how many streams missed it."""
    target = results.get("delay_target_ms")
    if target is None:
        return []
    queries = ", ".join(results.get("delay_queries") or ())
    misses = delay_misses(results)
    lines = []
    for r in results["cases"]:
        mine = [m for c, m in misses if c == r["case"]]
        checked = [s for s in r.get("streams") or () if s["query"] in (results.get(
            "delay_queries") or ())]
        if not checked:
            continue
        worst = max((s["p99_ms"] for s in checked if s.get("p99_ms") is not None), default=None)
        lines.append(f"{r['case']}: p99 delay of the {queries} streams "
                     + ("" if worst is None else f"(worst {worst:,.0f} ms) ")
                     + (f"within {target:g} ms: target met" if not mine else
                        f"MISSED the {target:g} ms target on {len(mine)} of {len(checked)} "
                        "streams"))
    return lines


# ------------------------------------------------------------------------------------------------
# tables and plots

def result(r: dict) -> CaseResult:
    """A :class:`CaseResult` from its dict (results.json of older runs lack newer fields)."""
    known = CaseResult.__dataclass_fields__
    return CaseResult(**{k: v for k, v in r.items() if k in known})


def _case_row(results: dict, rd: dict):
    r = result(rd)
    eps = r.events_per_s
    xrt = r.x_real_time
    wall = "-" if r.wall_s is None else f"{r.wall_s:,.1f}"
    if r.status != "ok" and r.wall_s is not None:
        wall = f">{r.wall_s:,.0f}" if r.status.startswith(("timeout", "killed")) else wall
    miss = missed(results, rd)
    verdict = "ok" if miss is None else "MISSED"
    if r.runtime == "deploy" and split_case(r.case)[0] == "all" and miss is None:
        t, timed = wall_target(results, rd)
        verdict = f"ok (<= {t:.0f} s)" if timed else "ok (<= run, PSS)"
    elif r.runtime == "run" and miss is None:
        verdict = "peer: ok"
    mode = (r.runtime + (" --fuse" if r.fuse else "") + (", parquet" if r.format == "parquet"
                                                         else "")
            + ("" if r.delays else ", no delays"))
    return [r.case, mode, fmt_num(r.input_rows), wall,
            "-" if eps is None else ("<" if r.status != "ok" else "") + fmt_num(eps),
            "-" if xrt is None else ("~" if r.status != "ok" else "") + f"{xrt:.2f}",
            "-" if r.game_done is None else fmt_num(r.game_done),
            "-" if r.est_total_s is None else f"~{r.est_total_s:,.0f}",
            "-" if r.peak_rss is None else f"{r.peak_rss / 2**30:.1f}",
            fmt_num(r.rows_out), "-" if r.out_bytes is None else f"{r.out_bytes / 1e9:.1f}",
            "-" if r.load is None else f"{r.load:.1f}", r.status, verdict]


CASE_COLS = ["case", "runtime", "input rows", "wall s", "events/s", "x real time",
             "game s done", "est. total s", "peak PSS GiB", "rows out", "out GB", "load",
             "status", "target"]
DELAY_COLS = ["stream", "query", "rows", "p50 ms", "p99 ms", "max ms", "sampled"]


def _delay_row(s: dict):
    return [s["stream"], s["query"], fmt_num(s["rows"]), fmt_num(s["p50_ms"], 1),
            fmt_num(s["p99_ms"], 1), fmt_num(s["max_ms"], 1),
            s["sampled"] + (f" ({s['error']})" if s.get("error") else "")]


def _floor_row(fl: dict):
    return ["floor: pyarrow parse", "pyarrow.csv.open_csv", fmt_num(fl["rows"]),
            f"{fl['wall_s']:,.1f}" + (f" ({fl['cpu_s']:,.1f} CPU-s)" if fl.get("cpu_s") else ""),
            fmt_num(fl["rows_per_s"]),
            "-" if not fl.get("x_real_time") else f"{fl['x_real_time']:.1f}", "-", "-", "-", "-",
            "-", "-" if fl.get("load") is None else f"{fl['load']:.1f}", "ok", ""]


def _write_floor_row(case: str, wf: dict):
    return [f"floor: write {case}'s bytes", "sequential write + fsync", "-",
            f"{wf['wall_s']:,.1f}", "-", "-", "-", "-", "-", "-", f"{wf['bytes'] / 1e9:.1f}",
            "-" if wf.get("load") is None else f"{wf['load']:.1f}",
            f"ok ({wf['bytes'] / wf['wall_s'] / 1e6:,.0f} MB/s)" if wf.get("wall_s") else "ok",
            ""]


def _encode_floor_rows(case: str, ef: dict):
    """Two rows: pyarrow's CSV writer and Parquet writer on a case's output rows; their time
    is CPU s (the wall s column says so), no disk."""
    out = []
    for kind, how in (("csv", "pyarrow.csv.write_csv"), ("parquet", "pyarrow.parquet")):
        out.append([f"floor: encode {case}'s rows as {kind}", how + ", in memory",
                    "-", f"{ef[kind + '_cpu_s']:,.1f} CPU-s", "-", "-", "-", "-", "-",
                    fmt_num(ef["rows"]), f"{ef[kind + '_bytes'] / 1e9:.1f}",
                    "-" if ef.get("load") is None else f"{ef['load']:.1f}", "ok", ""])
    return out


def case_rows(results: dict) -> list[list[str]]:
    """The rows of the case table (:data:`CASE_COLS`): one per case (followed by the write
    floor of its output bytes where one was measured), then the parse floor."""
    rows = []
    for r in results["cases"]:
        rows.append(_case_row(results, r))
        if r.get("write_floor"):
            rows.append(_write_floor_row(r["case"], r["write_floor"]))
        if r.get("encode_floor"):
            rows.extend(_encode_floor_rows(r["case"], r["encode_floor"]))
    if results.get("floor"):
        rows.append(_floor_row(results["floor"]))
    return rows


def cpu_lines(results: dict) -> list[str]:
    """Per case with CPU by process kind: where the CPU went (markdown bullets)."""
    out = []
    for r in results["cases"]:
        kinds = r.get("cpu_kinds") or {}
        if not kinds:
            continue
        total = sum(kinds.values())
        out.append(f"- `{r['case']}` CPU by process kind ({total:,.0f} CPU-s in "
                   f"{r['wall_s']:,.0f} s wall): " + "; ".join(
                       f"{k} {v:,.0f} s" for k, v in kinds.items() if v >= 0.5) + ".")
        mem = r.get("pss_kinds") or {}
        procs = r.get("pss_procs") or {}
        if mem:
            out.append("  PSS by process kind at the peak sample: " + "; ".join(
                f"{k} {v:.2f} GiB" + (f" ({procs[k]} processes)" if procs.get(k, 1) > 1 else "")
                for k, v in mem.items() if v >= 0.01) + ".")
    return out


def print_tables(console, results: dict) -> None:
    """The case table, the delay tables (:func:`delay_cases`) and notes, on a rich console."""
    print_table(CASE_COLS, case_rows(results), LEFT, console=console,
                title=f"DEBS 2013 benchmark: {results['input']} ({results['game_s']} game s)")
    for dc in delay_cases(results):
        print_table(DELAY_COLS, [_delay_row(s) for s in dc["streams"]], LEFT, console=console,
                    title=f"Delays per output stream, case {dc['case']} ({dc['status']})")
    if results.get("not_run"):
        console.print("not run (budget used up): " + ", ".join(results["not_run"]))
    for r in results["cases"]:
        if r.get("top_nodes"):
            what = ("queries (sum of micro-batch durations with rows)" if r["runtime"] == "deploy"
                    else "nodes (seconds inside the node)")
            console.print(f"{r['case']}: busiest {what}: "
                          + "; ".join(f"{n} {ms / 1000:,.1f} s" for n, ms, _ in r["top_nodes"][:4]))
        if r.get("progress", {}).get("source_rows") is not None and r["status"] != "ok":
            console.print(f"{r['case']}: when it stopped the source had read "
                          f"{r['progress']['source_rows']:,} of {fmt_num(results['input_rows'])} "
                          "rows")


def delay_cases(results: dict) -> list[dict]:
    """The cases whose delays are shown: the all-queries cases (``all``, ``all@run``) that ran,
    else the first case run; with a delay target (a paced run) every case that ran."""
    cases = [r for r in results["cases"] if r.get("streams")]
    if results.get("delay_target_ms") is not None:
        return cases
    alls = [r for r in cases if split_case(r["case"])[0] == "all" and base_case(r["case"]) ==
            r["case"]]   # not a repeat of a peer (#2): the same streams again
    return alls or cases[:1]


def _throughput_axes(results: dict, ax1, ax2) -> None:
    cases = [r for r in results["cases"] if r.get("wall_s") is not None]
    names = [r["case"] for r in cases]
    walls = [r["wall_s"] for r in cases]
    eps = [results["input_rows"] / r["wall_s"] if r["wall_s"] else 0 for r in cases]
    colors = ["tab:blue" if r["status"] == "ok" else "tab:red" for r in cases]
    fl = results.get("floor")
    if fl:
        names.append("pyarrow\nparse")
        walls.append(fl["wall_s"])
        eps.append(fl["rows_per_s"])
        colors.append("tab:gray")
    ax1.bar(names, [w / 60 for w in walls], color=colors)
    ax1.axhline(results["target_seconds"] / 60, color="k", ls="--", lw=1,
                label=f"target for all: {results['target_seconds'] / 60:.0f} min")
    est_label = "linear estimate of a killed run's total"
    for i, r in enumerate(cases):
        if r["status"] != "ok":
            est = result(r).est_total_s
            top = r["wall_s"]
            if est is not None and est > r["wall_s"]:
                ax1.bar([i], [est / 60], fill=False, edgecolor="tab:red", ls="--",
                        label=est_label)
                est_label = None
                top = est
            ax1.text(i, top / 60, r["status"].split(" ")[0].rstrip(":"), ha="center",
                     va="bottom", fontsize=8, color="tab:red")
    label = (f"{results['input']}: {results['input_rows']:,} rows, {results['game_s']} game s, "
             f"{results['runtime_label']}, {results['date']}")
    ax1.set_ylabel("wall time, min")
    ax1.set_title(f"wall time (red: killed / failed)\n{label}", fontsize=9)
    ax1.legend(fontsize=8)
    ax2.bar(names, eps, color=colors)
    ax2.axhline(REAL_TIME_RATE, color="k", ls="--", lw=1, label="real time: 15 K events/s")
    ax2.set_yscale("log")
    ax2.set_ylim(bottom=1000)
    ax2.set_ylabel("input events / s (log)")
    ax2.set_title(f"throughput (cf. EPIC paper fig. 5)\n{label}", fontsize=9)
    ax2.legend(fontsize=8)


def plot(results: dict, img_dir: Path, extras: list[dict] = ()) -> list[Path]:
    """``debs_throughput.png`` (one row per results set: the main run, then ``extras``) and
    ``debs_delays.png`` (the first set with delay rows)."""
    plt = plots.pyplot()
    paths = []
    sets = [results, *extras]
    fig, axes = plt.subplots(len(sets), 2, figsize=(12, 4.4 * len(sets)), squeeze=False)
    for res, (ax1, ax2) in zip(sets, axes):
        _throughput_axes(res, ax1, ax2)
    paths.append(plots.save(fig, img_dir / "debs_throughput.png"))

    dsets = [(res, dc) for res in sets for dc in delay_cases(res)
             if any(s.get("p50_ms") is not None for s in dc["streams"])]
    if dsets:
        fig, axs = plt.subplots(len(dsets), 1, figsize=(12, 4.6 * len(dsets)), squeeze=False)
        for (res, dc), (ax,) in zip(dsets, axs):
            ss = [s for s in dc["streams"] if s.get("p50_ms") is not None]
            x = np.arange(len(ss))
            ax.bar(x - 0.2, [s["p50_ms"] / 1000 for s in ss], 0.4, label="p50")
            ax.bar(x + 0.2, [s["p99_ms"] / 1000 for s in ss], 0.4, label="p99")
            ax.set_xticks(x, [s["stream"].removesuffix(".csv") for s in ss], rotation=45,
                          ha="right", fontsize=8)
            lo = min(s["p50_ms"] for s in ss)
            hi = max(s["p99_ms"] for s in ss)
            if lo > 0 and hi / lo > 30:
                ax.set_yscale("log")
            else:
                ax.set_ylim(bottom=0)
            ax.set_ylabel("delay (write - entry), s")
            ax.set_title(f"delay per output stream (cf. EPIC paper fig. 6): {res['input']}, case "
                         f"{dc['case']} ({dc['status']}), "
                         f"{dc['runtime'] + (' --fuse' if dc.get('fuse') else '')}, {res['date']}",
                         fontsize=9)
            ax.legend()
        paths.append(plots.save(fig, img_dir / "debs_delays.png"))
    return paths


def extra_section(results: dict) -> list[str]:
    """A shorter block for another run (``--also-json``): command, load, case and delay tables."""
    rows = case_rows(results)
    lines = [f"### Also measured: `{results['input']}` ({fmt_num(results['input_rows'])} rows, "
             f"{results['game_s']} game seconds), {results['date']}", "",
             "```", results["argv"], "```", "",
             f"Load average at the start `{results['load_start']}`, at the end "
             f"`{results['load_end']}`.", "", md_table(CASE_COLS, rows, LEFT), ""]
    for r in results["cases"]:
        if r.get("top_nodes"):
            lines.append(f"- `{r['case']}` busiest queries: " + "; ".join(
                f"`{n}` {ms / 1000:,.1f} s" for n, ms, _ in r["top_nodes"][:4]) + ".")
    lines.append("")
    for dc in delay_cases(results):
        lines += [f"Delays, case `{dc['case']}` ({dc['status']}):", "",
                  md_table(DELAY_COLS, [_delay_row(s) for s in dc["streams"]], LEFT), ""]
    return lines


def docs_section(results: dict, notes: str, extras: list[dict] = ()) -> str:
    target = results["target_seconds"]
    rows = case_rows(results)
    lines = [DOC_BEGIN, "## DEBS 2013 benchmark (scripts/bench_debs.py)", "",
             "Generated by `scripts/bench_docs.py` from the benchmark's results.json (tables and"
             " plots; `scripts/bench_debs.py --write-docs` runs the same step); edit"
             " `scripts/benchkit/debs_report.py` or the `--notes` file, not this section.", "",
             "```", results["argv"], "```", "",
             f"Run {results['date']} on {results['machine']}; load average (uptime) at the start "
             f"`{results['load_start']}`, at the end `{results['load_end']}` (the machine was "
             "shared with other engineers' CPU-heavy jobs, so wall times are upper bounds for a "
             "quiet machine).", "",
             f"Input `{results['input']}`: {fmt_num(results['input_rows'])} rows, "
             f"{results['input_bytes'] / 1e9:.2f} GB, {results['game_s']} game seconds (seconds "
             "of the two halves with data). Each case runs the DEBS topology as a subprocess, with "
             "`--delays` unless its runtime column says `no delays`, writing CSV unless it says "
             "`parquet` (a case's `@` modifiers); wall s is the whole command (Spark/JVM start "
             "included); events/s = input "
             "rows / wall s (the real-time rate is 15,000/s); x real time = game s / wall s; "
             "load = mean 1-min load average during the run (2 cores); peak PSS = sum of the "
             "proportional set size over the `epic` process and all its descendants (JVM, "
             f"Python workers), sampled every {results.get('mem_every', 5):g} s. A killed run's "
             "wall s and events/s are bounds (`>`, "
             "`<`), its rows out are what it wrote before the kill, `game s done` is the game "
             "seconds behind its slowest sink's input watermark at the kill, its x real time "
             "(`~`) is game s done / wall s and `est. total s` extrapolates that rate linearly "
             "to the whole game (optimistic where a window's cost grows with time, e.g. the "
             "landmark heat map). Targets of an all-queries `epic deploy` case: at most "
             f"{target:g} s (CSV) / {results.get('parquet_target_seconds') or target:g} s "
             "(Parquet)"
             + ("" if results.get("timed_delays") else
                " without delay logging (issue 16's configuration: 15 CSV outputs of about "
                "31 GB; with it the outputs carry two more int64 columns, 46 % more CSV "
                "bytes)")
             + ", no slower than the same case on `epic run` in the same run (its peer; the "
             "mean of the peer's runs where it ran again right after the deploy, `#2`), "
             + (f"peak PSS at most {results['mem_target_gb']:g} GiB; "
                if results.get("mem_target_gb") else "")
             + "`floor: write` rows time a plain sequential writer of that case's output bytes "
             "(8 MiB writes, one fsync at the end) in the same run; `floor: encode` rows give "
             "the CPU s of pyarrow's own CSV and Parquet writers on a Parquet case's output rows "
             "read back (in memory, no disk).", "",
             md_table(CASE_COLS, rows, LEFT), ""]
    verdicts = []
    for r in results["cases"]:
        miss = missed(results, r)
        if r["runtime"] == "deploy" and split_case(r["case"])[0] == "all":
            t, timed = wall_target(results, r)
            verdicts.append(f"**`{r['case']}`: " + (
                (f"targets met** ({r['wall_s']:.0f} s <= {t:.0f} s)." if timed else
                 f"targets met** ({r['wall_s']:.0f} s; with delay logging the {t:.0f}-s "
                 "target is not applied).") if miss is None
                else f"MISSED**: {miss}.") + peer_note(r, results["cases"]))
        elif miss is not None:
            verdicts.append(f"{r['case']}: {miss}.")
    if not any(r["case"] == "all" for r in results["cases"]):
        verdicts.append("**The all-queries case was not run.**")
    not_run = [c for c in CASES if c not in [r["case"] for r in results["cases"]]]
    if results.get("not_run"):
        verdicts.append("Not run for lack of time (`--budget`): " + ", ".join(results["not_run"])
                        + ".")
        not_run = [c for c in not_run if c not in results["not_run"]]
    if not_run:
        verdicts.append("Not run: " + ", ".join(not_run) + ".")
    lines += [" ".join(verdicts), ""]
    lines += cpu_lines(results)
    for r in results["cases"]:
        prog = r.get("progress") or {}
        if r["status"] != "ok" and prog.get("source_rows") is not None:
            when = "at the kill" if r["status"].startswith(("timeout", "killed")) else \
                "when it failed"
            lines.append(f"- `{r['case']}` {when}: the source had read "
                         f"{prog['source_rows']:,} of {fmt_num(results['input_rows'])} input rows"
                         + (f"; slowest sink's watermark at game time "
                            f"{game_clock(int(prog['min_sink_watermark']))}"
                            if prog.get("min_sink_watermark") else "") + ".")
        if r.get("top_nodes"):
            lines.append(f"- `{r['case']}` busiest "
                         + ("queries (sum of micro-batch durations with rows): "
                            if r["runtime"] == "deploy" else "nodes (seconds inside the node): ")
                         + "; ".join(f"`{n}` {ms / 1000:,.1f} s" for n, ms, _ in
                                     r["top_nodes"][:4]) + ".")
    lines.append("")
    for dc in delay_cases(results):
        lines += [f"Delay per output stream (`write_time - entry_time`, spec section 9), case "
                  f"`{dc['case']}` ({dc['status']}); percentiles over all rows, or every k-th "
                  "row where `sampled` says 1/k:", "",
                  md_table(DELAY_COLS, [_delay_row(s) for s in dc["streams"]], LEFT), ""]
    lines += ["![wall time and events/s per case](img/debs_throughput.png)", "",
              "![p50 / p99 delay per output stream](img/debs_delays.png)", ""]
    for ex in extras:
        lines += extra_section(ex)
    if notes:
        lines += [notes.rstrip(), ""]
    lines.append(DOC_END)
    return "\n".join(lines) + "\n"


def write_docs(results: dict, notes: str, doc_path: Path, extras: list[dict] = ()) -> None:
    """Replace the generated section of ``doc_path`` (or append it); the rest is kept."""
    docs.write_section(doc_path, docs_section(results, notes, extras), DOC_BEGIN, DOC_END)


def render(results: dict, notes: str, doc_path: Path, img_dir: Path,
           extras: list[dict] = ()) -> list[Path]:
    """The docs step: the plots into ``img_dir``, then the section of ``doc_path``; returns the
    files written."""
    paths = plot(results, img_dir, extras)
    write_docs(results, notes, doc_path, extras)
    return [*paths, doc_path]

