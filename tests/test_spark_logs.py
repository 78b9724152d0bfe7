"""epic's log4j2 configuration for Spark's JVM drops the warnings every deploy triggers by design
and nothing else of those loggers (no Spark needed: the regexes are read from the file)."""

from __future__ import annotations

import re

from epic.spark.session import LOG4J2_PROPERTIES

NOISE = {
    "org.apache.spark.SparkConf": "Note that spark.local.dir will be overridden by the value set "
                                  "by the cluster manager (via SPARK_LOCAL_DIRS in standalone/"
                                  "kubernetes and LOCAL_DIRS in YARN).",
    "org.apache.spark.util.Utils": "Your hostname, h, resolves to a loopback address: 127.0.1.1; "
                                   "using 10.0.0.2 instead (on interface eth0)",
}
KEPT = {
    "org.apache.spark.SparkConf": "The configuration key 'spark.x' has been deprecated",
    "org.apache.spark.util.Utils": "Service 'SparkUI' could not bind on port 4040.",
}


def _filters() -> dict[str, list[str]]:
    props = dict(line.split(" = ", 1) for line in LOG4J2_PROPERTIES.splitlines()
                 if " = " in line and not line.startswith("#"))
    out: dict[str, list[str]] = {}
    for key, value in props.items():
        m = re.fullmatch(r"logger\.(\w+)\.filter\.(\w+)\.regex", key)
        if m and props.get(f"logger.{m[1]}.filter.{m[2]}.onMatch") == "DENY":
            out.setdefault(props[f"logger.{m[1]}.name"], []).append(value)
    return out


def test_only_the_lines_epic_causes_are_dropped():
    filters = _filters()
    for logger, line in NOISE.items():
        assert any(re.fullmatch(rx, line) for rx in filters[logger]), (logger, line)
    for logger, line in KEPT.items():
        assert not any(re.fullmatch(rx, line) for rx in filters.get(logger, [])), (logger, line)
