"""The local provider with real torchrun agents (a torch-free worker keeps them fast)."""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from pricing.pool import Pool
from runtime.providers.base import LaunchSpec, Node, NodeState
from runtime.providers.local import LocalProvider, is_running, torchrun_argv
from runtime.providers.notices import INTERRUPTION

pytestmark = pytest.mark.ddp

SLEEPER = Path(__file__).parent / "workers" / "sleeper.py"


def _pool(cloud: str = "aws") -> Pool:
    return Pool(cloud, "us-east-1", "use1-az1", "g4dn.xlarge", "T4", 1, "spot", 0.2)


def _launch(tmp_path: Path, launch_id: str = "l-1", *, rdzv_timeout_s: float = 30.0, env: dict | None = None
            ) -> LaunchSpec:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return LaunchSpec(
        launch_id=launch_id, entrypoint=(sys.executable, str(SLEEPER)), nproc_per_node=1,
        rdzv_id=uuid.uuid4().hex, env={"DANLU_RUN_DIR": str(work), **(env or {})}, cwd=str(tmp_path),
        log_dir=tmp_path / launch_id, rdzv_timeout_s=rdzv_timeout_s, shutdown_timeout_s=2,
    )


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[LocalProvider]:
    local = LocalProvider(tmp_path / "provider", time_scale=60)
    try:
        yield local
    finally:
        local.close()


def _wait_state(provider: LocalProvider, nodes: list[Node], state: NodeState, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(s.state is state for s in provider.poll(nodes)):
            return
        time.sleep(0.05)
    raise AssertionError(f"nodes never reached {state}: {provider.poll(nodes)}")


def _ranks(work: Path, count: int, timeout: float = 60) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(work.glob("rank-*.json"))
        if len(found) == count:
            time.sleep(0.05)
            return [json.loads(p.read_text()) for p in found]
        time.sleep(0.05)
    raise AssertionError(f"only {len(list(work.glob('rank-*.json')))} of {count} ranks started")


def test_argv_runs_python_scripts_under_torchrun_and_other_programs_with_no_python(tmp_path: Path) -> None:
    launch = _launch(tmp_path)
    argv = torchrun_argv(launch, 2, "/x/rdzv")
    assert argv[-1] == str(SLEEPER) and "--no-python" not in argv
    assert "--rdzv-backend=c10d" in argv and f"--rdzv-id={launch.rdzv_id}" in argv and "--nnodes=2" in argv
    shell = torchrun_argv(replace(launch, entrypoint=("./train.sh", "--fast")), 1, "/x/rdzv")
    assert shell[-3:] == ["--no-python", "./train.sh", "--fast"]


def test_two_nodes_rendezvous_into_one_world_and_exit(tmp_path: Path, provider: LocalProvider, monkeypatch) -> None:
    # The controller's SMTP login is its own: no torchrun agent or worker inherits it.
    monkeypatch.setenv("DANLU_SMTP_USER", "alerts-bot")
    monkeypatch.setenv("DANLU_SMTP_PASSWORD", "s3cret-value")
    nodes = provider.provision(_pool(), nodes=2, launch_id="l-1")
    provider.wait_ready(nodes, timeout_s=5)
    launch = _launch(tmp_path)
    nodes = provider.run(nodes, launch)
    ranks = _ranks(tmp_path / "work", 2)
    assert sorted(r["RANK"] for r in ranks) == ["0", "1"]
    assert {r["WORLD_SIZE"] for r in ranks} == {"2"}
    assert {r["OMP_NUM_THREADS"] for r in ranks} == {"1"}
    assert {r["DANLU_NODE_ID"] for r in ranks} == {"l-1-n0", "l-1-n1"}
    assert {(r["DANLU_SMTP_USER"], r["DANLU_SMTP_PASSWORD"]) for r in ranks} == {(None, None)}
    assert {s.state for s in provider.poll(nodes)} == {NodeState.RUNNING}
    (tmp_path / "work" / "release").write_text("")
    _wait_state(provider, nodes, NodeState.EXITED)
    assert [s.returncode for s in provider.poll(nodes)] == [0, 0]
    pids = {pid for node in nodes for pid in provider.pids(node)}
    provider.terminate(nodes, grace_s=1)
    assert {s.state for s in provider.poll(nodes)} == {NodeState.TERMINATED}
    assert not any(is_running(p) for p in pids)


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_preemption_is_announced_then_the_node_is_killed_without_orphans(
    tmp_path: Path, provider: LocalProvider, cloud: str
) -> None:
    nodes = provider.run(provider.provision(_pool(cloud), nodes=1, launch_id="l-1"), _launch(tmp_path))
    worker_pid = _ranks(tmp_path / "work", 1)[0]["pid"]
    reclaim_at = provider.preempt(nodes[0], lead_s=1.5)
    deadline = time.monotonic() + 10
    # AWS raises its rebalance recommendation with the notice: a poll between the watcher's two
    # requests sees the rebalance first, as on EC2, and the interruption on the next one.
    while (getattr(provider.interruption_notice(nodes[0]), "kind", None) != INTERRUPTION
           and time.monotonic() < deadline):
        time.sleep(0.02)
    notice = provider.interruption_notice(nodes[0])
    assert notice is not None and notice.cloud == cloud and notice.kind == INTERRUPTION
    assert time.time() < reclaim_at  # the notice came ahead of the reclaim
    assert provider.poll(nodes)[0].state is NodeState.RUNNING
    _wait_state(provider, nodes, NodeState.RECLAIMED, timeout=10)
    assert not is_running(worker_pid)
    provider.terminate(nodes, grace_s=0)


def test_acknowledged_azure_event_evicts_at_once(tmp_path: Path, provider: LocalProvider) -> None:
    nodes = provider.run(provider.provision(_pool("azure"), nodes=1, launch_id="l-1"), _launch(tmp_path))
    _ranks(tmp_path / "work", 1)
    provider.preempt(nodes[0], lead_s=60)
    deadline = time.monotonic() + 10
    while provider.interruption_notice(nodes[0]) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    notice = provider.interruption_notice(nodes[0])
    assert notice is not None and notice.event_id
    provider.acknowledge(nodes[0], notice)
    _wait_state(provider, nodes, NodeState.RECLAIMED, timeout=5)
    provider.terminate(nodes, grace_s=0)


def test_a_node_that_never_joins_makes_the_rendezvous_time_out(tmp_path: Path) -> None:
    provider = LocalProvider(tmp_path / "provider", hold_nodes={1})
    try:
        provisioned = provider.provision(_pool(), nodes=2, launch_id="l-1")
        nodes = provider.run(provisioned, _launch(tmp_path, rdzv_timeout_s=2))
        assert [s.state for s in provider.poll(nodes)] == [NodeState.RUNNING, NodeState.READY]
        deadline = time.monotonic() + 30
        while provider.poll(nodes)[0].state is NodeState.RUNNING and time.monotonic() < deadline:
            time.sleep(0.1)
        status = provider.poll(nodes)[0]
        assert status.state is NodeState.EXITED and status.returncode != 0
        assert "RendezvousTimeoutError" in Path(nodes[0].handle["log"]).read_text()
    finally:
        provider.close()


def test_nodes_of_a_dead_controller_are_reaped_from_their_pid_files(tmp_path: Path) -> None:
    first = LocalProvider(tmp_path / "provider")
    nodes = first.run(first.provision(_pool(), nodes=2, launch_id="l-1"), _launch(tmp_path))
    _ranks(tmp_path / "work", 2)
    pids = {pid for node in nodes for pid in first.pids(node)}
    assert len(pids) >= 4  # two agents and two workers
    # The controller dies: nobody calls terminate(); a new controller finds the records.
    records = [Node.from_dict(json.loads(json.dumps(n.to_dict()))) for n in nodes]
    second = LocalProvider(tmp_path / "provider")
    assert sorted(second.release_stale(records)) == ["l-1-n0", "l-1-n1"]
    assert not any(is_running(p) for p in pids)
    assert second.release_stale(records) == []
    for node in nodes:  # the first provider's servers and threads
        first._nodes[node.id].server.stop()
        first._nodes[node.id].watch.stop()
        first._nodes[node.id].process.wait(5)
