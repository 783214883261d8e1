"""A cloud API that fails mid-run and then refuses to release the nodes: the run ends "failed" saying
its nodes may still be billed, `planner cancel` releases them once the API answers again, and
`planner run --resume` finishes the job from its last checkpoint, every node billed once."""

from __future__ import annotations

import email
import json
from email import policy

import pytest

from planner.cli import main
from planner.commands import run as run_command
from runtime.accounting.ledger import Ledger
from runtime.control.run_state import load_state
from runtime.providers.cloud_api import ComputeAPIError
from runtime.providers.local import LocalProvider
from runtime.training.store import CheckpointStore
from tests.run.helpers import digits_entrypoint, processes_of, write_catalog, write_job

pytestmark = [pytest.mark.ddp, pytest.mark.faults]

STEPS = 400


def test_nodes_a_failed_release_left_are_named_released_by_cancel_and_the_run_resumes(
    tmp_path, monkeypatch, capsys,
) -> None:
    run_dir = tmp_path / "run"
    job = write_job(tmp_path / "job.toml", entrypoint=digits_entrypoint(STEPS, min_step_seconds=0.02), steps=STEPS,
                    nproc=1)
    store = CheckpointStore(str(run_dir / "ckpt"))
    outage = {"on": False}
    shown = run_command._View.event

    def api_down_once_training(view, record):
        if record.get("event") == "training":
            outage["on"] = True
        return shown(view, record)

    def failing(method):
        def call(self, *args, **kwargs):
            # Down once a checkpoint has committed, so the resume has work to keep.
            if outage["on"] and store.latest_step():
                raise ComputeAPIError(f"{method.__name__}: RequestLimitExceeded after 5 tries")
            return method(self, *args, **kwargs)
        return call

    monkeypatch.setattr(run_command._View, "event", api_down_once_training)
    monkeypatch.setattr(LocalProvider, "poll", failing(LocalProvider.poll))
    monkeypatch.setattr(LocalProvider, "terminate", failing(LocalProvider.terminate))
    rc = main(["run", str(job), "--catalog", str(write_catalog(tmp_path / "catalog.csv")), "--run-dir", str(run_dir),
               "--time-scale", "30"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err and "RequestLimitExceeded" in err
    assert "were not released and may still be billed" in err and f"planner cancel {run_dir}" in err, err
    state = load_state(run_dir)
    assert state.status == "failed" and state.current is not None
    assert processes_of(str(run_dir)), "the workers should still be up: nothing released them"
    # An email of its own: nodes billed with nobody watching (the .eml is the delivery without smtp_url).
    mail = email.message_from_bytes((run_dir / "outbox" / f"nodes-left-{state.current.launch_id}.eml").read_bytes(),
                                    policy=policy.default)
    assert mail["Subject"].endswith(f"the nodes of launch {state.current.launch_id} were not released and may still "
                                    "be billed")
    text = " ".join(mail.get_body(("plain",)).get_content().split())
    assert "RequestLimitExceeded" in text and f"`planner cancel {run_dir}` releases them" in text, text
    assert main(["status", str(run_dir)]) == 0
    assert f"may still be billed: `planner cancel {run_dir}` releases them" in " ".join(capsys.readouterr().out.split())

    outage["on"] = False  # the API answers again
    monkeypatch.undo()
    assert main(["cancel", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert f"the release of launch {state.current.launch_id}'s nodes failed: releasing them now" in out, out
    assert processes_of(str(run_dir)) == []
    after = load_state(run_dir)
    assert after.status == "failed" and after.current is None  # released, and still the failure it was
    assert main(["status", str(run_dir)]) == 0
    assert "may still be billed" not in capsys.readouterr().out
    with Ledger(run_dir) as ledger:
        assert not ledger.open_intervals()
    committed = store.latest_step()
    assert committed

    assert main(["run", "--resume", str(run_dir)]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == STEPS, summary
    assert summary["launches"][-1]["start_step"] == committed
    with Ledger(run_dir) as ledger:
        intervals = sorted(ledger.intervals(), key=lambda iv: iv.start)
    assert len(intervals) == 2 and intervals[0].end <= intervals[1].start  # billed once, never twice
    assert processes_of(str(run_dir)) == []
