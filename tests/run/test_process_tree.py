"""A node's processes are killed to the last one, also those forked after the walk that found the rest."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import psutil

from runtime.providers import process_tree

# A node's agent that starts workers: three children that would train on with nobody watching.
AGENT = """
import subprocess, sys, time
children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]) for _ in range(3)]
print("started", flush=True)
time.sleep(120)
"""


def _start_agent() -> tuple[str, subprocess.Popen]:
    """The agent, once it has started its three children; and the token they all carry."""
    token = f"test-{uuid.uuid4().hex}"
    agent = subprocess.Popen([sys.executable, "-c", AGENT], env={**os.environ, process_tree.TOKEN_ENV: token},
                             stdout=subprocess.PIPE, start_new_session=True)
    assert agent.stdout is not None and agent.stdout.readline() == b"started\n"
    return token, agent


def test_a_process_forked_after_the_walk_is_found_and_killed_by_the_next_one() -> None:
    token, agent = _start_agent()
    try:
        deadline = time.monotonic() + 30
        while len(process_tree.tagged(token)) < 4:
            assert time.monotonic() < deadline, "the agent's children did not start"
            time.sleep(0.05)
        # The first walk saw the agent alone, as one taken just before it forked its workers.
        walks = iter([[psutil.Process(agent.pid)]])
        assert process_tree.kill_found(lambda: next(walks, None) or process_tree.tagged(token)) == []
        assert process_tree.tagged(token) == []
    finally:
        for process in process_tree.tagged(token):
            process.kill()
        agent.kill()
        agent.wait(10)


def test_one_kill_of_a_walk_leaves_what_was_forked_after_it() -> None:
    # What kill_found is for: kill_all of a stale walk leaves the workers running, reparented.
    token, agent = _start_agent()
    try:
        assert process_tree.kill_all([psutil.Process(agent.pid)]) == []
        agent.wait(10)
        assert len(process_tree.tagged(token)) == 3
    finally:
        process_tree.kill_found(lambda: process_tree.tagged(token))
        agent.wait(10)
