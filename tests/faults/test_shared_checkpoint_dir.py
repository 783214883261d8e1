"""A checkpoint directory belongs to one run: a second run is refused before it writes anything."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from planner.cli import main
from runtime.control.checkpoint_owner import OWNER_FILE, CheckpointDirTaken, claim
from tests.run.helpers import digits_entrypoint, write_catalog, write_job

pytestmark = pytest.mark.faults


def test_a_second_run_on_the_same_relative_checkpoint_dir_is_refused(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    catalog = write_catalog(tmp_path / "catalog.csv")
    extra = 'checkpoint_dir = "shared-ckpt"'
    job = write_job(tmp_path / "job.toml", entrypoint=digits_entrypoint(10), steps=10, nproc=1, extra=extra)
    # The first run claims the directory when its state is written (here: a run that is then resumed later).
    claim(str(tmp_path / "shared-ckpt"), run_dir=str((tmp_path / "runs" / "first").resolve()), job="digits-test")

    rc = main(["run", str(job), "--catalog", str(catalog), "--run-dir", "runs/second"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "belongs to run" in err and str(tmp_path / "runs" / "first") in err and "--resume" in err
    assert not (tmp_path / "runs" / "second").exists()


def test_the_owner_itself_passes_and_a_torn_record_is_an_error_not_a_takeover(tmp_path) -> None:
    ckpt = str(tmp_path / "ckpt")
    assert claim(ckpt, run_dir="/runs/a", job="a").new
    assert not claim(ckpt, run_dir="/runs/a", job="a").new
    (tmp_path / "ckpt" / OWNER_FILE).write_text("{not json")
    with pytest.raises(CheckpointDirTaken, match="not a readable owner record"):
        claim(ckpt, run_dir="/runs/b", job="b")


def test_of_two_runs_claiming_at_once_exactly_one_wins(tmp_path) -> None:
    ckpt = str(tmp_path / "ckpt")
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def attempt(i: int) -> None:
        barrier.wait()
        try:
            claim(ckpt, run_dir=f"/runs/{i}", job=f"j{i}")
            outcomes.append("won")
        except CheckpointDirTaken:
            outcomes.append("refused")

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["refused"] * 7 + ["won"]


def test_a_checkpoint_dir_that_cannot_be_made_is_refused_with_the_fix(tmp_path) -> None:
    # A path through a regular file fails for root too (a read-only mode would not).
    (tmp_path / "a-file").write_text("")
    with pytest.raises(CheckpointDirTaken, match="make it writable"):
        claim(str(tmp_path / "a-file" / "ckpt"), run_dir="/runs/a", job="a")


def test_a_cloud_checkpoint_dir_without_credentials_is_one_error_with_the_fix(tmp_path) -> None:
    """boto3 finds no credentials: its NoCredentialsError is no OSError, and came out as a traceback."""
    from tests.clouds.aws_job import write_catalog as write_aws_catalog
    from tests.clouds.aws_job import write_job as write_aws_job
    from tests.clouds.aws_job import write_project

    project = write_project(tmp_path / "project")
    job = write_aws_job(tmp_path / "job.toml", bucket="no-such-bucket", steps=10, sleep=0)
    catalog = write_aws_catalog(tmp_path / "catalog.csv")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_EC2_METADATA_DISABLED="true", AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"), AWS_DEFAULT_REGION="us-east-1",
               AWS_ENDPOINT_URL="http://127.0.0.1:9")  # were credentials found after all, nothing leaves the machine
    done = subprocess.run([sys.executable, "-m", "planner.cli", "run", str(job), "--catalog", str(catalog),
                           "--run-dir", str(tmp_path / "run")], cwd=project, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "s3://no-such-bucket/ckpt: cannot use it as the checkpoint directory (NoCredentialsError" in done.stderr
    assert "the cloud SDK's credentials" in done.stderr
    assert not (tmp_path / "run").exists()


def test_what_a_library_logs_reaches_the_terminal_as_one_line_without_its_traceback() -> None:
    code = ("import logging\nfrom planner.cli import quiet_library_tracebacks\nquiet_library_tracebacks()\n"
            "try:\n    1 / 0\nexcept ZeroDivisionError:\n    logging.getLogger('gcsfs').exception('out of retries')\n"
            "logging.getLogger('runtime.control.controller').error('the end state could not be written')\n"
            "logging.getLogger('gcsfs').info('not shown')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stderr == "error (gcsfs): out of retries\nerror: the end state could not be written\n"
