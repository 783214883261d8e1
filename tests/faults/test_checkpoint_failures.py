"""The first checkpoint save that fails stops the launch with its error, and the run is not retried."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from planner.cli import main
from runtime.control.events import read_events
from tests.run.helpers import DIGITS, processes_of, write_catalog, write_job

pytestmark = [pytest.mark.ddp, pytest.mark.faults]

# A file-size limit makes every checkpoint shard fail with EFBIG ("File too large"), as a
# full disk would, while the small status and log files still fit. Python ignores SIGXFSZ,
# so the write fails with an OSError instead of killing the worker. Works as root, too.
LIMITED = """
import resource, runpy, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))
sys.argv = [{digits!r}, *sys.argv[1:]]
runpy.run_path({digits!r}, run_name="__main__")
"""


def test_a_full_store_stops_the_launch_at_the_first_failed_save(tmp_path: Path) -> None:
    script = tmp_path / "limited.py"
    script.write_text(LIMITED.format(digits=str(DIGITS)))
    steps = 3000
    job = write_job(tmp_path / "job.toml", entrypoint=[sys.executable, str(script), "--steps", str(steps)],
                    steps=steps, nproc=1, max_restarts=3, deadline_hours=24, budget_usd=50)
    run_dir = tmp_path / "run"
    rc = main(["run", str(job), "--catalog", str(write_catalog(tmp_path / "catalog.csv")), "--run-dir", str(run_dir)])

    assert rc != 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert "checkpoint save failed" in summary["cause"] and "File too large" in summary["cause"]
    events = read_events(run_dir / "events.jsonl")
    assert [e["event"] for e in events].count("launch") == 1, "a failure the storage will repeat is not retried"
    status = json.loads((run_dir / "work" / "status.json").read_text())
    assert status["state"] == "failed"
    assert status["step"] < steps // 10, "training went on long after the first failed save"
    assert processes_of(str(run_dir)) == []


def test_only_a_store_that_refuses_writes_counts_as_a_storage_failure() -> None:
    import errno

    from torch.distributed.checkpoint.api import CheckpointException

    from runtime.training.checkpoint import is_storage_error

    full = OSError(errno.ENOSPC, "No space left on device")
    assert is_storage_error(full)
    assert is_storage_error(CheckpointException("save failed", {1: (full, None)}))
    wrapped = RuntimeError("upload failed")
    wrapped.__cause__ = PermissionError(errno.EACCES, "read-only")
    assert is_storage_error(wrapped)
    # A peer that went away mid-save (a reclaimed node) is a preemption's side effect, not the store's.
    gloo = RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:26760")
    assert not is_storage_error(CheckpointException("save failed", {0: (gloo, None)}))
    assert not is_storage_error(ConnectionResetError(errno.ECONNRESET, "reset by peer"))
    assert not is_storage_error(TimeoutError("collective timed out"))
