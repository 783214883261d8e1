"""The rendezvous port a node agent reports: outside the ephemeral range, held until torchrun takes it.

CI on record: a port from ``bind(0)`` chosen at boot was taken, before node 0's c10d store bound
it, by one of the many outgoing connections to the object store; node 0 failed at once and node 1
waited out the 60 s rendezvous (a first launch lost, the run retried).
"""

from __future__ import annotations

import errno
import socket
import sys
import time
from pathlib import Path

import pytest

from runtime.providers import bundle, node_agent
from runtime.providers.node_agent import NodeAgent


def _agent(tmp_path: Path) -> NodeAgent:
    stage = tmp_path / "stage"
    stage.mkdir(parents=True, exist_ok=True)
    config = {"node": "run-l-1-n0", "boot": "b1", "stage": str(stage), "launch": "l-1", "heartbeat_s": 0.2}
    return NodeAgent(config, environ={"DANLU_NODE_ADDRESS": "127.0.0.1", "DANLU_NODE_HOME": str(tmp_path / "home")})


def _bind_error(port: int) -> int | None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            return exc.errno
    return None


def test_the_reported_port_is_never_ephemeral_and_nobody_else_binds_it_before_the_launch(tmp_path: Path) -> None:
    agents = [_agent(tmp_path / f"a{i}") for i in range(20)]
    ephemeral = node_agent._ephemeral_ports()
    ports = [a.port for a in agents]
    assert len(set(ports)) == len(ports), "two agents on one host reported the same port"
    assert not [p for p in ports if p in ephemeral]
    assert all(_bind_error(p) == errno.EADDRINUSE for p in ports)


def test_a_host_whose_ports_are_all_ephemeral_still_gets_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node_agent, "_ephemeral_ports", lambda: range(1, 65536))
    held = node_agent._reserve_port("127.0.0.1")
    try:
        assert held.getsockname()[1] > 0
    finally:
        held.close()


def test_node_zeros_store_binds_the_reported_port(tmp_path: Path) -> None:
    """The agent lets go of the port as it starts torchrun, whose c10d store (is_host) listens on it."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("import time\ntime.sleep(60)\n")
    agent = _agent(tmp_path)
    packed = bundle.make_bundle(project)
    bundle.upload(packed, agent.stage.url)
    spec = {
        "nnodes": 2, "nproc_per_node": 1, "rdzv_endpoint": f"127.0.0.1:{agent.port}", "rdzv_id": "r1",
        "rdzv_timeout_s": 30, "shutdown_timeout_s": 2, "argv": [sys.executable, "train.py"], "bundle": packed.name,
        "env": {}, "nodes": [{"name": agent.node, "boot": agent.boot, "index": 0}],
    }
    agent.stage.write_json(spec, "launches", "l-1", "spec.json")
    try:
        agent.step(0)
        assert agent.process is not None
        deadline = time.monotonic() + 60
        while True:  # connect, never bind: a probe's bind could take the port from the store
            try:
                with socket.create_connection(("127.0.0.1", agent.port), timeout=5):
                    break  # node 0's store listens on the port node 1 is told to join
            except ConnectionRefusedError:
                assert agent.process.poll() is None, agent.log_path.read_text() if agent.log_path else ""
                assert time.monotonic() < deadline, "torchrun never listened on the reported port"
                time.sleep(0.2)
    finally:
        if agent.process is not None:
            agent.process.kill()
            agent.process.wait()
