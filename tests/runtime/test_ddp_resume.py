"""Exact resume under real torchrun (gloo, 2 ranks): interrupted runs end bitwise equal.

Each test interrupts the same tiny job (tests/runtime/workers/tiny_train.py) at a random
step, in a different way, resumes it with a fresh torchrun, and compares the final
parameters with an uninterrupted run of the same seed.
"""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path

import pytest
import torch
from ddp_launch import Launcher, TorchrunJob, is_alive

from runtime.training import contract
from runtime.training.contract import LaunchContract, Outcome
from runtime.training.store import CheckpointStore

pytestmark = pytest.mark.ddp

WORKER = Path(__file__).parent / "workers" / "tiny_train.py"
STEPS = 40
ARGS = ["--steps", str(STEPS), "--step-sleep", "0.02"]
RNG = random.Random(20261130)


def _terms(run_dir: Path, attempt: str, **extra: object) -> LaunchContract:
    return LaunchContract(
        checkpoint_dir=str(run_dir / "ckpt"), run_dir=str(run_dir), attempt=attempt, checkpoint_every_steps=5, **extra
    )


def _run_to_end(launcher: Launcher, run_dir: Path, attempt: str, nproc: int = 2, args: list[str] = ARGS) -> TorchrunJob:
    job = launcher.torchrun(WORKER, args, run_dir=run_dir, nproc=nproc, contract=_terms(run_dir, attempt))
    rc = job.wait()
    assert rc == 0, job.log()
    assert contract.classify(rc, run_dir, attempt) is Outcome.COMPLETED
    return job


def _final(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "final.pt")


def _assert_bitwise(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"{key} differs"


def _losses(run_dir: Path) -> dict[int, dict]:
    lines = (run_dir / "loss.jsonl").read_text().splitlines()
    return {row["step"]: row for row in map(json.loads, lines)}  # a re-done step keeps its last value


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("baseline")
    jobs = Launcher()
    try:
        _run_to_end(jobs, run_dir, "a-0")
    finally:
        jobs.reap()
    return run_dir


def test_sigterm_to_agent_checkpoints_and_resumes_bitwise(baseline: Path, tmp_path: Path, launcher: Launcher) -> None:
    stop_at = RNG.randrange(3, STEPS - 10)
    job = launcher.torchrun(WORKER, ARGS, run_dir=tmp_path, contract=_terms(tmp_path, "a-1"))
    job.wait_for_progress(stop_at)
    job.signal_agent(signal.SIGTERM)
    rc = job.wait(60)

    status = contract.read_status(tmp_path)
    assert status is not None and status.state == "preempted", job.log()
    assert status.reason == "signal SIGTERM"
    assert rc != 0  # torchrun reports the SignalException; only status.json tells the truth
    assert contract.classify(rc, tmp_path, "a-1") is Outcome.PREEMPTED
    assert CheckpointStore(str(tmp_path / "ckpt")).latest_step() == status.step >= stop_at

    _run_to_end(launcher, tmp_path, "a-2")
    _assert_bitwise(_final(baseline), _final(tmp_path))
    assert json.loads((tmp_path / "extras.json").read_text()) == json.loads((baseline / "extras.json").read_text())


def test_sigkill_of_whole_node_resumes_bitwise(baseline: Path, tmp_path: Path, launcher: Launcher) -> None:
    kill_at = RNG.randrange(8, STEPS - 5)
    job = launcher.torchrun(WORKER, ARGS, run_dir=tmp_path, contract=_terms(tmp_path, "a-1"))
    job.wait_for_progress(kill_at)
    workers = job.pids()[1:]
    job.kill_node()
    assert workers and not any(is_alive(pid) for pid in workers)
    assert contract.classify(job.process.returncode, tmp_path, "a-1") is Outcome.FAILED

    _run_to_end(launcher, tmp_path, "a-2")
    _assert_bitwise(_final(baseline), _final(tmp_path))


def test_kill_during_checkpoint_write_uses_previous_checkpoint(
    baseline: Path, tmp_path: Path, launcher: Launcher
) -> None:
    # 48 MiB of ballast that changes every step makes each write take long enough to hit.
    args = [*ARGS, "--ballast-mb", "48"]
    ckpt = tmp_path / "ckpt"
    victim = None
    for attempt in range(3):  # a kill that lands just after a commit is retried (it resumes)
        job = launcher.torchrun(WORKER, args, run_dir=tmp_path, contract=_terms(tmp_path, f"a-{attempt}"))
        job.wait_for_progress(job.progress() + RNG.randrange(3, 8))
        deadline = time.monotonic() + 60
        candidate = None
        while candidate is None and time.monotonic() < deadline and job.process.poll() is None:
            job.pids()
            candidate = next(
                (d for d in ckpt.glob("step-*") if int(d.name[5:]) > 5 and not (d / "manifest.json").exists()), None
            )
        assert candidate is not None, "never saw a checkpoint being written:\n" + job.log()
        job.kill_node()
        if not (candidate / "manifest.json").exists():
            victim = candidate
            break
    assert victim is not None, "every kill landed after the commit"
    previous = CheckpointStore(str(ckpt)).latest_step()
    assert previous is not None and previous < int(victim.name[5:])

    _run_to_end(launcher, tmp_path, "a-9", args=args)
    status = contract.read_status(tmp_path)
    assert status is not None and any("never committed" in p for p in status.problems)
    assert not victim.exists()
    _assert_bitwise(_final(baseline), _final(tmp_path))


def test_world_size_2_to_1_to_2_keeps_global_batch_and_loss_curve(
    baseline: Path, tmp_path: Path, launcher: Launcher
) -> None:
    first, second = sorted(RNG.sample(range(6, STEPS - 6), 2))
    job = launcher.torchrun(WORKER, ARGS, run_dir=tmp_path, nproc=2, contract=_terms(tmp_path, "a-1"))
    job.wait_for_progress(first)
    job.signal_agent(signal.SIGTERM)
    job.wait(60)
    assert contract.classify(job.process.returncode, tmp_path, "a-1") is Outcome.PREEMPTED

    # One rank now: micro-batch 8, so 2 accumulation steps keep the global batch at 16.
    job = launcher.torchrun(WORKER, ARGS, run_dir=tmp_path, nproc=1, contract=_terms(tmp_path, "a-2"))
    job.wait_for_progress(max(second, first + 2))
    request = contract.request_checkpoint(tmp_path / contract.CONTROL_FILE, "stop", reason="test")
    job.wait(60)
    status = contract.read_status(tmp_path)
    assert status is not None and status.state == "preempted" and status.request_id == request.id, job.log()
    assert status.world_size == 1

    _run_to_end(launcher, tmp_path, "a-3", nproc=2)
    resumed, reference = _losses(tmp_path), _losses(baseline)
    assert sorted(resumed) == list(range(1, STEPS + 1))
    assert {row["world"] for row in resumed.values()} == {1, 2}
    for step, row in resumed.items():
        assert row["loss"] == pytest.approx(reference[step]["loss"], rel=1e-5, abs=1e-6), f"step {step}"
    final, expected = _final(tmp_path), _final(baseline)
    for key in expected:
        torch.testing.assert_close(final[key], expected[key], rtol=1e-5, atol=1e-6)
