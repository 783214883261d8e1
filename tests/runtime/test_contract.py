"""The controller <-> training-process contract: environment, status file, control file."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from runtime.errors import ContractError
from runtime.training import contract
from runtime.training.contract import LaunchContract, Outcome, RunStatus


def test_env_round_trip() -> None:
    terms = LaunchContract(
        checkpoint_dir="s3://bucket/run/ckpt",
        resume=120,
        run_dir="/runs/a",
        attempt="a-3",
        mtbf_s=7200.0,
        restart_s=300.0,
        checkpoint_cost_s=4.5,
        checkpoint_every_steps=None,
        keep_last=2,
        pg_timeout_s=90.0,
    )
    env = terms.to_env()
    assert env["DANLU_RESUME"] == "120" and "DANLU_CHECKPOINT_EVERY_STEPS" not in env
    assert LaunchContract.from_env(env) == terms


def test_empty_environment_means_defaults() -> None:
    assert LaunchContract.from_env({}) == LaunchContract()
    assert LaunchContract().to_env() == {}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DANLU_RESUME", "yesterday"),
        ("DANLU_RESUME", "-3"),
        ("DANLU_MTBF_S", "0"),
        ("DANLU_MTBF_S", "two hours"),
        ("DANLU_KEEP_LAST", "1.5"),
        ("DANLU_RESTART_S", "-1"),
    ],
)
def test_bad_variables_name_the_variable_and_the_fix(name: str, value: str) -> None:
    with pytest.raises(ContractError) as info:
        LaunchContract.from_env({name: value})
    assert name in str(info.value) and "To fix" in str(info.value)


@pytest.mark.parametrize(("raw", "parsed"), [("latest", "latest"), ("NONE", "none"), ("0", 0), ("", "latest")])
def test_resume_values(raw: str, parsed: object) -> None:
    assert LaunchContract.from_env({"DANLU_RESUME": raw}).resume == parsed


def test_status_is_written_atomically_and_read_back(tmp_path: Path) -> None:
    status = RunStatus(state="preempted", step=42, attempt="a-1", checkpoint="/c/step-42", problems=("x",))
    contract.write_status(tmp_path, status)
    assert contract.read_status(tmp_path) == status
    assert stat.S_IMODE(os.stat(tmp_path / "status.json").st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]  # no temp files left


def test_a_status_from_a_later_danlu_is_read_for_what_this_one_knows(tmp_path: Path) -> None:
    status = RunStatus(state="running", step=3, attempt="l-1", save_write_s=2.5)
    contract.write_status(tmp_path, status)
    data = json.loads((tmp_path / "status.json").read_text())
    assert data["save_write_s"] == 2.5
    (tmp_path / "status.json").write_text(json.dumps(data | {"gpu_temperature_c": 71}))
    assert contract.read_status(tmp_path) == status


def test_missing_status_is_none_and_garbage_is_an_error(tmp_path: Path) -> None:
    assert contract.read_status(tmp_path) is None
    (tmp_path / "status.json").write_text("{not json")
    with pytest.raises(ContractError, match="status.json"):
        contract.read_status(tmp_path)
    (tmp_path / "status.json").write_text(json.dumps({"state": "sleeping", "step": 1}))
    with pytest.raises(ContractError, match="'state'"):
        contract.read_status(tmp_path)


@pytest.mark.parametrize(
    ("state", "returncode", "outcome"),
    [
        ("preempted", 1, Outcome.PREEMPTED),  # torchrun after SIGTERM
        ("preempted", 0, Outcome.PREEMPTED),
        ("completed", 0, Outcome.COMPLETED),
        ("completed", 1, Outcome.FAILED),  # e.g. the exit barrier failed
        ("running", 0, Outcome.FAILED),
        ("running", -9, Outcome.FAILED),
    ],
)
def test_classify(tmp_path: Path, state: str, returncode: int, outcome: Outcome) -> None:
    contract.write_status(tmp_path, RunStatus(state=state, step=3, attempt="a-2"))  # type: ignore[arg-type]
    assert contract.classify(returncode, tmp_path, "a-2") is outcome


def test_classify_ignores_a_stale_status_from_another_attempt(tmp_path: Path) -> None:
    contract.write_status(tmp_path, RunStatus(state="preempted", step=3, attempt="a-1"))
    assert contract.classify(1, tmp_path, "a-2") is Outcome.FAILED
    assert contract.classify(1, tmp_path / "nothing-here") is Outcome.FAILED


def test_control_requests(tmp_path: Path) -> None:
    path = tmp_path / contract.CONTROL_FILE
    assert contract.read_request(path) is None
    request = contract.request_checkpoint(path, "checkpoint", reason="re-plan")
    assert contract.read_request(path) == request
    with pytest.raises(ContractError, match="'stop' or 'checkpoint'"):
        contract.request_checkpoint(path, "pause")  # type: ignore[arg-type]
    path.write_text('{"id": "x", "action": "explode"}')
    with pytest.raises(ContractError, match="'action'"):
        contract.read_request(path)
    path.write_text("[]")
    with pytest.raises(ContractError, match="request_checkpoint"):
        contract.read_request(path)
