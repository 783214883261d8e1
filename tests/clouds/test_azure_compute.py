"""AzureCompute (the Azure ComputeAPI) through the real azure-mgmt-compute SDK against a local ARM.

The SDK authenticates through DefaultAzureCredential (managed identity, served by the local
server), speaks HTTPS to 127.0.0.1, and polls ARM's long-running operations.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("azure.mgmt.compute")
pytest.importorskip("azure.identity")

from pricing.pool import Pool
from runtime.providers.azure import AzureCompute, AzureProvider, management_client
from runtime.providers.base import ProviderError
from runtime.providers.cloud_api import (
    TAG_LAUNCH,
    TAG_NODE,
    TAG_RUN,
    CapacityError,
    ComputeAPIError,
    InstanceRequest,
    InstanceState,
)
from tests.clouds.arm_server import ArmServer, arm_server_fixture

SUBNET = ("/subscriptions/00000000-0000-0000-0000-0000000000a2/resourceGroups/net/providers/Microsoft.Network/"
          "virtualNetworks/vnet/subnets/default")
OPTIONS = {"resource_group": "danlu-rg", "subnet_id": SUBNET}
USER_DATA = "#!/usr/bin/env python3\nprint('hello from customData')\n"


@pytest.fixture
def arm(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[ArmServer]:
    server = arm_server_fixture(tmp_path_factory, monkeypatch)
    yield server
    server.stop()


@pytest.fixture
def api(arm: ArmServer) -> AzureCompute:
    client = management_client(arm.SUBSCRIPTION, poll_interval_s=0.05)
    return AzureCompute(client, resource_group="danlu-rg", wait_s=30)


def _pool(purchase: str = "spot", zone: str | None = None) -> Pool:
    return Pool(cloud="azure", region="eastus", zone=zone, instance_type="Standard_NC4as_T4_v3", gpu="T4",
                gpus_per_node=1, purchase=purchase, hourly_usd=0.2)


def _request(names: tuple[str, ...], *, pool: Pool | None = None, run: str = "r1") -> InstanceRequest:
    return InstanceRequest(pool=pool or _pool(), names=names, tags={TAG_RUN: run, TAG_LAUNCH: "l-1"},
                           user_data=USER_DATA, options=OPTIONS)


def _wait_gone(api: AzureCompute, ids: list[str], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(i.state is InstanceState.TERMINATED for i in api.describe(ids)):
            return
        time.sleep(0.1)
    raise AssertionError(f"still there after {timeout_s} s: {api.describe(ids)}")


def test_spot_vms_are_created_tagged_with_the_bootstrap_as_custom_data(api: AzureCompute, arm: ArmServer) -> None:
    created = api.create(_request(("r1-l-1-n0", "r1-l-1-n1")))
    assert [i.name for i in created] == ["r1-l-1-n0", "r1-l-1-n1"]
    assert all(i.state is InstanceState.RUNNING for i in api.describe([i.id for i in created]))
    vms = {vm["name"]: vm for vm in arm.vms()}
    assert set(vms) == {"r1-l-1-n0", "r1-l-1-n1"}
    vm = vms["r1-l-1-n0"]
    props = vm["body"]["properties"]
    assert vm["custom_data"] == USER_DATA
    assert vm["tags"] == {TAG_RUN: "r1", TAG_LAUNCH: "l-1", TAG_NODE: "r1-l-1-n0"}
    assert props["priority"] == "Spot" and props["evictionPolicy"] == "Delete"
    assert props["billingProfile"]["maxPrice"] == -1
    assert props["hardwareProfile"]["vmSize"] == "Standard_NC4as_T4_v3" and vm["body"]["location"] == "eastus"
    # One VM delete releases everything: the NIC and OS disk the VM created go with it.
    nic = props["networkProfile"]["networkInterfaceConfigurations"][0]["properties"]
    assert nic["deleteOption"] == "Delete"
    assert nic["ipConfigurations"][0]["properties"]["subnet"]["id"] == SUBNET
    assert props["storageProfile"]["osDisk"]["deleteOption"] == "Delete"
    assert props["osProfile"]["linuxConfiguration"]["disablePasswordAuthentication"] is True

    assert {i.name for i in api.list_tagged(TAG_RUN, "r1")} == {"r1-l-1-n0", "r1-l-1-n1"}
    assert api.list_tagged(TAG_RUN, "another-run") == []
    # Without a resource group (planner gc): the whole subscription.
    assert {i.name for i in AzureCompute(api.client).list_tagged(TAG_RUN, "r1")} == {"r1-l-1-n0", "r1-l-1-n1"}
    assert all(i.state is InstanceState.RUNNING for i in AzureCompute(api.client).list_tagged(TAG_RUN))

    api.delete([i.id for i in created])
    _wait_gone(api, [i.id for i in created])
    assert arm.vms() == [] and api.list_tagged(TAG_RUN, "r1") == []
    api.delete([i.id for i in created])  # idempotent: gone ones are fine


def test_on_demand_vm_is_regular_and_zonal(api: AzureCompute, arm: ArmServer) -> None:
    (inst,) = api.create(_request(("r1-l-1-n0",), pool=_pool("on_demand", zone="eastus-2")))
    body = arm.vms()[0]["body"]
    assert body["properties"]["priority"] == "Regular"
    assert "evictionPolicy" not in body["properties"] and "billingProfile" not in body["properties"]
    assert body["zones"] == ["2"]
    api.delete([inst.id])
    _wait_gone(api, [inst.id])


def test_a_held_pool_with_a_capacity_reservation_group_allocates_from_it(api: AzureCompute, arm: ArmServer) -> None:
    group = ("/subscriptions/00000000-0000-0000-0000-0000000000a2/resourceGroups/rsv/providers/Microsoft.Compute/"
             "capacityReservationGroups/team-t4")
    request = _request(("r1-l-1-n0",), pool=_pool("reserved_held"))
    (inst,) = api.create(dataclasses.replace(request, reservation_id=group))
    props = arm.vms()[0]["body"]["properties"]
    assert props["capacityReservation"] == {"capacityReservationGroup": {"id": group}}
    assert props["priority"] == "Regular"
    api.delete([inst.id])
    _wait_gone(api, [inst.id])
    (plain,) = api.create(_request(("r1-l-1-n1",), pool=_pool("reserved_held")))
    assert "capacityReservation" not in arm.vms()[0]["body"]["properties"]
    api.delete([plain.id])
    _wait_gone(api, [plain.id])


@pytest.mark.parametrize("code", [
    "SkuNotAvailable", "AllocationFailed", "ZonalAllocationFailed", "OverconstrainedAllocationRequest",
    "OperationNotAllowed", "QuotaExceeded",
])
def test_capacity_and_quota_errors_are_capacity_errors_and_leave_nothing(
    api: AzureCompute, arm: ArmServer, code: str
) -> None:
    arm.fail_next_create(code, skip=1)  # the first VM is created, the second refused
    with pytest.raises(CapacityError) as caught:
        api.create(_request(("r1-l-2-n0", "r1-l-2-n1")))
    assert caught.value.code == code
    assert code in str(caught.value) and "Standard_NC4as_T4_v3" in str(caught.value)
    assert arm.vms() == [], "a failed create must hold nothing"
    assert api.list_tagged(TAG_RUN, "r1") == []
    # The pool is usable again once the cloud has capacity.
    created = api.create(_request(("r1-l-3-n0",)))
    api.delete([i.id for i in created])
    _wait_gone(api, [i.id for i in created])


def test_operation_not_allowed_without_quota_is_not_a_capacity_error(api: AzureCompute, arm: ArmServer) -> None:
    arm.fail_next_create("OperationNotAllowed", "The operation is not allowed: the image requires a plan.")
    with pytest.raises(ComputeAPIError) as caught:
        api.create(_request(("r1-l-1-n0",)))
    assert not isinstance(caught.value, CapacityError) and caught.value.code == "OperationNotAllowed"
    assert arm.vms() == []


def test_a_spot_eviction_is_an_interruption_then_terminated(api: AzureCompute, arm: ArmServer) -> None:
    created = api.create(_request(("r1-l-1-n0", "r1-l-1-n1")))
    arm.evict("r1-l-1-n0", after_s=1.0)
    evicted, other = api.describe([i.id for i in created])
    assert evicted.state is InstanceState.STOPPING and evicted.interruption
    assert other.state is InstanceState.RUNNING and not other.interruption
    _wait_gone(api, [created[0].id])
    # danlu's own delete is not an interruption.
    api.delete([created[1].id])
    (deleting,) = api.describe([created[1].id])
    assert deleting.state in (InstanceState.STOPPING, InstanceState.TERMINATED) and not deleting.interruption
    _wait_gone(api, [created[1].id])


def test_unknown_vm_is_terminated(api: AzureCompute, arm: ArmServer) -> None:
    vm_id = f"/subscriptions/{arm.SUBSCRIPTION}/resourceGroups/danlu-rg/providers/Microsoft.Compute/virtualMachines/nope"
    (inst,) = api.describe([vm_id])
    assert inst.state is InstanceState.TERMINATED
    with pytest.raises(ComputeAPIError, match="not an Azure VM resource id"):
        api.describe(["i-0123"])


def test_options_name_the_bad_key_and_the_fix(arm: ArmServer) -> None:
    AzureProvider.check_options(OPTIONS)
    assert AzureProvider.parse_options(OPTIONS).image.count(":") == 3
    with pytest.raises(ProviderError, match=r"subnet_id: .*subnet resource id") as caught:
        AzureProvider.check_options({**OPTIONS, "subnet_id": "default"})
    assert "To fix" in str(caught.value)
    with pytest.raises(ProviderError, match=r"colour: not an option of provider 'azure'"):
        AzureProvider.check_options({**OPTIONS, "colour": "blue"})
    with pytest.raises(ProviderError, match=r"resource_group: required by provider 'azure'"):
        AzureProvider.check_options({"subnet_id": SUBNET})
    with pytest.raises(ProviderError, match=r"base_url: .*must be an https"):
        AzureProvider.check_options({**OPTIONS, "base_url": "http://127.0.0.1:1"})


def test_no_subscription_is_refused_naming_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID", raising=False)
    with pytest.raises(ProviderError, match=r"no Azure subscription: \$AZURE_SUBSCRIPTION_ID is empty.*To fix: export AZURE_SUBSCRIPTION_ID="):
        AzureProvider.check_options(OPTIONS)


def test_gc_builds_the_api_without_run_options(arm: ArmServer) -> None:
    """``planner gc`` has no job: compute() from the environment alone lists the subscription."""
    api = AzureProvider.compute(AzureProvider.Options())
    created = AzureCompute(management_client(arm.SUBSCRIPTION, poll_interval_s=0.05), resource_group="danlu-rg",
                           wait_s=30).create(_request(("orphan-l-1-n0",), run="orphan"))
    assert [i.name for i in api.list_tagged(TAG_RUN, "orphan")] == ["orphan-l-1-n0"]
    api.delete([created[0].id])
    _wait_gone(api, [created[0].id])
