"""GcpCompute (runtime/providers/gcp.py) through google-cloud-compute against the local GCE API.

The real SDK (REST transport) talks to tests/clouds/gce_server.py on 127.0.0.1: what is
asserted here is what danlu sends and how it reads GCE's answers, including the capacity
errors GCE returns in a zone operation rather than as the HTTP status.
"""

from __future__ import annotations

import dataclasses
import time

import pytest

from pricing.pool import Pool
from runtime.providers.cloud_api import (
    TAG_LAUNCH,
    TAG_NODE,
    TAG_RUN,
    CapacityError,
    ComputeAPIError,
    InstanceRequest,
)
from runtime.providers.cloud_api import InstanceState as S
from runtime.providers.gcp import (
    GcpCompute,
    GcpOptions,
    accelerators_for,
    build_compute,
    label_value,
)
from tests.clouds.gce_server import FakeGce

ZONE = "us-central1-a"


def _pool(purchase: str = "spot", instance_type: str = "n1-highmem-8+T4:2", zone: str | None = ZONE) -> Pool:
    return Pool(cloud="gcp", region="us-central1", zone=zone, instance_type=instance_type, gpu="T4",
                gpus_per_node=2, purchase=purchase, hourly_usd=0.5)


@pytest.fixture
def gce():
    server = FakeGce(boot_s=0.2, stop_s=0.2, operation_s=0.1).start()
    yield server
    server.stop()


@pytest.fixture
def api(gce) -> GcpCompute:
    return build_compute(GcpOptions(project=gce.project, api_endpoint=gce.url, anonymous=True))


def _request(names=("run-a-l1-n0", "run-a-l1-n1"), pool=None, run="Run_A") -> InstanceRequest:
    return InstanceRequest(pool=pool or _pool(), names=tuple(names),
                           tags={TAG_RUN: run, TAG_LAUNCH: "l1"}, user_data="#!/usr/bin/env python3\nprint('hi')\n")


def _until(check, timeout_s: float = 20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_create_sends_spot_scheduling_labels_accelerators_and_the_startup_script(gce, api):
    created = api.create(_request())
    assert [i.id for i in created] == [f"{ZONE}/run-a-l1-n0", f"{ZONE}/run-a-l1-n1"]
    body = gce.instance(created[0].id)
    assert body["scheduling"]["provisioningModel"] == "SPOT"
    assert body["scheduling"]["instanceTerminationAction"] == "DELETE"
    assert body["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert body["labels"] == {TAG_RUN: label_value("Run_A"), TAG_LAUNCH: "l1", TAG_NODE: "run-a-l1-n0"}
    assert body["machineType"].endswith(f"/zones/{ZONE}/machineTypes/n1-highmem-8")
    assert body["guestAccelerators"] == [
        {"acceleratorType": f"zones/{ZONE}/acceleratorTypes/nvidia-tesla-t4", "acceleratorCount": 2}]
    assert body["metadata"]["items"] == [{"key": "startup-script", "value": "#!/usr/bin/env python3\nprint('hi')\n"}]
    described = _until(lambda: [i for i in api.describe([c.id for c in created]) if i.state is S.RUNNING] or None)
    assert described[0].address and described[0].address.startswith("10.128.")
    assert not described[0].interruption


def test_on_demand_is_standard_and_a2_carries_its_gpus(gce, api):
    pool = _pool("on_demand", "a2-highgpu-1g", zone=None)
    api.options = GcpOptions(project=gce.project, zones=("us-central1-c",))
    (instance,) = api.create(_request(names=("od-n0",), pool=pool))
    body = gce.instance(instance.id)
    assert instance.zone == "us-central1-c"
    assert body["scheduling"]["provisioningModel"] == "STANDARD"
    assert "instanceTerminationAction" not in body["scheduling"]
    assert "guestAccelerators" not in body
    assert accelerators_for(pool) == ("a2-highgpu-1g", [])


def test_a_held_pool_with_a_reservation_name_consumes_that_reservation(gce, api):
    pool = _pool("reserved_held", "a2-highgpu-1g", zone=None)
    api.options = GcpOptions(project=gce.project, zones=("us-central1-c",))
    request = _request(names=("held-n0",), pool=pool)
    (named,) = api.create(dataclasses.replace(request, reservation_id="team-a100-block"))
    assert gce.instance(named.id)["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION", "key": "compute.googleapis.com/reservation-name",
        "values": ["team-a100-block"]}
    (plain,) = api.create(_request(names=("held-n1",), pool=pool))
    assert "reservationAffinity" not in gce.instance(plain.id)  # GCE's default: any matching reservation


def test_describe_maps_states_and_a_missing_instance_is_terminated(gce, api):
    (instance,) = api.create(_request(names=("d-n0",)))
    assert api.describe([instance.id])[0].state in (S.PENDING, S.RUNNING)
    _until(lambda: api.describe([instance.id])[0].state is S.RUNNING)
    api.delete([instance.id])
    assert api.describe([instance.id])[0].state in (S.STOPPING, S.TERMINATED)
    gone = _until(lambda: [i for i in api.describe([instance.id]) if i.state is S.TERMINATED] or None)
    assert not gone[0].interruption  # danlu deleted it: no preemption
    api.delete([instance.id])  # idempotent
    assert api.describe([f"{ZONE}/never-was"])[0].state is S.TERMINATED


def test_a_preempted_spot_vm_reads_as_an_interruption(gce, api):
    (instance,) = api.create(_request(names=("p-n0",)))
    _until(lambda: api.describe([instance.id])[0].state is S.RUNNING)
    gce.preempt(instance.id)
    first = api.describe([instance.id])[0]
    assert first.state is S.TERMINATED and first.interruption
    _until(lambda: gce.status(instance.id) is None)  # termination action DELETE: the VM goes away
    assert api.describe([instance.id])[0].interruption


def test_list_tagged_filters_by_label_in_every_zone(gce, api):
    api.create(_request(names=("t-n0", "t-n1"), run="run-x"))
    api.create(_request(names=("u-n0",), run="run-y", pool=_pool(zone="us-east1-b")))
    assert sorted(i.name for i in api.list_tagged(TAG_RUN, "run-x")) == ["t-n0", "t-n1"]
    assert [i.zone for i in api.list_tagged(TAG_RUN, "run-y")] == ["us-east1-b"]
    assert len(api.list_tagged(TAG_RUN)) == 3
    assert api.list_tagged(TAG_RUN, "run-z") == []


def test_run_ids_that_one_label_would_cut_to_the_same_text_find_only_their_own_vms(gce, api):
    # A queue's job ids are the queue's and the job's names: long, and alike up to the job's name.
    queue = "nightly-finetune-llama-3-8b-on-the-support-tickets-of-the-last-quarter"
    first, second = f"{queue}-job-1-3f2a1c", f"{queue}-job-2-3f2a1c"
    assert first[:63] == second[:63]
    api.create(_request(names=("j1-n0",), run=first))
    api.create(_request(names=("j2-n0",), run=second))
    assert [i.name for i in api.list_tagged(TAG_RUN, first)] == ["j1-n0"]
    assert [i.name for i in api.list_tagged(TAG_RUN, second)] == ["j2-n0"]
    assert all(len(v) <= 63 for i in api.list_tagged(TAG_RUN) for v in i.tags.values())


@pytest.mark.parametrize("http", [False, True], ids=["in-operation", "http-status"])
@pytest.mark.parametrize("code", ["ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
                                  "QUOTA_EXCEEDED", "RESOURCE_EXHAUSTED"])
def test_capacity_errors_raise_capacity_error_and_leave_nothing(gce, api, code, http):
    gce.fail_next_insert(code, http=http, skip=1)  # the second of two VMs fails: the first must go again
    with pytest.raises(CapacityError) as info:
        api.create(_request(names=("c-n0", "c-n1")))
    assert info.value.code == code
    assert f"{ZONE}/c-n0" in gce.ever
    _until(lambda: not gce.alive())
    assert api.list_tagged(TAG_RUN) == []


def test_capacity_in_one_zone_tries_the_next_of_the_region(gce, api):
    api.options = GcpOptions(project=gce.project, zones=("us-central1-a", "us-central1-b"))
    gce.fail_next_insert("ZONE_RESOURCE_POOL_EXHAUSTED")
    created = api.create(_request(names=("z-n0",), pool=_pool(zone=None)))
    assert [i.zone for i in created] == ["us-central1-b"]


def test_other_errors_are_compute_api_errors_not_capacity(gce, api):
    api.create(_request(names=("dup-n0",)))
    with pytest.raises(ComputeAPIError) as info:
        api.create(_request(names=("dup-n0",)))
    assert not isinstance(info.value, CapacityError)
    assert "already exists" in str(info.value)


def test_labels_and_options_are_checked():
    assert label_value("train-3f2a1c") == "train-3f2a1c"  # a valid label is kept as it is
    assert label_value("Run 2024/07.X").startswith("run-2024-07-x-")  # a changed one says from what
    assert label_value("Run 2024/07.X") != label_value("run-2024-07-x") != label_value("Run 2024/07.x")
    assert len(label_value("x" * 100)) == 63
    with pytest.raises(Exception, match="anonymous"):
        GcpOptions.parse({"anonymous": True, "api_endpoint": "https://compute.googleapis.com"})
    with pytest.raises(Exception, match="disk_size_gb"):
        GcpOptions.parse({"disk_size_gb": 1})
    with pytest.raises(Exception, match="bogus"):
        GcpOptions.parse({"bogus": 1})


def test_provider_options_and_missing_credentials_are_one_line_errors(tmp_path, monkeypatch):
    from runtime.providers.base import ProviderError
    from runtime.providers.gcp import GcpProvider

    with pytest.raises(ProviderError, match=r"\[run.options\] imagee: not an option of provider 'gcp'"):
        GcpProvider.check_options({"imagee": "x"})
    with pytest.raises(ProviderError, match="anonymous = true needs api_endpoint on 127.0.0.1"):
        GcpProvider.check_options({"anonymous": True})
    GcpProvider.check_options({"project": "p", "zones": ["us-central1-a"], "termination_action": "STOP"})
    # No credentials anywhere (and no probing of a metadata server): the fix is named, no traceback.
    for key in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    with pytest.raises(ProviderError, match="gcloud auth application-default login"):
        GcpProvider.compute(GcpOptions(project="p"))
