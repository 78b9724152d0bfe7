"""Q3 cost per base grid: HeatMapOperator -> 4 FEW windows (HeatMap UDA) -> q3_all_grids, on the
whole input (both halves; instants kept only inside the halves' data)."""
import sys, time
import numpy as np, pyarrow as pa
from debs2013 import constants as C
from debs2013.config import Q3Config
from debs2013.q3 import HeatMapOperator, HeatMap, HEATMAP_SCHEMA
from debs2013.dataflow import q3_all_grids_chunked
from debs2013.readers import read_game
from epic.aggregates import AggSpec
from epic.windows import WindowOperator, few_time, landmark

path = sys.argv[1]
batches = list(read_game(path))
first_end = max(int(b.column("ts").to_numpy().max()) for b in batches
                if b.column("ts").to_numpy().max() < C.SECOND_HALF_START)
for base in [tuple(int(v) for v in a.split(",")) for a in sys.argv[2:]]:
    cfg = Q3Config(base_grid=base)
    t0 = time.perf_counter()
    op = HeatMapOperator(cfg)
    maps = []
    for b in batches:
        maps += op.on_batch(b)
    maps += op.on_end()
    t1 = time.perf_counter()
    # play time: drop the stretch between the 1st half's data end and the 2nd kick-off
    shift = (C.SECOND_HALF_START - (first_end // C.PS_PER_S + 1) * C.PS_PER_S) // C.PS_PER_S * C.PS_PER_S
    def play(b):
        ts = b.column("ts").to_numpy()
        return b.set_column(0, "ts", pa.array(np.where(ts >= C.SECOND_HALF_START, ts - shift, ts)))
    maps = [play(m) for m in maps if m.num_rows]
    tw = tr = 0.0; rows = 0
    for L in (60, 300, 600, None):
        w = (landmark(1, origin=C.FIRST_HALF_START) if L is None
             else few_time(L, 1, 1, origin=C.FIRST_HALF_START))
        wop = WindowOperator(w, [AggSpec(HeatMap(base), ("cells", "times"), "heat")],
                             HEATMAP_SCHEMA, "ts", "ps", key="player_id")
        a = time.perf_counter(); out = []
        for m in maps:
            out += wop.on_batch(m)
        out += wop.on_end()
        b_ = time.perf_counter(); tw += b_ - a
        for o in out:
            for r in q3_all_grids_chunked(o, cfg):
                rows += r.num_rows
        tr += time.perf_counter() - b_
    print(f"base {base}: heatmap {t1-t0:.2f} s, windows {tw:.2f} s, grid rows {tr:.2f} s, "
          f"total {t1-t0+tw+tr:.2f} s, {rows:,} rows")
