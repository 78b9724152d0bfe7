"""An S3-compatible object store on loopback for tests: moto's server (``moto[server]``, a dev
dependency), reached by pyarrow through the standard AWS environment variables (``FileSystem.from_uri``, which
:func:`epic.storage.resolve` uses, reads ``AWS_ENDPOINT_URL``; ``S3FileSystem()`` does not)."""

from __future__ import annotations

import contextlib
import os
import uuid

import pytest


@contextlib.contextmanager
def s3_server():
    """Start moto's S3 server on 127.0.0.1 (a free port), point the AWS environment at it, create
    a fresh bucket; yield ``s3://<bucket>``. Restores the environment and stops the server."""
    moto_server = pytest.importorskip("moto.server")
    import pyarrow.fs as pafs

    import logging

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
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
        server.stop()
