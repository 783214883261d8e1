"""Fixtures for the cloud tests: moto's server on 127.0.0.1 for EC2 and S3, and the AWS data plane."""

from __future__ import annotations

import base64
import functools
import itertools
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.clouds.dataplane import DataPlane, Running

BUCKET = "danlu-test"
REGION = "us-east-1"


@dataclass(frozen=True)
class Moto:
    """A running moto server: its endpoint, the env that points boto3/s3fs at it, and a bucket."""

    endpoint: str
    env: dict[str, str]
    bucket: str

    def client(self, service: str, region: str = REGION):
        return _client(self.endpoint, service, region)


@functools.cache
def boto3_session(region: str = REGION):
    """One session for all tests: loading EC2's service model takes seconds on a busy machine.
    (Event hooks go on a client's own ``meta.events``, never on this shared session.)"""
    import boto3

    return boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=region)


@functools.cache
def _client(endpoint: str, service: str, region: str):
    return boto3_session(region).client(service, endpoint_url=endpoint)


_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": REGION,
        "AWS_EC2_METADATA_DISABLED": "true"}


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    pytest.importorskip("moto.server", reason="moto[server] is not installed (pip install 'danlu[test]')")
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    # moto builds its EC2 backend (AMIs, instance types) on first use: seconds, so once per
    # session, never reset (the tests isolate themselves by run id and bucket instead).
    ec2 = _client(endpoint, "ec2", REGION)
    made = ec2.run_instances(ImageId="ami-03cf127a", InstanceType="t3.micro", MinCount=1, MaxCount=1)
    ec2.terminate_instances(InstanceIds=[i["InstanceId"] for i in made["Instances"]])
    yield endpoint
    server.stop()


_BUCKETS = itertools.count(1)


@pytest.fixture()
def moto(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Moto]:
    """This test's view of moto: env pointing the SDKs at it, no instance running, its own bucket."""
    env = {"AWS_ENDPOINT_URL": moto_server, **_ENV}
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    _clear_s3fs_cache()
    state = Moto(moto_server, env, f"{BUCKET}-{next(_BUCKETS)}")
    left = running_instances(state)
    if left:  # an earlier test that failed half-way: start clean
        state.client("ec2").terminate_instances(InstanceIds=left)
    state.client("s3").create_bucket(Bucket=state.bucket)
    yield state
    _clear_s3fs_cache()


def _clear_s3fs_cache() -> None:
    try:
        import s3fs
    except ImportError:
        return
    s3fs.S3FileSystem.clear_instance_cache()


def aws_running(moto: Moto, region: str = REGION):
    """The data plane's view of EC2: running instances tagged danlu-run, with their user data."""
    ec2 = moto.client("ec2", region)
    user_data: dict[str, str] = {}  # fetched once per instance: user data never changes

    def running() -> list[Running]:
        found = []
        reply = ec2.describe_instances(Filters=[{"Name": "tag-key", "Values": ["danlu-run"]},
                                                {"Name": "instance-state-name", "Values": ["running"]}])
        for reservation in reply["Reservations"]:
            for raw in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in raw.get("Tags", [])}
                if raw["InstanceId"] not in user_data:
                    attr = ec2.describe_instance_attribute(InstanceId=raw["InstanceId"], Attribute="userData")
                    user_data[raw["InstanceId"]] = base64.b64decode(attr.get("UserData", {}).get("Value", "")).decode()
                found.append(Running(f"{region}/{raw['InstanceId']}", tags.get("danlu-node", ""),
                                     user_data[raw["InstanceId"]]))
        return found

    return running


def aws_terminate(moto: Moto):
    def terminate(instance_id: str) -> None:
        region, _, bare = instance_id.rpartition("/")
        moto.client("ec2", region or REGION).terminate_instances(InstanceIds=[bare])

    return terminate


@pytest.fixture()
def aws_plane(moto: Moto, tmp_path: Path) -> Iterator[DataPlane]:
    plane = DataPlane(list_running=aws_running(moto), terminate=aws_terminate(moto), sandbox=tmp_path / "nodes",
                      env=moto.env)
    with plane:
        yield plane
    assert not plane.node_processes(), "a node process outlived its instance"


def running_instances(moto: Moto, region: str = REGION) -> list[str]:
    """Ids of instances moto reports pending or running."""
    reply = moto.client("ec2", region).describe_instances(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
    return [raw["InstanceId"] for r in reply["Reservations"] for raw in r["Instances"]]


os.environ.setdefault("OMP_NUM_THREADS", "1")
