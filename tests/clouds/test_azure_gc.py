"""`planner gc` against the local ARM: gc has no job, so no resource group or subnet, and must still list
the subscription's tagged VMs and delete an orphan by its id."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("azure.mgmt.compute")
pytest.importorskip("azure.identity")

from planner.cli import main  # noqa: E402
from pricing.pool import Pool  # noqa: E402
from runtime.providers.azure import AzureCompute, management_client  # noqa: E402
from runtime.providers.cloud_api import TAG_LAUNCH, TAG_NODE, TAG_RUN, InstanceRequest  # noqa: E402
from tests.clouds.arm_server import ArmServer, arm_server_fixture  # noqa: E402

SUBNET = ("/subscriptions/00000000-0000-0000-0000-0000000000a2/resourceGroups/net/providers/Microsoft.Network/"
          "virtualNetworks/vnet/subnets/default")


@pytest.fixture
def arm(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[ArmServer]:
    server = arm_server_fixture(tmp_path_factory, monkeypatch)
    yield server
    server.stop()


def test_gc_lists_then_deletes_an_azure_orphan_without_any_job_options(arm: ArmServer, tmp_path: Path,
                                                                        capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    api = AzureCompute(management_client(arm.SUBSCRIPTION, poll_interval_s=0.05), resource_group="danlu-rg",
                       wait_s=30)
    pool = Pool(cloud="azure", region="eastus", zone=None, instance_type="Standard_NC4as_T4_v3", gpu="T4",
                gpus_per_node=1, purchase="spot", hourly_usd=0.2)
    (vm,) = api.create(InstanceRequest(pool=pool, names=("gone-run-l-1-n0",), user_data="#!/usr/bin/env python3\n",
                                       tags={TAG_RUN: "gone-run", TAG_LAUNCH: "l-1", TAG_NODE: "gone-run-l-1-n0"},
                                       options={"resource_group": "danlu-rg", "subnet_id": SUBNET}))
    runs = tmp_path / "runs"
    runs.mkdir()

    assert main(["gc", "--runs-dir", str(runs), "--provider", "azure"]) == 0
    out = capsys.readouterr().out
    assert "gone-run-l-1-n0" in out and "run directory gone" in out and "dry run" in out
    assert [v["name"] for v in arm.vms()] == ["gone-run-l-1-n0"], "a dry run deleted something"

    assert main(["gc", "--runs-dir", str(runs), "--provider", "azure", "--yes"]) == 0
    assert vm.id in capsys.readouterr().out
    deadline = time.monotonic() + 20  # ARM deletes in a long-running operation
    while arm.vms() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert arm.vms() == []
