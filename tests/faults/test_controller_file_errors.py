"""A run directory that refuses writes mid-run: the nodes are released and the error is one clear line."""

from __future__ import annotations

import json

import pytest

from planner.cli import main
from planner.commands import run as run_command
from runtime.accounting.ledger import Ledger
from tests.run.helpers import digits_entrypoint, processes_of, write_catalog, write_job

pytestmark = [pytest.mark.ddp, pytest.mark.faults]


def test_state_that_cannot_be_written_mid_run_releases_the_nodes_without_a_traceback(tmp_path, monkeypatch,
                                                                                    capsys) -> None:
    run_dir = tmp_path / "run"
    job = write_job(tmp_path / "job.toml", entrypoint=digits_entrypoint(400), steps=400, nproc=1)
    shown = run_command._View.event

    def break_the_run_dir(view, record):
        # state.json turned into a directory: every later atomic replace of it fails
        # (EISDIR), as on a read-only or full disk, and root cannot chmod its way out.
        if record.get("event") == "training" and (run_dir / "state.json").is_file():
            (run_dir / "state.json").unlink()
            (run_dir / "state.json").mkdir()
        return shown(view, record)

    monkeypatch.setattr(run_command._View, "event", break_the_run_dir)
    rc = main(["run", str(job), "--catalog", str(write_catalog(tmp_path / "catalog.csv")), "--run-dir", str(run_dir)])
    err = capsys.readouterr().err

    assert rc == 2
    assert "Traceback" not in err and "state.json: cannot be written" in err and "--resume" in err
    assert processes_of(str(run_dir)) == []
    with Ledger(run_dir) as ledger:
        assert not ledger.open_intervals(), "a node is still billed after the controller gave up"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and "cannot be written" in summary["cause"]
