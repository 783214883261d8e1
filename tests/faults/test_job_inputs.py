"""Job files that used to crash, hang or slip through: each is refused with exit 2 and the key."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from planner.cli import main
from planner.errors import JobSpecError
from planner.job import load_job, parse_job

pytestmark = pytest.mark.faults

VALID = 'name = "ok"\n[workload]\nsteps = 100\n[workload.throughput]\nT4 = 1.0\n'


def _quote(tmp_path: Path, text: str, capsys) -> tuple[int, str]:
    job = tmp_path / "job.toml"
    job.write_text(text)
    rc = main(["quote", str(job)])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("name", ["../../x", "a/b", "\x1b[31mred", "x" * 101, "", ".hidden"])
def test_a_name_must_be_a_slug(tmp_path, capsys, name) -> None:
    rc, err = _quote(tmp_path, VALID.replace('"ok"', repr(name).replace("'", '"').replace("\\x1b", "\\u001b")),
                     capsys)
    assert rc == 2 and "name" in err
    assert "\x1b" not in err  # an escape sequence in the file never reaches the terminal raw


@pytest.mark.parametrize("key, value", [
    ("workload.steps", "inf"), ("workload.steps", "nan"), ("workload.steps", "1e300"), ("workload.steps", "2.5"),
    ("workload.steps", "1e-300"), ("workload.checkpoint_gb", "inf"), ("constraints.deadline_hours", "inf"),
    ("constraints.budget_usd", "1e308"), ("overheads.checkpoint_write_gbps", "1e-300"),
    ("workload.scaling.efficiency_per_doubling", "1e-300"), ("constraints.max_nodes", "1.5"),
])
def test_numbers_out_of_any_sane_range_are_refused_with_their_key(tmp_path, capsys, key, value) -> None:
    section, _, leaf = key.rpartition(".")
    if section.startswith("workload"):
        steps = "" if leaf == "steps" else "steps = 100"
        extra = f"[{section}]\n{leaf} = {value}\n" if section != "workload" else ""
        inline = f"{leaf} = {value}" if section == "workload" else ""
        text = f'name = "ok"\n[workload]\n{steps}\n{inline}\n[workload.throughput]\nT4 = 1.0\n{extra}'
    else:
        text = VALID + f"[{section}]\n{leaf} = {value}\n"
    rc, err = _quote(tmp_path, text, capsys)
    assert rc == 2, err
    assert key in err


def test_a_fifo_is_refused_at_once_instead_of_blocking(tmp_path) -> None:
    fifo = tmp_path / "job.toml"
    os.mkfifo(fifo)
    done = []
    worker = threading.Thread(target=lambda: done.append(_refused(fifo)), daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert done == ["not a regular file"]


def _refused(path: Path) -> str:
    try:
        load_job(path)
    except JobSpecError as exc:
        return "not a regular file" if "not a regular file" in str(exc) else str(exc)
    return "accepted"


def test_deep_nesting_a_huge_file_and_too_many_reservations_are_refused_fast(tmp_path) -> None:
    deep = tmp_path / "deep.toml"
    deep.write_text('name = "ok"\nx = ' + "[" * 5000 + "]" * 5000 + "\n")
    big = tmp_path / "big.toml"
    big.write_text(VALID + "[extra]\n" + "".join(f"k{i} = {i}\n" for i in range(200_000)))
    held = tmp_path / "held.toml"
    held.write_text(VALID + "".join('[[purchase.held]]\ncloud = "aws"\nregion = "us-east-1"\n'
                                    'instance_type = "g4dn.xlarge"\ncount = 1\nuntil = 2030-01-01\n'
                                    for _ in range(300)))
    for path, why in ((deep, "nested deeper"), (big, "larger than"), (held, "purchase.held")):
        started = time.monotonic()
        with pytest.raises(JobSpecError, match=why):
            load_job(path)
        assert time.monotonic() - started < 10, path.name


@pytest.mark.parametrize("value", ["nul\x00byte", "bell\x07"])
def test_control_characters_are_refused_with_their_key(value) -> None:
    with pytest.raises(JobSpecError, match=r"run.entrypoint\[1\]: holds a control character"):
        parse_job({"name": "ok", "workload": {"steps": 10, "throughput": {"T4": 1.0}},
                   "run": {"entrypoint": ["python", value]}})


def test_credentials_in_smtp_url_are_refused_without_echoing_them(tmp_path, capsys) -> None:
    rc, err = _quote(tmp_path, VALID + '[alerts]\nsmtp_url = "smtp://bot:s3cret@mail.example.com:587"\n', capsys)
    assert rc == 2 and "alerts.smtp_url" in err and "DANLU_SMTP_PASSWORD" in err
    assert "s3cret" not in err


@pytest.mark.parametrize("table, key", [('email = ["not an address"]', "alerts.email"),
                                        ('smtp_url = "smtp://host:99999"', "alerts.smtp_url"),
                                        ("thresholds = [0.5, 1e9]", "alerts.thresholds")])
def test_alerts_are_checked_when_the_job_is_read(tmp_path, capsys, table, key) -> None:
    rc, err = _quote(tmp_path, VALID + f"[alerts]\n{table}\n", capsys)
    assert rc == 2 and key in err


def test_alerts_sender_is_accepted_as_documented() -> None:
    job = parse_job({"name": "ok", "workload": {"steps": 10, "throughput": {"T4": 1.0}},
                     "alerts": {"email": ["team@example.com"], "sender": "danlu@example.com"}})
    assert job.alerts.sender == "danlu@example.com"


def test_an_unknown_checkpoint_store_scheme_is_refused() -> None:
    with pytest.raises(JobSpecError, match="run.checkpoint_dir: .*'gopher'"):
        parse_job({"name": "ok", "workload": {"steps": 10, "throughput": {"T4": 1.0}},
                   "run": {"checkpoint_dir": "gopher://host/ckpt"}})
