"""Per-sensor sliding averages with FEW early emission.

Each sensor's 60-second window slides every 10 seconds; while a window is being formed, its
running average is emitted every second of event time (EPIC's emit frequency), then once more,
``final``, when it is complete. Readings up to 5 seconds out of order still count; older ones
are late and written to ``late_readings.csv`` with the watermark they missed.

    epic run topologies/sensor_averages.py
    epic run topologies/sensor_averages.py -- --input my.csv --out out/mine --delays
"""

import os

import epic

HERE = os.path.dirname(os.path.abspath(__file__))

input_path = epic.param("input", os.path.join(HERE, "data", "sensors.csv"))
out_dir = epic.param("out", "out/sensor_averages")
delays = epic.param("delays", False)

topology = epic.Topology("sensor_averages", delay_logging=delays)

readings = topology.source("readings", epic.csv_source(
    input_path, {"sid": "int32", "ts": "int64", "temp": "float64"},
    time="ts", unit="ms", header=True))

plausible = topology.filter(
    "plausible", readings,
    lambda b: epic.pc.and_(epic.pc.greater(b["temp"], -40.0), epic.pc.less(b["temp"], 125.0)))

averages = topology.window(
    "avg_60s", plausible, epic.few_time(60, 10, 1, origin=0, lateness=5), key="sid",
    aggregates=[epic.count("n"), epic.mean("temp", name="avg_temp"),
                epic.max("temp", name="max_temp")])

topology.sink("averages", averages, epic.csv_sink(
    os.path.join(out_dir, "averages.csv"),
    columns=["sid", "window_start", "window_end", "final", "n", "avg_temp", "max_temp"],
    float_format=".3f", delays=delays))

late = topology.late("late_readings", averages)
topology.sink("late", late, epic.csv_sink(os.path.join(out_dir, "late_readings.csv")))
