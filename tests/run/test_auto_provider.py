"""``provider = "auto"``: each pool on its cloud's provider, built lazily; nodes remember their owner.

Two recording providers stand in for the clouds (registered as ``kubernetes`` and ``aws``
through the registry, as an installed package would); the option checks use the real
``aws`` and ``kubernetes`` providers' option models.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from planner.cli import main
from planner.job import load_job
from pricing.pool import Pool
from runtime.control.clock import ManualClock
from runtime.providers import registry
from runtime.providers.auto import ROUTES, AutoProvider, options_for, targets
from runtime.providers.base import LaunchSpec, Node, NodeState, NodeStatus, Provider, ProviderContext, ProviderError
from runtime.providers.cloud_api import CapacityError
from runtime.providers.notices import INTERRUPTION, Notice
from tests.run.helpers import cluster_table, write_catalog, write_job

CALLS: list[tuple[str, str, tuple[str, ...]]] = []
BUILT: dict[str, ProviderContext] = {}
CLOSE_FAILS: set[str] = set()

CLUSTER_POOL = Pool(cloud="kubernetes", region="lab", zone="ml", instance_type="t4", gpu="T4", gpus_per_node=1,
                    purchase="cluster", hourly_usd=0.05)
AWS_POOL = Pool(cloud="aws", region="us-east-1", zone="use1-az1", instance_type="g4dn.xlarge", gpu="T4",
                gpus_per_node=1, purchase="spot", hourly_usd=0.16)


class _Recorder(Provider):
    """Records every call with the node ids it got; its nodes carry its own name in their handle."""

    remote = True

    def __init__(self, context: ProviderContext):
        BUILT[self.name] = context

    @classmethod
    def from_context(cls, context: ProviderContext) -> Provider:
        return cls(context)

    def _log(self, call: str, nodes: Sequence[Node] = ()) -> None:
        CALLS.append((self.name, call, tuple(n.id for n in nodes)))

    def provision(self, pool, *, nodes, launch_id):
        if pool.zone == "full":
            raise CapacityError(f"{self.name}: no capacity in {pool.zone}", code="Unschedulable")
        made = [Node(f"{launch_id}-n{i}", i, pool, 0.0, {"instance": f"{self.name}-{launch_id}-{i}"})
                for i in range(nodes)]
        self._log("provision", made)
        return made

    def wait_ready(self, nodes, *, timeout_s):
        self._log("wait_ready", nodes)

    def run(self, nodes, launch):
        self._log("run", nodes)
        return [Node(n.id, n.index, n.pool, n.provisioned_at, {**n.handle, "launch": launch.launch_id}) for n in nodes]

    def poll(self, nodes):
        self._log("poll", nodes)
        return [NodeStatus(n.id, NodeState.RUNNING, detail=self.name) for n in nodes]

    def interruption_notice(self, node):
        self._log("notice", [node])
        return Notice(self.name, INTERRUPTION, "terminate", None, "") if self.name == "kubernetes" else None

    def acknowledge(self, node, notice):
        self._log("acknowledge", [node])

    def terminate(self, nodes, *, grace_s):
        self._log("terminate", nodes)

    def release_stale(self, nodes):
        self._log("release_stale", nodes)
        return [n.id for n in nodes]

    def close(self):
        self._log("close")
        if self.name in CLOSE_FAILS:
            raise ProviderError(f"{self.name}: close failed")


class FakeKube(_Recorder):
    name = "kubernetes"


class FakeAws(_Recorder):
    name = "aws"


@pytest.fixture
def recorders(monkeypatch: pytest.MonkeyPatch) -> None:
    CALLS.clear()
    BUILT.clear()
    CLOSE_FAILS.clear()
    monkeypatch.setattr(registry, "_targets", lambda: {
        "local": "runtime.providers.local:LocalProvider", "auto": "runtime.providers.auto:AutoProvider",
        "kubernetes": f"{__name__}:FakeKube", "aws": f"{__name__}:FakeAws",
    })


def _auto(tmp_path: Path, options=None) -> AutoProvider:
    context = ProviderContext(tmp_path / "run" / "provider", ManualClock(), run_id="run",
                              options=options or {"heartbeat_s": 1.0, "aws": {"image_id": "ami-12345678"},
                                                  "kubernetes": {"image": "img", "heartbeat_s": 0.5}})
    return registry.create("auto", context)  # type: ignore[return-value]


def _launch(tmp_path: Path, launch_id: str) -> LaunchSpec:
    return LaunchSpec(launch_id, ("python", "t.py"), 1, "r", {}, str(tmp_path), tmp_path / launch_id)


def test_each_pool_goes_to_its_clouds_provider_built_on_first_use_with_its_own_state_and_options(
        tmp_path: Path, recorders) -> None:
    auto = _auto(tmp_path)
    assert BUILT == {}  # nothing is built before a pool needs it
    pods = auto.provision(CLUSTER_POOL, nodes=2, launch_id="l-1")
    assert list(BUILT) == ["kubernetes"]
    context = BUILT["kubernetes"]
    assert context.state_dir == tmp_path / "run" / "provider" / "kubernetes"
    assert context.run_root == tmp_path / "run" and context.run_id == "run"
    assert dict(context.options) == {"heartbeat_s": 0.5, "image": "img"}  # its table wins over the shared key
    assert [n.handle["provider"] for n in pods] == ["kubernetes", "kubernetes"]
    auto.wait_ready(pods, timeout_s=1)
    pods = auto.run(pods, _launch(tmp_path, "l-1"))
    assert all(n.handle["provider"] == "kubernetes" and n.handle["launch"] == "l-1" for n in pods)
    assert auto.interruption_notice(pods[1]) is not None

    vms = auto.provision(AWS_POOL, nodes=1, launch_id="l-2")
    assert dict(BUILT["aws"].options) == {"heartbeat_s": 1.0, "image_id": "ami-12345678"}
    assert vms[0].handle["provider"] == "aws"
    # Nodes of both, in any order: each goes to its owner and the answers come back in order.
    mixed = [vms[0], pods[0], pods[1]]
    assert [s.detail for s in auto.poll(mixed)] == ["aws", "kubernetes", "kubernetes"]
    assert [s.node_id for s in auto.poll(mixed)] == ["l-2-n0", "l-1-n0", "l-1-n1"]
    auto.terminate(mixed, grace_s=1)
    assert ("aws", "terminate", ("l-2-n0",)) in CALLS and ("kubernetes", "terminate", ("l-1-n0", "l-1-n1")) in CALLS
    with pytest.raises(ProviderError, match="a launch runs on one pool"):
        auto.run(mixed, _launch(tmp_path, "l-3"))
    assert json.loads((tmp_path / "run" / "provider" / ROUTES).read_text()) == ["aws", "kubernetes"]


def test_a_resumed_controller_releases_each_node_by_its_owner_and_sweeps_every_provider_the_run_used(
        tmp_path: Path, recorders) -> None:
    first = _auto(tmp_path)
    first.provision(CLUSTER_POOL, nodes=1, launch_id="l-1")
    vms = first.provision(AWS_POOL, nodes=2, launch_id="l-2")
    recorded = [Node.from_dict(n.to_dict()) for n in vms]  # what state.json holds for the current launch
    CALLS.clear()
    BUILT.clear()

    resumed = _auto(tmp_path)  # a new controller process: nothing built yet
    assert resumed.release_stale(recorded) == ["l-2-n0", "l-2-n1"]
    # AWS releases the recorded instances; the cluster, used earlier in the run, sweeps the run's tag.
    assert sorted(c for c in CALLS if c[1] == "release_stale") == [
        ("aws", "release_stale", ("l-2-n0", "l-2-n1")), ("kubernetes", "release_stale", ())]


def test_a_capacity_error_of_either_side_reaches_the_controller_as_it_was(tmp_path: Path, recorders) -> None:
    """The controller blocks the pool and re-plans on a ProviderError: the router must not wrap or swallow it."""
    auto = _auto(tmp_path)
    for pool in (CLUSTER_POOL, AWS_POOL):
        full = Pool(**{**pool.to_dict(), "zone": "full"})
        with pytest.raises(CapacityError, match=f"{pool.cloud}: no capacity in full") as caught:
            auto.provision(full, nodes=1, launch_id="l-1")
        assert caught.value.code == "Unschedulable"


def test_a_node_without_an_owner_in_its_handle_goes_to_its_pools_cloud(tmp_path: Path, recorders) -> None:
    auto = _auto(tmp_path)
    bare = Node("l-9-n0", 0, AWS_POOL, 0.0, {"instance": "i-1"})  # recorded before the handle said whose
    auto.terminate([bare], grace_s=0)
    assert CALLS == [("aws", "terminate", ("l-9-n0",))]


def test_close_asks_every_provider_built_and_raises_the_first_error_after(tmp_path: Path, recorders) -> None:
    auto = _auto(tmp_path)
    auto.provision(CLUSTER_POOL, nodes=1, launch_id="l-1")
    auto.provision(AWS_POOL, nodes=1, launch_id="l-2")
    CLOSE_FAILS.add("kubernetes")
    with pytest.raises(ProviderError, match="kubernetes: close failed"):
        auto.close()
    assert {c[0] for c in CALLS if c[1] == "close"} == {"kubernetes", "aws"}


def test_a_pool_of_a_cloud_without_a_remote_provider_is_refused_by_name(tmp_path: Path, recorders) -> None:
    auto = _auto(tmp_path)
    lam = Pool(cloud="lambda", region="us-west-1", zone=None, instance_type="gpu_1x_a10", gpu="A10",
               gpus_per_node=1, purchase="on_demand", hourly_usd=0.75)
    with pytest.raises(ProviderError, match="pools on 'lambda': provider 'lambda' is not registered"):
        auto.provision(lam, nodes=1, launch_id="l-1")
    local = Pool(cloud="local", region="x", zone=None, instance_type="y", gpu="T4", gpus_per_node=1,
                 purchase="on_demand", hourly_usd=0.1)
    with pytest.raises(ProviderError, match="cannot run a pool for provider \"auto\""):
        auto.provision(local, nodes=1, launch_id="l-1")


# -- options ------------------------------------------------------------------------------

def _job(tmp_path: Path, options: str, *, provider: str = "auto", clouds: str = '["aws"]') -> Path:
    path = write_job(tmp_path / "job.toml", entrypoint=["python", "train.py"], nproc=1,
                     extra=f'checkpoint_dir = "s3://bucket/ckpt"\n{options}\n{cluster_table()}')
    text = path.read_text().replace('provider = "local"', f'provider = "{provider}"')
    path.write_text(text.replace("max_nodes = 1", f"max_nodes = 1\nclouds = {clouds}"))
    return path


GOOD = """
[run.options]
heartbeat_s = 1.0
[run.options.aws]
image_id = "ami-12345678"
[run.options.kubernetes]
image = "python:3.11-slim"
rendezvous = "pod-ip"
"""


def test_the_job_names_the_providers_it_may_use_and_each_gets_the_shared_keys_and_its_table(tmp_path: Path) -> None:
    job = load_job(_job(tmp_path, GOOD))
    assert targets(job) == ["kubernetes", "aws"]
    AutoProvider.check_job(job)  # the real aws and kubernetes option models take these
    assert options_for(job.run.options, "kubernetes") == {"heartbeat_s": 1.0, "image": "python:3.11-slim",
                                                          "rendezvous": "pod-ip"}
    assert options_for(job.run.options, "gcp") == {"heartbeat_s": 1.0}


@pytest.mark.parametrize(("options", "message"), [
    ('[run.options]\nimage = "python:3.11-slim"',
     r"\[run.options\] image: provider 'aws' does not take it, and the keys of \[run.options\] go to every provider "
     r"the run uses \(kubernetes, aws\). To fix: move it into \[run.options.kubernetes\]"),
    ('[run.options]\nheartbeat_s = 100.0', r"\[run.options\] heartbeat_s: Input should be less than or equal to 60"),
    ('[run.options.kubernetes]\nimage_id = "ami-12345678"',
     r"\[run.options.kubernetes\] image_id: not an option of provider 'kubernetes'"),
    ('[run.options.aws]\nvolume_gb = 2', r"\[run.options.aws\] volume_gb: Input should be greater than or equal to 8"),
    ('[run.options.nimbus]\nzone = "a"', r"\[run.options.nimbus\]: provider 'nimbus' is not registered"),
])
def test_a_bad_option_is_exit_2_naming_the_key_the_provider_and_the_fix(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], options: str, message: str) -> None:
    job = _job(tmp_path, options)
    catalog = write_catalog(tmp_path / "catalog.csv")
    run_dir = tmp_path / "run"
    assert main(["run", str(job), "--catalog", str(catalog), "--run-dir", str(run_dir)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert str(job) in err and "To fix" in err
    assert re.search(message, err), err
    assert not run_dir.exists()


def test_a_cloud_the_job_names_without_a_provider_is_refused_before_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(tmp_path, "", clouds='["aws", "lambda"]')
    assert main(["run", str(job), "--run-dir", str(tmp_path / "run")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "[constraints] clouds: 'lambda'" in err and "not registered" in err


def test_tables_per_provider_go_with_auto_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(tmp_path, GOOD, provider="kubernetes")
    assert main(["run", str(job), "--run-dir", str(tmp_path / "run")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "[run.options.aws]: a table of options per provider goes with provider = \"auto\"" in err
    assert "To fix: move the keys of [run.options.aws] up into [run.options], or set [run] provider = \"auto\"" in err


def test_auto_needs_an_object_store_checkpoint_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _job(tmp_path, GOOD)
    path.write_text(path.read_text().replace('checkpoint_dir = "s3://bucket/ckpt"', 'checkpoint_dir = "ckpt"'))
    assert main(["run", str(path), "--run-dir", str(tmp_path / "run")]) == 2
    assert "must be an object-store URL for provider 'auto'" in " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("provider", ["auto", "aws", "gcp"])
def test_a_cloud_run_whose_plans_may_buy_a_reservation_term_is_refused_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], provider: str) -> None:
    """A cloud provider launches instances: a plan's new 1-year term would run on demand, billed by
    the hour, while the ledger charged the whole term."""
    options = GOOD if provider == "auto" else ""
    path = _job(tmp_path, options, provider=provider, clouds=f'["{"aws" if provider == "auto" else provider}"]')
    path.write_text(path.read_text().replace('allow = ["spot", "on_demand"]',
                                             'allow = ["spot", "on_demand", "reserved_1y"]'))
    assert main(["run", str(path), "--run-dir", str(tmp_path / "run")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"[purchase] allow: reserved_1y: provider '{provider}' launches instances and does not buy reservation " \
           "terms" in err
    assert "To fix: remove 'reserved_1y' from allow" in err and "[[purchase.held]]" in err
    assert not (tmp_path / "run").exists()
    # The same job without the term passes that check (the local provider simulates a term's purchase).
    path.write_text(path.read_text().replace(', "reserved_1y"', ""))
    try:
        registry.load(provider).check_job(load_job(path))
    except ProviderError as exc:  # gcp wants its project; nothing about terms
        assert "allow" not in str(exc)


def test_the_shipped_example_of_a_mixed_plan_passes_the_checks() -> None:
    job = load_job(Path(__file__).resolve().parents[2] / "examples" / "cluster-burst.toml")
    assert job.run.provider == "auto" and targets(job) == ["kubernetes", "aws"]
    AutoProvider.check_job(job)


def test_a_job_naming_no_clouds_checks_the_shared_keys_with_every_cloud_provider_installed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(tmp_path, '[run.options]\nimage_id = "ami-12345678"', clouds="[]")
    assert main(["run", str(job), "--run-dir", str(tmp_path / "run")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "[run.options] image_id: provider" in err and "'kubernetes'" in err and "[run.options.aws]" in err
    assert "[constraints] clouds names none, so the run may use every cloud provider installed" in err


@pytest.mark.parametrize(("options", "message"), [
    ('[run.options.aws.deeper]\nzone = "a"', "[run.options.aws] deeper is a table: an option is a string, a number"),
    ("[run.options]\nheartbeat_s = [1]", "[run.options] heartbeat_s is [1]: an option is a string, a number"),
])
def test_an_option_that_is_no_option_value_is_one_line_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], options: str, message: str) -> None:
    assert main(["run", str(_job(tmp_path, options)), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert message in " ".join(err.split()) and len(err.strip().splitlines()) == 2, err
