"""An S3-compatible object store on loopback for tests: moto's server (``moto[server]``, a dev
dependency), reached by pyarrow through the standard AWS environment variables (``FileSystem.from_uri``, which
:func:`epic.storage.resolve` uses, reads ``AWS_ENDPOINT_URL``; ``S3FileSystem()`` does not)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import uuid

import pytest


@contextlib.contextmanager
def s3_server():
    """Start moto's S3 server on 127.0.0.1 (a free port), point the AWS environment at it, create
    a fresh bucket; yield ``s3://<bucket>``. Restores the environment and stops the server."""
    pytest.importorskip("moto.server")
    import pyarrow.fs as pafs

    # Its own process: a server thread inside the test process competes for the GIL with the
    # test's driver work, and under a loaded suite an S3 request could then time out.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    host = "127.0.0.1"
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise RuntimeError("moto's S3 server did not start") from None
            time.sleep(0.1)
    env = {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "epic-test",
           "AWS_SECRET_ACCESS_KEY": "epic-test", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    bucket = f"epic-{uuid.uuid4().hex[:12]}"
    try:
        pafs.S3FileSystem(endpoint_override=f"{host}:{port}", scheme="http",
                          access_key="epic-test", secret_key="epic-test", region="us-east-1",
                          allow_bucket_creation=True).create_dir(bucket)
        yield f"s3://{bucket}"
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
