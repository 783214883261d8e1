"""No file a run writes holds a credential, and its files are private even with umask 000."""

from __future__ import annotations

import os
import stat

import pytest

from planner.cli import main
from tests.accounting.conftest import PASSWORD, USER, SmtpServers
from tests.run.helpers import digits_entrypoint, write_catalog, write_job

pytestmark = [pytest.mark.ddp, pytest.mark.faults]


@pytest.fixture
def smtp_servers():
    servers = SmtpServers()
    yield servers
    for controller in list(servers.started):
        controller.stop()


def test_a_run_with_an_smtp_login_writes_it_nowhere_and_keeps_its_files_private(tmp_path, monkeypatch,
                                                                                 smtp_servers) -> None:
    controller, inbox = smtp_servers.start(auth=True)
    monkeypatch.setenv("DANLU_SMTP_USER", USER)
    monkeypatch.setenv("DANLU_SMTP_PASSWORD", PASSWORD)
    alerts = f"""
[alerts]
email = ["team@example.com"]
smtp_url = "smtp://127.0.0.1:{controller.port}"
thresholds = [0.000001]
"""
    job = write_job(tmp_path / "job.toml", entrypoint=digits_entrypoint(200), steps=200, nproc=1)
    job.write_text(job.read_text() + alerts)
    run_dir = tmp_path / "run"
    old = os.umask(0)
    try:
        rc = main(["run", str(job), "--catalog", str(write_catalog(tmp_path / "catalog.csv")),
                   "--run-dir", str(run_dir)])
    finally:
        os.umask(old)
    assert rc == 0
    assert inbox.wait_for(2), "the alerts (threshold, run end) should have gone out with the login"

    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert len(files) > 10  # state, summary, ledger, events, node logs, checkpoints, ...
    for path in files:
        data = path.read_bytes()
        assert PASSWORD.encode() not in data, f"{path} holds the SMTP password"
        assert USER.encode() not in data, f"{path} holds the SMTP user"
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    for name in ("state.json", "summary.json", "ledger.sqlite"):
        assert stat.S_IMODE((run_dir / name).stat().st_mode) == 0o600, name
    for path in run_dir.rglob("*"):
        assert not path.stat().st_mode & stat.S_IWOTH, f"{path} is writable by anyone"
