"""Checkpointer: incremental writes, asynchronous staging, object stores (one process)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from runtime.errors import CheckpointError
from runtime.training.checkpoint import Checkpointer, SaveInfo, tensor_digest
from runtime.training.store import CheckpointStore


@pytest.fixture
def group() -> Iterator[dist.ProcessGroup]:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.new_group(backend="gloo")
    finally:
        dist.destroy_process_group()


def _info(step: int) -> SaveInfo:
    return SaveInfo(step=step, reason="test", world_size=1, global_batch=8, samples_seen=8 * step, seed=0)


def _state() -> dict[str, object]:
    torch.manual_seed(0)
    return {"model/frozen": torch.randn(256, 1024), "model/w": torch.randn(8), "progress/step": 0}


def test_unchanged_tensors_are_not_rewritten(tmp_path: Path, group: dist.ProcessGroup) -> None:
    store = CheckpointStore(str(tmp_path))
    ckpt = Checkpointer(store, rank=0, process_group=group, keep_last=1, log_path=tmp_path / "log.jsonl")
    state = _state()
    first = ckpt.save(state, _info(1), block=True)
    state["model/w"].add_(1.0)
    state["progress/step"] = 2
    second = ckpt.save(state, _info(2), block=True)
    assert first is not None and second is not None
    assert first.tensors_written == 2 and second.tensors_written == 1 and second.tensors_reused == 1
    assert second.bytes_reused == 256 * 1024 * 4
    assert second.bytes_written < first.bytes_written / 10
    assert store.read_manifest(2).tensors["model/frozen"].home == 1
    assert store.step_dirs() == [1, 2]  # keep_last=1, but step 1 holds the frozen tensor

    loaded = {"model/frozen": torch.zeros(256, 1024), "model/w": torch.zeros(8), "progress/step": -1}
    Checkpointer(store, rank=0, process_group=group).load(loaded, 2)
    assert torch.equal(loaded["model/frozen"], state["model/frozen"])
    assert torch.equal(loaded["model/w"], state["model/w"])
    assert loaded["progress/step"] == 2
    assert len((tmp_path / "log.jsonl").read_text().splitlines()) == 2
    ckpt.close()


def test_a_change_that_bypasses_autograd_versions_is_caught_by_the_hash(
    tmp_path: Path, group: dist.ProcessGroup
) -> None:
    ckpt = Checkpointer(CheckpointStore(str(tmp_path)), rank=0, process_group=group)
    state = _state()
    ckpt.save(state, _info(1), block=True)
    state["model/frozen"].data[0, 0] = 42.0  # .data does not bump the version counter
    report = ckpt.save(state, _info(2), block=True)
    assert report is not None and report.tensors_written == 1
    assert ckpt.store.read_manifest(2).tensors["model/frozen"].home == 2
    ckpt.close()


def test_async_save_isolates_the_staged_copy(tmp_path: Path, group: dist.ProcessGroup) -> None:
    store = CheckpointStore(str(tmp_path))
    ckpt = Checkpointer(store, rank=0, process_group=group, incremental=False)
    state = _state()
    expected = state["model/w"].clone()
    assert ckpt.save(state, _info(1)) is None  # returns once staged
    state["model/w"].add_(100.0)  # training goes on while the write runs
    report = ckpt.wait()
    assert report is not None and report.ok and store.is_committed(1)
    loaded = {"model/w": torch.zeros(8)}
    ckpt.load(loaded, 1)
    assert torch.equal(loaded["model/w"], expected)
    ckpt.close()


def test_object_store_through_fsspec(group: dist.ProcessGroup) -> None:
    store = CheckpointStore(f"memory://danlu-{uuid.uuid4().hex}/ckpt")
    ckpt = Checkpointer(store, rank=0, process_group=group)
    state = _state()
    ckpt.save(state, _info(3))
    assert ckpt.wait() is not None
    assert store.latest_step() == 3 and not store.verify(3)
    loaded = {"model/frozen": torch.zeros(256, 1024), "model/w": torch.zeros(8), "progress/step": None}
    ckpt.load(loaded, 3)
    assert torch.equal(loaded["model/frozen"], state["model/frozen"])
    ckpt.close()


def test_loading_into_a_different_model_says_what_to_do(tmp_path: Path, group: dist.ProcessGroup) -> None:
    ckpt = Checkpointer(CheckpointStore(str(tmp_path)), rank=0, process_group=group)
    ckpt.save(_state(), _info(1), block=True)
    with pytest.raises(CheckpointError, match="To fix: resume with the same model"):
        ckpt.load({"model/other": torch.zeros(3)}, 1)
    ckpt.close()


def test_a_failed_blocking_save_raises(tmp_path: Path, group: dist.ProcessGroup) -> None:
    store = CheckpointStore(str(tmp_path))
    ckpt = Checkpointer(store, rank=0, process_group=group)
    ckpt.save(_state(), _info(1), block=True)
    with pytest.raises(CheckpointError, match="refusing to overwrite"):
        ckpt.save(_state(), _info(1), block=True)
    ckpt.close()


def test_tensor_digest_covers_dtype_shape_and_bytes() -> None:
    t = torch.arange(6, dtype=torch.float32)
    assert tensor_digest(t) == tensor_digest(t.clone())
    assert tensor_digest(t) != tensor_digest(t.reshape(2, 3))
    assert tensor_digest(t) != tensor_digest(t.double())
    assert tensor_digest(t.to(torch.bfloat16)) != tensor_digest(t.to(torch.float16))
