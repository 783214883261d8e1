"""The shipped example trains to its stated accuracy under torchrun, as the controller runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ddp_launch import REPO_ROOT, Launcher

from runtime.training import contract
from runtime.training.contract import LaunchContract, Outcome

pytestmark = pytest.mark.ddp
pytest.importorskip("sklearn", reason="the digits example needs scikit-learn")


def test_digits_example_reaches_95_percent_in_under_a_minute(tmp_path: Path, launcher: Launcher) -> None:
    terms = LaunchContract(checkpoint_dir=str(tmp_path / "ckpt"), run_dir=str(tmp_path), attempt="a-1", mtbf_s=7200)
    job = launcher.torchrun(REPO_ROOT / "examples" / "train_digits.py", [], run_dir=tmp_path, contract=terms)
    rc = job.wait(120)
    assert rc == 0, job.log()
    assert contract.classify(rc, tmp_path, "a-1") is Outcome.COMPLETED
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["steps"] == 300 and metrics["world_size"] == 2
    assert metrics["test_accuracy"] >= 0.95
    assert metrics["train_seconds"] < 60
