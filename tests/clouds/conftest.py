"""Fixtures for the cloud tests: moto's server on 127.0.0.1 for EC2 and S3, and the AWS data plane."""

from __future__ import annotations

import base64
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
        import boto3

        return boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                             region_name=region).client(service, endpoint_url=self.endpoint)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    pytest.importorskip("moto.server", reason="moto[server] is not installed (pip install 'danlu[test]')")
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture()
def moto(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Moto]:
    """This test's view of moto: env pointing the SDKs at it, a fresh state, a bucket."""
    import urllib.request

    env = {
        "AWS_ENDPOINT_URL": moto_server, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true",
    }
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    # moto's reset endpoint: every test starts with no instances and no buckets.
    urllib.request.urlopen(urllib.request.Request(f"{moto_server}/moto-api/reset", method="POST"), timeout=30)
    import fsspec

    fsspec.config.conf.pop("s3", None)
    _clear_s3fs_cache()
    state = Moto(moto_server, env, BUCKET)
    state.client("s3").create_bucket(Bucket=BUCKET)
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

    def running() -> list[Running]:
        found = []
        reply = ec2.describe_instances(Filters=[{"Name": "tag-key", "Values": ["danlu-run"]},
                                                {"Name": "instance-state-name", "Values": ["running"]}])
        for reservation in reply["Reservations"]:
            for raw in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in raw.get("Tags", [])}
                attr = ec2.describe_instance_attribute(InstanceId=raw["InstanceId"], Attribute="userData")
                data = base64.b64decode(attr.get("UserData", {}).get("Value", "")).decode()
                found.append(Running(f"{region}/{raw['InstanceId']}", tags.get("danlu-node", ""), data))
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
