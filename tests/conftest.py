import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).resolve().parent))

# Every JVM the tests start (the shared session, each `epic deploy` subprocess, the cluster's
# daemons) compiles with C1 only and collects with one thread: the tests' JVMs live seconds to
# minutes on two cores, where C2's compiler threads cost more CPU than they win back. Measured:
# tests/spark/test_fuse.py + test_recovery.py 166 s -> 151 s; the cluster test 134 s -> 101 s.
# Each JVM prints "Picked up JAVA_TOOL_OPTIONS: ..." on stderr. Set the variable (even empty)
# to keep the JVM's defaults.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

settings.register_profile("ci", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=25, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=1000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
