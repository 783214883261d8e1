"""The cause of a failed launch read out of a node's torchrun log.

The logs under ``worker_logs/`` were recorded from torch 2.13's torchrun (two processes a node,
c10d rendezvous), with this machine's paths replaced."""

from __future__ import annotations

from pathlib import Path

import pytest

from pricing.pool import Pool
from runtime.control.run_state import LaunchRecord
from runtime.control.worker_log import MAX_CHARS, failure_cause

LOGS = Path(__file__).parent / "worker_logs"
POOL = Pool("aws", "us-east-1", "use1-az1", "g4dn.xlarge", "T4", 1, "spot", 0.16)


@pytest.mark.parametrize(("log", "cause"), [
    # Rank 0's bug; rank 1's "Connection closed by peer" comes after it in the log and is its consequence.
    ("peer.log", "rank 0: RuntimeError: shape mismatch [3] vs [4]"),
    # Raised before the process group was up: no [rankN] marks, the first traceback's exception.
    ("exc.log", "ValueError: bad lr: -1"),
    # No traceback at all: the kernel killed the rank.
    ("kill.log", "rank 0 was killed by SIGKILL (the out-of-memory killer, most often)"),
    # The interpreter's own message, which names no exception class in front.
    ("nomod.log", "/opt/venv/bin/python: Error while finding module specification for 'nosuchpkg.train' "
                  "(ModuleNotFoundError: No module named 'nosuchpkg')"),
    # torchrun itself could not start the command (--no-python ./run.sh).
    ("nocmd.log", "FileNotFoundError: [Errno 2] No such file or directory: './run.sh'"),
    # sys.exit("...") and a message on stderr: no traceback, no error word, still what the worker said.
    ("exit_message.log", "its last output: config error: lr must be > 0"),
])
def test_the_telling_line_of_each_recorded_failure(log: str, cause: str) -> None:
    assert failure_cause((LOGS / log).read_text()) == cause


def test_a_rendezvous_that_timed_out_says_a_node_never_joined() -> None:
    text = ("Traceback (most recent call last):\n  File \"run.py\", line 9, in <module>\n"
            "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError: \n")
    assert failure_cause(text) == "the rendezvous timed out (a node never joined)"


def test_the_exception_of_a_chained_traceback_is_the_first_one_raised() -> None:
    text = ("Traceback (most recent call last):\n  File \"t.py\", line 3, in <module>\n"
            "KeyError: 'lr'\n\nDuring handling of the above exception, another exception occurred:\n\n"
            "Traceback (most recent call last):\n  File \"t.py\", line 5, in <module>\n"
            "ValueError: config has no lr\n")
    assert failure_cause(text) == "KeyError: 'lr'"


def test_without_a_traceback_the_error_nearest_the_exit_is_the_cause() -> None:
    text = ("no checkpoint found in /ckpt, starting from step 0\nstep 100 loss 0.31\n"
            "fatal: shard /data/train-7.tar not found\n"
            "E1207 13:21:09.811000 2638 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1)\n")
    assert failure_cause(text) == "fatal: shard /data/train-7.tar not found"


def test_a_long_line_is_clipped_and_an_empty_log_says_nothing() -> None:
    cause = failure_cause("Traceback (most recent call last):\n  File \"t.py\", line 1\nValueError: " + "x" * 999)
    assert cause is not None and len(cause) == MAX_CHARS and cause.endswith("…")
    assert failure_cause("") is None
    assert failure_cause("E1207 13:21:09.811000 2638 torch/distributed/elastic/multiprocessing/api.py:1002] "
                         "failed (exitcode: 1) local_rank: 0 (pid: 2642) of binary: /opt/venv/bin/python\n") is None


def _launch_with_logs(tmp_path: Path, logs: dict[str, str]) -> LaunchRecord:
    hosts = []
    for node, text in logs.items():
        (tmp_path / f"{node}.log").write_text(text)
        hosts.append({"id": node, "index": len(hosts), "pool": POOL.to_dict(), "provisioned_at": 0.0,
                      "handle": {"log": str(tmp_path / f"{node}.log")}})
    return LaunchRecord(launch_id="l-1", pool=POOL, nodes=max(1, len(hosts)), world_size=2, start_step=0,
                        provisioned_at=0.0, hosts=hosts, outcome="failed")


def test_of_two_nodes_the_cause_is_the_one_that_failed_first_not_the_one_that_lost_it(tmp_path: Path) -> None:
    """Rank 2 (node n1) raised; node n0's ranks then lost their connection to it, and n0 comes first."""
    lost = ("[rank0]: Traceback (most recent call last):\n[rank0]:   File \"train.py\", line 9, in <module>\n"
            "[rank0]: RuntimeError: [pair.cc:553] Connection closed by peer [10.0.0.2]:1937\n"
            "Root Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 7)\n"
            "=====\n")
    launch = _launch_with_logs(tmp_path, {"l-1-n0": lost, "l-1-n1": (LOGS / "exc.log").read_text()})
    assert launch.log_cause() == f"; l-1-n1: ValueError: bad lr: -1 (log: {tmp_path / 'l-1-n1.log'})"
    assert launch.startup_error() == "ValueError: bad lr: -1"
    # Only the lost connection to go by: that is the cause, rather than none.
    launch = _launch_with_logs(tmp_path, {"l-1-n0": lost})
    assert "l-1-n0: rank 0: RuntimeError: [pair.cc:553] Connection closed by peer" in launch.log_cause()


def test_a_log_that_says_nothing_is_still_named(tmp_path: Path) -> None:
    launch = _launch_with_logs(tmp_path, {"l-1-n0": ""})
    assert launch.log_cause() == f" (log: {tmp_path / 'l-1-n0.log'})" and launch.startup_error() is None
    assert _launch_with_logs(tmp_path, {}).log_cause() == ""  # no node was ever started
