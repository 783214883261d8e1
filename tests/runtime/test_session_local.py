"""The session in one process (world size 1): resume, requests, corruption, precision."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from runtime.errors import SessionConfigError
from runtime.training import contract, session
from runtime.training.interval import IntervalEstimator
from runtime.training.preemption import Preempted
from runtime.training.store import CheckpointStore

DATA = torch.utils.data.TensorDataset(
    torch.randn(96, 6, generator=torch.Generator().manual_seed(0)), torch.arange(96) % 3
)


def _train(
    ckpt: str | Path,
    *,
    steps: int = 12,
    env: dict[str, str] | None = None,
    frozen: bool = False,
    precision: str = "fp32",
    on_step: Any = None,
    run_dir: Path | None = None,
) -> tuple[dict[str, torch.Tensor], session.Session]:
    torch.manual_seed(5)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 3))
    if frozen:
        model[0].requires_grad_(False)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    environ = {"DANLU_CHECKPOINT_EVERY_STEPS": "4", **(env or {})}
    with session.Session(
        model, optimizer, scheduler=scheduler, dataset=DATA, global_batch=8, micro_batch=4, max_steps=steps,
        seed=11, precision=precision, checkpoint_dir=str(ckpt), run_dir=run_dir, environ=environ,
    ) as s:
        for x, y in s.batches():
            with s.autocast():
                loss = nn.functional.cross_entropy(s.model(x), y)
            if s.step(loss) and on_step is not None:
                on_step(s)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, s


def _stop_at(step: int, action: contract.Action = "stop"):
    """Write a request after ``step``; the ranks see it at the next boundary, ``step + 1``."""

    def hook(s: session.Session) -> None:
        if s.global_step == step:
            contract.request_checkpoint(s.run_dir / contract.CONTROL_FILE, action, reason="test")
    return hook


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_stop_request_checkpoints_exits_75_and_resumes_bitwise(tmp_path: Path) -> None:
    expected, _ = _train(tmp_path / "straight")
    with pytest.raises(Preempted) as info:
        _train(tmp_path / "ckpt", on_step=_stop_at(6))
    assert info.value.code == contract.EXIT_PREEMPTED == 75 and info.value.step == 7
    status = contract.read_status(tmp_path / "ckpt")
    assert status is not None and status.state == "preempted" and status.step == 7
    assert status.reason == "stop request" and status.request_id

    resumed, s = _train(tmp_path / "ckpt")  # control.json still holds the stop: ignored now
    assert s.resumed_from == 7 and _equal(resumed, expected)
    assert contract.read_status(tmp_path / "ckpt").state == "completed"


def test_checkpoint_request_saves_and_trains_on(tmp_path: Path) -> None:
    _, s = _train(tmp_path, env={"DANLU_KEEP_LAST": "5"}, on_step=_stop_at(2, "checkpoint"))
    reasons = {r.step: r.reason for r in s.checkpoints}
    assert reasons == {3: "request", 7: "interval", 11: "interval", 12: "final"}
    # The longest write is reported, for the budget cap: a stop may wait for one in flight.
    assert contract.read_status(tmp_path).save_write_s == max(r.write_s for r in s.checkpoints) > 0
    assert CheckpointStore(str(tmp_path)).read_manifest(3).request_id is not None


def test_corrupted_latest_checkpoint_is_reported_and_the_previous_one_used(tmp_path: Path) -> None:
    expected, _ = _train(tmp_path / "straight")
    with pytest.raises(Preempted):
        _train(tmp_path / "ckpt", on_step=_stop_at(9))
    store = CheckpointStore(str(tmp_path / "ckpt"))
    assert store.committed_steps() == [4, 8, 10]
    victim = next((tmp_path / "ckpt" / "step-10").glob("*.distcp"))
    victim.write_bytes(victim.read_bytes()[:-20])  # a torn write discovered later

    resumed, s = _train(tmp_path / "ckpt")
    assert s.resumed_from == 8
    assert any("step-10" in p and "bytes" in p for p in s.resume_problems)
    assert contract.read_status(tmp_path / "ckpt").problems == s.resume_problems
    assert any(p.name.startswith("step-10.corrupt") for p in (tmp_path / "ckpt" / "discarded").iterdir())
    assert _equal(resumed, expected)


def test_frozen_layers_are_written_once_and_restored(tmp_path: Path) -> None:
    expected, _ = _train(tmp_path / "straight", frozen=True)
    with pytest.raises(Preempted):
        _train(tmp_path / "ckpt", frozen=True, on_step=_stop_at(9))
    rows = [json.loads(line) for line in (tmp_path / "ckpt" / "checkpoints.jsonl").read_text().splitlines()]
    assert rows[0]["tensors_reused"] == 0 and rows[-1]["tensors_reused"] == 2  # weight and bias of layer 0
    assert rows[-1]["bytes_written"] < rows[0]["bytes_written"]
    resumed, _ = _train(tmp_path / "ckpt", frozen=True)
    assert _equal(resumed, expected)


def test_object_store_checkpoints(tmp_path: Path) -> None:
    url = f"memory://danlu-{uuid.uuid4().hex}/ckpt"
    expected, _ = _train(tmp_path / "straight")
    with pytest.raises(Preempted):
        _train(url, run_dir=tmp_path / "run", on_step=_stop_at(5))
    resumed, s = _train(url, run_dir=tmp_path / "run")
    assert s.resumed_from == 6 and _equal(resumed, expected)


def test_young_daly_interval_checkpoints_early_to_measure_the_cost(tmp_path: Path) -> None:
    _, s = _train(tmp_path, env={"DANLU_CHECKPOINT_EVERY_STEPS": "", "DANLU_MTBF_S": "7200"})
    assert [r.step for r in s.checkpoints] == [1, 12]
    assert s.interval_s is not None and s.interval_s > 0


def test_a_resumed_launch_checkpoints_on_schedule_too(tmp_path: Path) -> None:
    # A launch that starts from a checkpoint used to wait for a cost it never measured and
    # so never saved again: a second failure lost everything since the resume. With no save
    # taken while training on record (only the stop's, which blocks), it measures C itself.
    env = {"DANLU_CHECKPOINT_EVERY_STEPS": "", "DANLU_MTBF_S": "7200"}
    with pytest.raises(Preempted):
        _train(tmp_path, env={**env, "DANLU_CHECKPOINT_COST_S": "600"}, on_step=_stop_at(5))
    store = CheckpointStore(str(tmp_path))
    assert store.committed_steps() == [6] and store.read_manifest(6).reason == "preempt"
    _, s = _train(tmp_path, env=env)
    assert s.resumed_from == 6
    assert [r.step for r in s.checkpoints] == [7, 12]
    assert s.interval_s is not None and s.interval_s > 0


def test_a_resumed_launch_takes_the_cost_from_the_saves_on_record(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    # Its measuring save one step after the resume was still being written when a notice came
    # in the launch's first seconds, and the stop's save queued behind it.
    env = {"DANLU_CHECKPOINT_EVERY_STEPS": "", "DANLU_MTBF_S": "7200"}
    with pytest.raises(Preempted):
        _train(tmp_path, env=env, on_step=_stop_at(5))
    store = CheckpointStore(str(tmp_path))
    measured = store.read_manifest(1)
    assert store.committed_steps() == [1, 6] and measured.reason == "interval" and measured.write_s > 0
    caplog.set_level("INFO", logger="runtime.training.session")
    _, s = _train(tmp_path, env=env)
    assert s.resumed_from == 6
    assert [r.step for r in s.checkpoints] == [12]  # no save at 7: C is known, the interval has not passed
    assert "checkpoint cost from step 1" in caplog.text
    expected = IntervalEstimator(7200.0)
    expected.observe(stall_s=measured.stall_s, write_s=measured.write_s)
    expected.observe(stall_s=s.checkpoints[-1].stall_s, write_s=s.checkpoints[-1].write_s)
    assert s.interval_s == pytest.approx(expected.interval_s, rel=1e-12)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains_and_resumes(tmp_path: Path, precision: str) -> None:
    expected, _ = _train(tmp_path / "straight", precision=precision)
    assert all(torch.isfinite(v).all() for v in expected.values())
    with pytest.raises(Preempted):
        _train(tmp_path / "ckpt", precision=precision, on_step=_stop_at(7))
    resumed, _ = _train(tmp_path / "ckpt", precision=precision)
    assert _equal(resumed, expected)


def test_configuration_errors_say_what_to_do(tmp_path: Path) -> None:
    model = nn.Linear(6, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(SessionConfigError, match="DANLU_CHECKPOINT_DIR"):
        session.Session(model, optimizer, dataset=DATA, global_batch=8, max_steps=1, environ={})
    with pytest.raises(SessionConfigError, match="micro_batch"):
        with session.Session(model, optimizer, dataset=DATA, global_batch=8, micro_batch=3, max_steps=1,
                             checkpoint_dir=str(tmp_path), environ={}):
            pass
    with pytest.raises(SessionConfigError, match="precision"):
        with session.Session(model, optimizer, dataset=DATA, global_batch=8, max_steps=1, precision="fp8",
                             checkpoint_dir=str(tmp_path), environ={}):
            pass


def test_step_must_follow_each_batch(tmp_path: Path) -> None:
    model = nn.Linear(6, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(SessionConfigError, match="not called for the previous batch"):
        with session.Session(model, optimizer, dataset=DATA, global_batch=8, max_steps=3,
                             checkpoint_dir=str(tmp_path), environ={}) as s:
            for _ in s.batches():
                pass
    with pytest.raises(SessionConfigError, match="without a batch"):
        with session.Session(model, optimizer, dataset=DATA, global_batch=8, max_steps=3,
                             checkpoint_dir=str(tmp_path / "2"), environ={}) as s:
            s.step(torch.zeros((), requires_grad=True))


@pytest.mark.parametrize("heartbeat_s", [1e-9, 3600.0], ids=["every-boundary", "not-yet-due"])
def test_rank_0_reports_its_step_while_it_trains(tmp_path: Path, monkeypatch, heartbeat_s: float) -> None:
    monkeypatch.setattr(contract, "STATUS_HEARTBEAT_S", heartbeat_s)
    seen = []

    def look(s: session.Session) -> None:
        status = contract.read_status(tmp_path / "ckpt")
        seen.append((s.global_step, status.state, status.step, status.heartbeat_s))

    _train(tmp_path / "ckpt", steps=6, on_step=look)
    if heartbeat_s < 1:  # each step boundary is past the interval: the step is reported as it is reached
        assert seen == [(n, "running", n, heartbeat_s) for n in range(1, 7)]
    else:  # only the report at the start, until a heartbeat is due
        assert seen == [(n, "running", 0, heartbeat_s) for n in range(1, 7)]
    assert contract.read_status(tmp_path / "ckpt").state == "completed"
