import os
import sys
from pathlib import Path

import pytest
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


# Under pytest-xdist (`scripts/test` runs `-n 2 --dist loadgroup`): every test that starts
# Spark in the test process (the shared session of tests/spark, deploys through CliRunner) runs
# on one worker, one after the other, as without xdist; the other tests go to a worker module by
# module, so that a module's fixtures (DEBS games, offline references) are made once.
_ONE_WORKER = ("tests/spark/", "tests/test_status.py", "tests/test_paths.py", "tests/test_cds.py")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    if not hasattr(config, "workerinput"):   # collected by an xdist worker only
        return
    for item in items:
        one = item.nodeid.startswith(_ONE_WORKER) or item.get_closest_marker("spark")
        item.add_marker(pytest.mark.xdist_group(
            "one_worker" if one else item.nodeid.split("::", 1)[0]))
