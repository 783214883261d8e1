"""`planner gc` against moto's EC2: an orphan of a gone run is listed, then deleted on --yes."""

from __future__ import annotations

from pathlib import Path

from planner.cli import main
from pricing.pool import Pool
from runtime.providers.aws import AwsCompute, AwsOptions
from runtime.providers.cloud_api import TAG_LAUNCH, TAG_NODE, TAG_RUN, InstanceRequest
from tests.clouds.aws_job import IMAGE
from tests.clouds.conftest import boto3_session, running_instances


def _launch(api: AwsCompute, run: str) -> str:
    pool = Pool("aws", "us-east-1", "use1-az1", "g4dn.xlarge", "T4", 1, "on_demand", 0.526)
    name = f"{run}-l-1-n0"
    (instance,) = api.create(InstanceRequest(pool=pool, names=(name,), user_data="#!/usr/bin/env python3\n",
                                             tags={TAG_RUN: run, TAG_LAUNCH: "l-1", TAG_NODE: name}))
    return instance.id.split("/")[-1]


def test_gc_lists_then_deletes_the_orphan_of_a_gone_run_and_keeps_other_instances(moto, tmp_path: Path,
                                                                                   capsys) -> None:
    api = AwsCompute(boto3_session(), options=AwsOptions(image_id=IMAGE))
    orphan = _launch(api, "gone-run")
    ec2 = moto.client("ec2")
    (untagged,) = ec2.run_instances(ImageId=IMAGE, InstanceType="t3.micro", MinCount=1, MaxCount=1)["Instances"]
    runs = tmp_path / "runs"
    runs.mkdir()

    assert main(["gc", "--runs-dir", str(runs), "--provider", "aws"]) == 0
    out = capsys.readouterr().out
    assert orphan in out and "run directory gone" in out and "dry run" in out
    assert orphan in running_instances(moto), "a dry run deleted something"

    assert main(["gc", "--runs-dir", str(runs), "--provider", "aws", "--yes"]) == 0
    left = running_instances(moto)
    assert orphan not in left
    assert untagged["InstanceId"] in left, "gc deleted an instance danlu did not make"
