"""A real S3 API for the tests: moto's standalone server on 127.0.0.1, one per test session.

The server enforces IAM authentication after its first three requests, which create a user,
its access key and an allow-all policy: every later request must be signed with that key,
so a wrong secret is refused (403) as AWS refuses it.

Fixtures (registered by ``tests/conftest.py``):
- ``s3_server``: the running server (endpoint and credentials), for the session;
- ``s3_env``: the server, with ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
  ``AWS_SECRET_ACCESS_KEY`` and ``AWS_REGION`` set for one test (restored after);
- ``s3_bucket``: a new, empty bucket for one test.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from fusion_ray.storage import Storage, StorageConfig
from tests.procs import free_port

_AUTH_SETUP_REQUESTS = 3
"""create_user, create_access_key, put_user_policy: the requests moto lets through unsigned."""
_START_TIMEOUT_S = 60.0
_bucket_numbers = itertools.count()


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    access_key_id: str
    secret_access_key: str
    region: str = "us-east-1"

    def env(self) -> dict[str, str]:
        """The standard AWS variables that point a client at this server."""
        return {"AWS_ENDPOINT_URL": self.endpoint_url, "AWS_ACCESS_KEY_ID": self.access_key_id,
                "AWS_SECRET_ACCESS_KEY": self.secret_access_key, "AWS_REGION": self.region}

    def config(self) -> StorageConfig:
        return StorageConfig.from_env(self.env())

    def storage(self) -> Storage:
        return Storage(self.config())

    def create_bucket(self, name: str) -> str:
        fs = pafs.S3FileSystem(
            access_key=self.access_key_id, secret_key=self.secret_access_key, region=self.region, scheme="http",
            endpoint_override=self.endpoint_url.removeprefix("http://"), allow_bucket_creation=True)
        fs.create_dir(name)
        return name



def _wait_until_listening(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"moto server exited ({process.returncode}): {log.read_text()[-2000:]}")
        with socket.socket() as sock:
            sock.settimeout(0.5)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"moto server did not listen on port {port} within {_START_TIMEOUT_S} s")


def _create_credentials(endpoint_url: str) -> tuple[str, str]:
    """An IAM user with an allow-all policy and its access key (moto's unsigned requests)."""
    import boto3

    iam = boto3.client("iam", endpoint_url=endpoint_url, region_name="us-east-1",
                       aws_access_key_id="setup", aws_secret_access_key="setup")
    iam.create_user(UserName="fusion-ray-tests")
    key = iam.create_access_key(UserName="fusion-ray-tests")["AccessKey"]
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    iam.put_user_policy(UserName="fusion-ray-tests", PolicyName="all", PolicyDocument=json.dumps(policy))
    return str(key["AccessKeyId"]), str(key["SecretAccessKey"])


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """moto's S3 server (``moto[server]``, a dev dependency) for the whole session."""
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "server.log"
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(_AUTH_SETUP_REQUESTS)}
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                   stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        _wait_until_listening(process, port, log)
        endpoint = f"http://127.0.0.1:{port}"
        key_id, secret = _create_credentials(endpoint)
        yield S3Server(endpoint, key_id, secret)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The server, with the standard AWS variables pointing at it for this test."""
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    return s3_server


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> str:
    """A new, empty bucket (a unique name per test)."""
    return s3_server.create_bucket(f"fr-test-{os.getpid()}-{next(_bucket_numbers)}")


__all__ = ["S3Server", "s3_bucket", "s3_env", "s3_server"]
