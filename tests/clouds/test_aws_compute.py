"""AwsCompute and AwsProvider against moto's EC2 on 127.0.0.1: the calls, the tags, the errors.

moto never runs out of capacity, so the capacity answers are injected with botocore's own
``before-call.ec2.RunInstances`` hook, which short-circuits the call with the error body
EC2 sends (``{"Error": {"Code": ..., "Message": ...}}``, HTTP 400/500): the SDK then raises
the same ``ClientError`` it raises for the real cloud. Every other call goes to moto.
"""

from __future__ import annotations

import base64
import datetime as dt
from pathlib import Path

import pytest

from pricing.pool import Pool
from runtime.providers.aws import CAPACITY_CODES, AwsCompute, AwsOptions, AwsProvider
from runtime.providers.base import ProviderError
from runtime.providers.cloud_api import (
    TAG_HOME,
    TAG_RUN,
    CapacityError,
    ComputeAPIError,
    InstanceRequest,
    InstanceState,
)
from tests.clouds.aws_job import IMAGE
from tests.clouds.conftest import boto3_session, running_instances

ISSUE_CODES = ("InsufficientInstanceCapacity", "MaxSpotInstanceCountExceeded", "SpotMaxPriceTooLow",
               "InstanceLimitExceeded", "VcpuLimitExceeded", "Unsupported")


def pool(zone: str = "use1-az1", purchase: str = "spot") -> Pool:
    return Pool("aws", "us-east-1", zone, "g4dn.xlarge", "T4", 1, purchase, 0.16)


def inject(client, answers: list[str | None]) -> list[str]:
    """Answer the next RunInstances calls with these EC2 error codes (None: let moto answer)."""
    from botocore.awsrequest import AWSResponse

    seen: list[str] = []

    def hook(**_kwargs):
        code = answers.pop(0) if answers else None
        if code is None:
            seen.append("moto")
            return None
        seen.append(code)
        status = 500 if code == "InsufficientInstanceCapacity" else 400
        body = {"Error": {"Code": code, "Message": f"injected {code}"}, "ResponseMetadata": {"HTTPStatusCode": status}}
        return AWSResponse("https://ec2.us-east-1.amazonaws.com/", status, {}, None), body

    client.meta.events.register("before-call.ec2.RunInstances", hook)
    return seen


def compute(answers: list[str | None] | None = None) -> tuple[AwsCompute, list[str]]:
    api = AwsCompute(boto3_session(), options=AwsOptions(image_id=IMAGE))
    seen = inject(api.client("us-east-1"), answers) if answers is not None else []
    return api, seen


def provider(tmp_path: Path, moto, api: AwsCompute, run_id: str = "run-x", home: str = "") -> AwsProvider:
    options = AwsOptions(image_id=IMAGE, stage=f"s3://{moto.bucket}/_danlu/{run_id}")
    return AwsProvider(api, run_id=run_id, options=options, state_dir=tmp_path / "provider", home=home)


def test_create_is_a_tagged_spot_run_instances_and_delete_ends_it(moto) -> None:
    api, _ = compute()
    tags = {TAG_RUN: "r1", "danlu-launch": "l-1", "danlu-node": "r1-l-1-n0"}
    [made] = api.create(InstanceRequest(pool(), ("r1-l-1-n0",), tags, "#!/usr/bin/env python3\nprint('hi')\n"))
    region, _, bare = made.id.partition("/")
    assert region == "us-east-1" and bare.startswith("i-") and made.name == "r1-l-1-n0"
    ec2 = moto.client("ec2")
    raw = ec2.describe_instances(InstanceIds=[bare])["Reservations"][0]["Instances"][0]
    assert raw["InstanceLifecycle"] == "spot" and raw["InstanceType"] == "g4dn.xlarge" and raw["ImageId"] == IMAGE
    assert {t["Key"]: t["Value"] for t in raw["Tags"]} == {**tags, "Name": "r1-l-1-n0"}
    user_data = ec2.describe_instance_attribute(InstanceId=bare, Attribute="userData")["UserData"]["Value"]
    assert base64.b64decode(user_data).decode().startswith("#!/usr/bin/env python3")

    [seen] = api.describe([made.id])
    assert seen.state in (InstanceState.PENDING, InstanceState.RUNNING) and not seen.interruption
    assert [i.id for i in api.list_tagged(TAG_RUN, "r1")] == [made.id]
    assert api.list_tagged(TAG_RUN, "another-run") == []
    api.delete([made.id, "us-east-1/i-0123456789abcdef0"])  # an unknown id does not stop the others
    assert [i.state for i in api.describe([made.id, "us-east-1/i-0123456789abcdef0"])] == [InstanceState.TERMINATED] * 2
    assert api.list_tagged(TAG_RUN, "r1") == [] and running_instances(moto) == []


def test_on_demand_has_no_market_options(moto) -> None:
    api, _ = compute()
    [made] = api.create(InstanceRequest(pool(purchase="on_demand"), ("n0",), {TAG_RUN: "r2"}, "#!/bin/true\n"))
    raw = moto.client("ec2").describe_instances(InstanceIds=[made.id.split("/")[1]])["Reservations"][0]["Instances"][0]
    assert "InstanceLifecycle" not in raw
    api.delete([made.id])


@pytest.mark.parametrize("code", ISSUE_CODES)
def test_a_capacity_answer_is_a_capacity_error_and_a_half_made_provision_is_released(
    moto, tmp_path: Path, code: str,
) -> None:
    assert code in CAPACITY_CODES
    api, seen = compute([None, code])  # node 0 is made, node 1 is refused
    cloud = provider(tmp_path, moto, api)
    with pytest.raises(CapacityError) as raised:
        cloud.provision(pool(), nodes=2, launch_id="l-1")
    assert raised.value.code == code and code in str(raised.value)
    assert seen == ["moto", code]
    assert running_instances(moto) == []  # node 0 was terminated before the error went up
    assert api.list_tagged(TAG_RUN, "run-x") == []


def test_any_other_refusal_is_a_compute_error_with_its_code(moto, tmp_path: Path) -> None:
    api, _ = compute(["InvalidParameterValue"])
    with pytest.raises(ComputeAPIError) as raised:
        provider(tmp_path, moto, api).provision(pool(), nodes=1, launch_id="l-1")
    assert not isinstance(raised.value, CapacityError) and raised.value.code == "InvalidParameterValue"


def test_release_stale_finds_what_a_dead_controller_never_recorded(moto, tmp_path: Path) -> None:
    api, _ = compute()
    orphan = api.create(InstanceRequest(pool(), ("run-x-l-1-n0",), {TAG_RUN: "run-x"}, "#!/bin/true\n"))[0]
    other = api.create(InstanceRequest(pool(), ("other-l-1-n0",), {TAG_RUN: "other"}, "#!/bin/true\n"))[0]
    found = provider(tmp_path, moto, api).release_stale([])
    assert found == ["run-x-l-1-n0"]
    states = {i.id: i.state for i in api.describe([orphan.id, other.id])}
    assert states[orphan.id] is InstanceState.TERMINATED and states[other.id] is not InstanceState.TERMINATED
    api.delete([other.id])


def test_release_stale_leaves_a_run_of_the_same_id_from_another_runs_directory(moto, tmp_path: Path) -> None:
    # A teammate's run of the same id from before ids carried the home: its instance carries another home.
    # One this run made before it kept a home carries none and is this run's.
    api, _ = compute()
    make = lambda name, tags: api.create(InstanceRequest(pool(), (name,), tags, "#!/bin/true\n"))[0]  # noqa: E731
    mine = make("mine", {TAG_RUN: "run-x", TAG_HOME: "0123456789ab"})
    older = make("older", {TAG_RUN: "run-x"})
    theirs = make("theirs", {TAG_RUN: "run-x", TAG_HOME: "ba9876543210"})
    cloud = provider(tmp_path, moto, api, home="0123456789ab")
    assert cloud.release_stale([]) == ["mine", "older"]
    states = {i.id: i.state for i in api.describe([mine.id, older.id, theirs.id])}
    assert states[theirs.id] is not InstanceState.TERMINATED
    assert states[mine.id] is states[older.id] is InstanceState.TERMINATED
    made = cloud.provision(pool(), nodes=1, launch_id="l-2")
    raw = moto.client("ec2").describe_instances(InstanceIds=[made[0].handle["instance"].split("/")[1]])
    tags = {t["Key"]: t["Value"] for t in raw["Reservations"][0]["Instances"][0]["Tags"]}
    assert tags[TAG_RUN] == "run-x" and tags[TAG_HOME] == "0123456789ab"
    cloud.close()
    api.delete([theirs.id])


def _sent(client) -> list[dict[str, list[str]]]:
    """The query bodies of the RunInstances calls ``client`` sends from now on, as EC2 receives them."""
    from urllib.parse import parse_qs

    bodies: list[dict[str, list[str]]] = []

    def hook(request, **_kwargs):
        body = request.body.decode() if isinstance(request.body, bytes) else str(request.body)
        bodies.append(parse_qs(body))

    client.meta.events.register("before-send.ec2.RunInstances", hook)
    return bodies


TARGET = "CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId"


def test_a_held_pool_runs_in_the_reservation_its_entry_names_and_a_capacity_block_as_one(moto, tmp_path: Path) -> None:
    """EC2 starts an instance that names no reservation as an ordinary on-demand one, billed at full
    price while the ledger books the held node at $0: a held pool whose `[[purchase.held]]` names its
    reservation must target it, and a Capacity Block needs the `capacity-block` market type too. Two
    reservations of one instance type are two pools, each launched into its own."""
    from planner.job import HeldReservation

    now = dt.datetime.now(dt.UTC)

    def held(reservation: str | None) -> Pool:
        return Pool("aws", "us-east-1", None, "g4dn.xlarge", "T4", 1, "reserved_held", 0.0, reservation=reservation)

    def entry(**extra) -> HeldReservation:
        return HeldReservation(cloud="aws", region="us-east-1", instance_type="g4dn.xlarge", count=1,
                               until=now + dt.timedelta(days=2), **extra)

    blocks = (entry(reservation_id="cr-0aaaaaaaaaaaaaaaa", capacity_block=True),
              entry(reservation_id="cr-0bbbbbbbbbbbbbbbb", capacity_block=True))
    two = (entry(reservation_id="cr-0cccccccccccccccc"), entry(reservation_id="cr-0dddddddddddddddd"))
    cases = [
        (blocks, held("cr-0bbbbbbbbbbbbbbbb"), "cr-0bbbbbbbbbbbbbbbb", "capacity-block"),
        (two, held("cr-0cccccccccccccccc"), "cr-0cccccccccccccccc", None),
        (two, held("cr-0dddddddddddddddd"), "cr-0dddddddddddddddd", None),  # not the first of its type
        ((entry(),), held(None), None, None),  # a regional RI: EC2 applies it by itself
    ]
    for i, (entries, pool_, target, market) in enumerate(cases):
        api, _ = compute()
        bodies = _sent(api.client("us-east-1"))
        options = AwsOptions(image_id=IMAGE, stage=f"s3://{moto.bucket}/_danlu/run-{i}")
        cloud = AwsProvider(api, run_id=f"run-{i}", options=options, state_dir=tmp_path / f"p{i}", held=entries)
        cloud.provision(pool_, nodes=1, launch_id="l-1")
        (body,) = bodies
        assert body.get(TARGET) == ([target] if target else None)
        assert body.get("InstanceMarketOptions.MarketType") == ([market] if market else None)
        cloud.close()
        api.delete([i.id for i in api.list_tagged(TAG_RUN, f"run-{i}")])
    # A pool whose reservation the job no longer lists is refused, not launched untargeted and billed.
    api, _ = compute()
    bodies = _sent(api.client("us-east-1"))
    cloud = AwsProvider(api, run_id="run-gone", options=AwsOptions(image_id=IMAGE, stage=f"s3://{moto.bucket}/_d/g"),
                        state_dir=tmp_path / "gone", held=two)
    with pytest.raises(ProviderError, match="reservation cr-0eeeeeeeeeeeeeeee is not among the job's"):
        cloud.provision(held("cr-0eeeeeeeeeeeeeeee"), nodes=1, launch_id="l-1")
    assert bodies == []
    cloud.close()
    # Spot and on-demand pools never target a held reservation of the same instance type.
    api, _ = compute()
    bodies = _sent(api.client("us-east-1"))
    cloud = AwsProvider(api, run_id="run-od", options=AwsOptions(image_id=IMAGE, stage=f"s3://{moto.bucket}/_danlu/od"),
                        state_dir=tmp_path / "od", held=two)
    cloud.provision(pool(zone=None, purchase="on_demand"), nodes=1, launch_id="l-1")
    assert TARGET not in bodies[0] and "InstanceMarketOptions.MarketType" not in bodies[0]
    cloud.close()
    api.delete([i.id for i in api.list_tagged(TAG_RUN, "run-od")])
    assert running_instances(moto) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"imageid": "ami-12345678"}, "imageid: not an option of provider 'aws'"),
        ({"image_id": "ubuntu"}, "image_id: String should match pattern"),
        ({"heartbeat_s": 0}, "heartbeat_s: Input should be greater than or equal to 0.2"),
        ({"subnet_ids": "subnet-1"}, "subnet_ids: Input should be a valid list"),
    ],
)
def test_bad_options_are_refused_by_key(options: dict, message: str) -> None:
    with pytest.raises(ProviderError, match=message):
        AwsProvider.check_options(options)


def test_good_options_pass() -> None:
    AwsProvider.check_options({"image_id": IMAGE, "subnet_ids": ["subnet-1"], "instance_profile": "danlu-node",
                               "heartbeat_s": 2.5, "install": "danlu[train,aws]==0.1.0"})


