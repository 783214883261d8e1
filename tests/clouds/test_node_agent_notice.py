"""A node agent that sees an interruption notice asks its own workers to stop at once.

The controller's stop request comes a heartbeat up and a stage round trip down after the
notice (about 7 s with the tests' 0.5 s heartbeats, two 5 s heartbeats by default), out of a
lead time of 30 s on GCP; the agent's own request reaches the workers in the time of a write.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.providers.node_agent import NodeAgent
from runtime.providers.notices import INTERRUPTION, REBALANCE, Notice
from runtime.training.contract import CONTROL_FILE, read_request


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[NodeAgent]:
    stage = tmp_path / "stage"
    stage.mkdir()
    node = NodeAgent({"node": "run-l-1-n0", "boot": "b1", "stage": str(stage), "launch": "l-1", "heartbeat_s": 0.2,
                      "cloud": "gcp"},
                     environ={"DANLU_NODE_ADDRESS": "127.0.0.1", "DANLU_NODE_HOME": str(tmp_path / "home")})
    yield node
    if node.process is not None:
        node.process.kill()
        node.process.wait()


def _training(agent: NodeAgent, run_dir: Path) -> None:
    """The agent as _start leaves it: a launch's workers running in ``run_dir``."""
    run_dir.mkdir()
    agent.run_dir, agent.launch = run_dir, "l-1"
    agent.process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _notice(kind: str) -> Notice:
    return Notice(cloud="gcp", kind=kind, action="terminate", deadline=None, detail="instance/preempted TRUE")


def test_an_interruption_notice_asks_the_workers_to_stop_once(agent: NodeAgent, tmp_path: Path) -> None:
    _training(agent, tmp_path / "run")
    agent._noticed(_notice(REBALANCE))
    assert read_request(tmp_path / "run" / CONTROL_FILE) is None  # a rebalance is the controller's to weigh

    agent._noticed(_notice(INTERRUPTION))
    request = read_request(tmp_path / "run" / CONTROL_FILE)
    assert request is not None and request.action == "stop"
    assert "gcp interruption notice on run-l-1-n0" in request.reason
    assert agent.notice.kind == INTERRUPTION  # still reported to the controller in the heartbeat

    agent._noticed(_notice(INTERRUPTION))  # the watcher reports a notice once, but a second must not re-ask
    assert read_request(tmp_path / "run" / CONTROL_FILE).id == request.id


def test_no_request_without_running_workers(agent: NodeAgent, tmp_path: Path) -> None:
    agent._noticed(_notice(INTERRUPTION))  # still booting: the controller will not launch on it
    assert agent.notice is not None and not list(tmp_path.rglob(CONTROL_FILE))
    _training(agent, tmp_path / "run")
    agent.process.kill()
    agent.process.wait()
    agent._noticed(_notice(INTERRUPTION))  # the workers are gone: nobody to ask
    assert read_request(tmp_path / "run" / CONTROL_FILE) is None
