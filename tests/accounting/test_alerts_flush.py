"""`planner alerts flush RUN_DIR`: alerts left queued by a run that ended during an SMTP outage."""

from __future__ import annotations

from pathlib import Path

from planner.cli import main
from planner.job import parse_job
from runtime.accounting.alerts import AlertsConfig
from runtime.accounting.mailer import Mailer, OutboxStatus
from runtime.control.run_start import new_state
from runtime.reports.run_view import load_run
from tests.accounting.conftest import free_port
from tests.accounting.helpers import budget_stop_alert


def _run_dir(tmp_path: Path, smtp_url: str) -> Path:
    job = parse_job({
        "name": "flush-test", "workload": {"steps": 10, "throughput": {"T4": 1.0}},
        "run": {"entrypoint": ["python", "train.py"]},
        "alerts": {"email": ["team@example.com"], "smtp_url": smtp_url},
    })
    run_dir = tmp_path / "run"
    new_state(job_path=tmp_path / "job.toml", job=job, run_dir=run_dir, catalog=None, provider="local",
              time_scale=1.0, policy="danlu", chaos=[])
    return run_dir


def test_flush_delivers_what_an_outage_left_queued_once(tmp_path, smtp_servers, capsys):
    port = free_port(smtp_servers)
    url = f"smtp://127.0.0.1:{port}"
    run_dir = _run_dir(tmp_path, url)
    config = AlertsConfig.from_mapping({"email": ["team@example.com"], "smtp_url": url})
    with Mailer(config, run_dir / "outbox", background=False, timeout_s=2) as outbox:  # the run, server down
        outbox.send(budget_stop_alert(run_dir))
        assert outbox.flush(timeout_s=5) == 1

    assert main(["alerts", "flush", str(run_dir), "--timeout", "5"]) == 1  # still down: says so, exit 1
    out = capsys.readouterr().out
    assert "0 alert(s) delivered" in out and "1 still queued" in out and "last error" in out
    assert load_run(run_dir).alerts_queued == 1  # status and report show it, and only read

    _, inbox = smtp_servers.start(port=port)
    assert main(["alerts", "flush", str(run_dir)]) == 0
    assert "1 alert(s) delivered" in capsys.readouterr().out
    assert len(inbox.wait_for(1)) == 1
    assert main(["alerts", "flush", str(run_dir)]) == 0  # nothing left: nothing sent twice
    assert "0 alert(s) delivered" in capsys.readouterr().out
    assert len(inbox.received) == 1
    entries = Mailer(config, run_dir / "outbox", background=False).entries()
    assert [e.status for e in entries] == [OutboxStatus.SENT]
    assert load_run(run_dir).alerts_queued == 0


def test_flush_of_a_directory_that_is_not_a_run_is_an_input_error(tmp_path, capsys):
    assert main(["alerts", "flush", str(tmp_path)]) == 2
    assert "no run state here" in capsys.readouterr().err
