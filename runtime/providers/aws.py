"""AWS: EC2 instances through boto3, checkpoints and the stage in S3 (s3fs).

:class:`AwsCompute` is the :class:`~runtime.providers.cloud_api.ComputeAPI` of EC2:

* ``create`` = one ``RunInstances`` (``MinCount = MaxCount``: all or nothing) with
  ``InstanceMarketOptions`` for spot (one-time, terminate on interruption), the pool's
  zone as ``Placement`` (an AZ id such as ``use1-az1`` or a name such as ``us-east-1a``),
  ``TagSpecifications`` on the instance and its volumes, and the bootstrap as
  ``UserData`` (boto3 base64-encodes it);
* a held pool whose ``[[purchase.held]]`` names its reservation targets it
  (``CapacityReservationSpecification``; a Capacity Block also with the ``capacity-block``
  market type, without which EC2 would start an on-demand instance billed at full price);
* capacity and quota answers (:data:`CAPACITY_CODES`) are :class:`CapacityError`; any
  other ``ClientError`` is :class:`ComputeAPIError` with its code;
* ``describe`` also reads the spot request: status ``marked-for-termination`` (or
  ``instance-terminated-*``) sets :attr:`Instance.interruption` -- the controller's
  API-side notice next to the node's IMDS one;
* ``delete`` = ``TerminateInstances``; ``list_tagged`` = ``DescribeInstances`` with a
  ``tag:`` filter in every region it covers.

Instance ids are ``<region>/<instance id>`` (``us-east-1/i-0abc...``): EC2 ids are
regional, and a resumed controller must find the region again.

Credentials and endpoints come from boto3's default chain (env, profile, SSO, instance
role); ``AWS_ENDPOINT_URL`` points every client at a local server (moto in the tests).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from runtime.providers.base import ProviderError
from runtime.providers.cloud import CloudOptions, CloudProvider
from runtime.providers.cloud_api import (
    TAG_RUN,
    CapacityError,
    ComputeAPI,
    ComputeAPIError,
    Instance,
    InstanceRequest,
    InstanceState,
)

__all__ = [
    "CAPACITY_CODES",
    "AwsCompute",
    "AwsOptions",
    "AwsProvider",
]

CAPACITY_CODES = frozenset({
    "InsufficientInstanceCapacity", "InsufficientHostCapacity", "InsufficientReservedInstanceCapacity",
    "MaxSpotInstanceCountExceeded", "SpotMaxPriceTooLow", "InstanceLimitExceeded", "VcpuLimitExceeded",
    "Unsupported", "InsufficientCapacityOnOutpost", "ReservationCapacityExceeded",
})
"""EC2 error codes meaning "not here, not now" (capacity, spot limits, quota): the pool is blocked."""

DEFAULT_IMAGE_PARAMETER = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
"""The AWS Deep Learning Base GPU AMI (NVIDIA driver, CUDA, python3) through its public SSM parameter."""

_STATES = {
    "pending": InstanceState.PENDING, "running": InstanceState.RUNNING, "stopping": InstanceState.STOPPING,
    "shutting-down": InstanceState.STOPPING, "stopped": InstanceState.STOPPING, "terminated": InstanceState.TERMINATED,
}
_SPOT_INTERRUPTED = ("marked-for-termination", "marked-for-stop", "instance-terminated-by-price",
                     "instance-terminated-no-capacity", "instance-terminated-capacity-oversubscribed")
_AZ_ID = re.compile(r"^[a-z]{2,}[0-9]+-az[0-9]+$")
MISSING_SDK = "the AWS provider needs boto3 and s3fs. To fix: pip install 'danlu[aws]'"


class AwsOptions(CloudOptions):
    """``[run.options]`` of ``provider = "aws"``."""

    image_id: str | None = Field(default=None, pattern=r"^ami-[0-9a-f]{8,17}$", description="AMI id")
    image_ssm_parameter: str = Field(default=DEFAULT_IMAGE_PARAMETER, description="SSM parameter naming the AMI")
    subnet_ids: list[str] = Field(default_factory=list, description="subnets; the one in the pool's zone is used")
    security_group_ids: list[str] = Field(default_factory=list)
    instance_profile: str | None = Field(default=None, description="IAM instance profile name or ARN (S3 access)")
    key_name: str | None = None
    volume_gb: int = Field(default=200, ge=8, le=16384, description="root volume size")
    regions: list[str] = Field(default_factory=list, description="regions `planner gc` looks in (default: the SDK's)")


def _client_error(exc: Any) -> tuple[str, str]:
    error = getattr(exc, "response", {}).get("Error", {})
    return str(error.get("Code", "")), str(error.get("Message", exc))


class AwsCompute(ComputeAPI):
    """EC2 through boto3 (see the module docstring). ``session`` is a ``boto3.Session``."""

    cloud = "aws"

    def __init__(self, session: Any = None, *, options: AwsOptions | None = None, regions: Sequence[str] = ()):
        try:
            import boto3
        except ImportError as exc:
            raise ProviderError(MISSING_SDK) from exc
        self.session = session or boto3.Session()
        self.options = options or AwsOptions()
        default = self.session.region_name or "us-east-1"
        self.regions = list(dict.fromkeys([*(regions or self.options.regions), default]))
        self._clients: dict[str, Any] = {}
        self._images: dict[str, str] = {}

    def client(self, region: str) -> Any:
        if region not in self._clients:
            self._clients[region] = self.session.client("ec2", region_name=region)
            if region not in self.regions:
                self.regions.append(region)
        return self._clients[region]

    def _call(self, region: str, operation: str, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self.client(region), operation)(**kwargs)
        except ClientError as exc:
            code, message = _client_error(exc)
            kind = CapacityError if code in CAPACITY_CODES else ComputeAPIError
            raise kind(f"EC2 {operation} in {region}: {code}: {message}", code=code) from None
        except BotoCoreError as exc:  # no credentials, no endpoint, ...
            raise ComputeAPIError(f"EC2 {operation} in {region}: {exc}. To fix: check the AWS credentials "
                                  "(aws sts get-caller-identity) and region.", code=type(exc).__name__) from None

    # -- create ---------------------------------------------------------------------------
    def _image(self, region: str) -> str:
        if self.options.image_id:
            return self.options.image_id
        if region not in self._images:
            from botocore.exceptions import BotoCoreError, ClientError

            name = self.options.image_ssm_parameter
            try:
                value = self.session.client("ssm", region_name=region).get_parameter(Name=name)["Parameter"]["Value"]
            except (ClientError, BotoCoreError) as exc:
                raise ComputeAPIError(
                    f"cannot read the AMI from SSM parameter {name} in {region}: {exc}. To fix: set [run.options] "
                    "image_id, or image_ssm_parameter to one that exists there.", code="ParameterNotFound",
                ) from None
            self._images[region] = str(value)
        return self._images[region]

    def _placement(self, pool_zone: str | None) -> dict[str, str]:
        if not pool_zone:
            return {}
        return {"AvailabilityZoneId": pool_zone} if _AZ_ID.match(pool_zone) else {"AvailabilityZone": pool_zone}

    def _subnet(self, region: str, zone: str | None) -> str | None:
        if not self.options.subnet_ids:
            return None
        if not zone or len(self.options.subnet_ids) == 1:
            return self.options.subnet_ids[0]
        subnets = self._call(region, "describe_subnets", SubnetIds=list(self.options.subnet_ids))["Subnets"]
        for subnet in subnets:
            if zone in (subnet.get("AvailabilityZone"), subnet.get("AvailabilityZoneId")):
                return str(subnet["SubnetId"])
        raise ComputeAPIError(f"no subnet of [run.options] subnet_ids is in zone {zone}. To fix: add one there.",
                              code="InvalidSubnet")

    def create(self, request: InstanceRequest) -> list[Instance]:
        pool = request.pool
        region = pool.region
        tags = [{"Key": k, "Value": v} for k, v in request.tags.items()]
        if request.count == 1:
            tags.append({"Key": "Name", "Value": request.names[0]})
        kwargs: dict[str, Any] = {
            "ImageId": self._image(region), "InstanceType": pool.instance_type,
            "MinCount": request.count, "MaxCount": request.count, "UserData": request.user_data,
            "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}, {"ResourceType": "volume", "Tags": tags}],
            "BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {
                "VolumeSize": self.options.volume_gb, "VolumeType": "gp3", "DeleteOnTermination": True}}],
            "InstanceInitiatedShutdownBehavior": "terminate",
            "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},  # IMDSv2 only
        }
        placement = self._placement(pool.zone)
        subnet = self._subnet(region, pool.zone)
        if subnet:
            kwargs["SubnetId"] = subnet
            placement = {}  # the subnet fixes the zone
        if placement:
            kwargs["Placement"] = placement
        if self.options.security_group_ids:
            kwargs["SecurityGroupIds"] = list(self.options.security_group_ids)
        if self.options.instance_profile:
            key = "Arn" if self.options.instance_profile.startswith("arn:") else "Name"
            kwargs["IamInstanceProfile"] = {key: self.options.instance_profile}
        if self.options.key_name:
            kwargs["KeyName"] = self.options.key_name
        if pool.purchase == "spot":
            kwargs["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": {
                "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}}
        if request.reservation_id:  # the instances run in the team's reservation, or not at all
            kwargs["CapacityReservationSpecification"] = {
                "CapacityReservationTarget": {"CapacityReservationId": request.reservation_id}}
        if request.capacity_block:
            kwargs["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
        reply = self._call(region, "run_instances", **kwargs)
        created = [self._instance(region, raw) for raw in reply.get("Instances", [])]
        if len(created) != request.count:
            self.delete([c.id for c in created])
            raise CapacityError(f"EC2 RunInstances in {region} made {len(created)} of {request.count} instances",
                                code="InsufficientInstanceCapacity")
        if request.count > 1:  # one Name per instance: its own node name
            for instance, name in zip(created, request.names, strict=True):
                self._call(region, "create_tags", Resources=[instance.id.split("/", 1)[1]],
                           Tags=[{"Key": "Name", "Value": name}, {"Key": "danlu-node", "Value": name}])
        return created

    # -- read -----------------------------------------------------------------------------
    @staticmethod
    def _split(instance_id: str, default: str) -> tuple[str, str]:
        region, _, bare = instance_id.rpartition("/")
        return (region or default), bare

    def _instance(self, region: str, raw: dict[str, Any], interrupted: bool = False) -> Instance:
        tags = {t["Key"]: t["Value"] for t in raw.get("Tags", [])}
        return Instance(
            id=f"{region}/{raw['InstanceId']}", name=tags.get("danlu-node", tags.get("Name", "")),
            state=_STATES.get(raw.get("State", {}).get("Name", ""), InstanceState.PENDING),
            zone=raw.get("Placement", {}).get("AvailabilityZone", ""), tags=tags,
            address=raw.get("PrivateIpAddress"), interruption=interrupted,
        )

    def _describe_region(self, region: str, bare: list[str]) -> dict[str, Instance]:
        try:
            reply = self._call(region, "describe_instances", InstanceIds=bare)
        except ComputeAPIError as exc:
            if not exc.code.startswith("InvalidInstanceID") or len(bare) == 1:
                if exc.code.startswith("InvalidInstanceID"):
                    return {}
                raise
            found: dict[str, Instance] = {}
            for one in bare:  # one unknown id fails the whole call: ask one by one
                found.update(self._describe_region(region, [one]))
            return found
        raws = [raw for r in reply.get("Reservations", []) for raw in r.get("Instances", [])]
        spot_ids = [raw["SpotInstanceRequestId"] for raw in raws if raw.get("SpotInstanceRequestId")]
        interrupted: set[str] = set()
        if spot_ids:
            try:
                requests = self._call(region, "describe_spot_instance_requests", SpotInstanceRequestIds=spot_ids)
                for req in requests.get("SpotInstanceRequests", []):
                    if req.get("Status", {}).get("Code") in _SPOT_INTERRUPTED:
                        interrupted.add(str(req.get("InstanceId")))
            except ComputeAPIError:
                pass  # the node's own notice still comes through its heartbeat
        return {raw["InstanceId"]: self._instance(region, raw, raw["InstanceId"] in interrupted) for raw in raws}

    def describe(self, ids: Sequence[str]) -> list[Instance]:
        default = self.regions[0]
        by_region: dict[str, list[str]] = {}
        for instance_id in ids:
            region, bare = self._split(instance_id, default)
            by_region.setdefault(region, []).append(bare)
        found: dict[str, Instance] = {}
        for region, bare in by_region.items():
            for key, instance in self._describe_region(region, bare).items():
                found[f"{region}/{key}"] = instance
        out = []
        for instance_id in ids:
            region, bare = self._split(instance_id, default)
            out.append(found.get(f"{region}/{bare}") or Instance(id=instance_id, name="", state=InstanceState.TERMINATED))
        return out

    def delete(self, ids: Sequence[str]) -> None:
        default = self.regions[0]
        by_region: dict[str, list[str]] = {}
        for instance_id in ids:
            region, bare = self._split(instance_id, default)
            by_region.setdefault(region, []).append(bare)
        for region, bare in by_region.items():
            try:
                self._call(region, "terminate_instances", InstanceIds=bare)
            except ComputeAPIError as exc:
                if not exc.code.startswith("InvalidInstanceID"):
                    raise
                for one in bare:  # some are gone already: terminate the others
                    try:
                        self._call(region, "terminate_instances", InstanceIds=[one])
                    except ComputeAPIError as again:
                        if not again.code.startswith("InvalidInstanceID"):
                            raise

    def list_tagged(self, key: str = TAG_RUN, value: str | None = None) -> list[Instance]:
        filters = [{"Name": f"tag:{key}", "Values": [value]} if value is not None else {"Name": "tag-key", "Values": [key]},
                   {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped",
                                                            "shutting-down"]}]
        found = []
        for region in list(self.regions):
            token: str | None = None
            while True:
                kwargs: dict[str, Any] = {"Filters": filters}
                if token:
                    kwargs["NextToken"] = token
                reply = self._call(region, "describe_instances", **kwargs)
                found.extend(self._instance(region, raw) for r in reply.get("Reservations", [])
                             for raw in r.get("Instances", []))
                token = reply.get("NextToken")
                if not token:
                    break
        return found


class AwsProvider(CloudProvider):
    """``provider = "aws"``: spot or on-demand EC2 instances (see docs/providers.md)."""

    name = "aws"
    Options = AwsOptions

    @classmethod
    def compute(cls, options: CloudOptions) -> AwsCompute:
        try:
            import boto3
            import s3fs  # noqa: F401 -- the stage and the checkpoints need it, on nodes too
        except ImportError as exc:
            raise ProviderError(MISSING_SDK) from exc
        aws_options = options if isinstance(options, AwsOptions) else AwsOptions.model_validate(options.model_dump())
        return AwsCompute(boto3.Session(), options=aws_options)
