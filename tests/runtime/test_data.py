"""The global sample cursor and the gradient-accumulation arithmetic."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from runtime.errors import SessionConfigError
from runtime.training.batching import grad_accumulation
from runtime.training.data import (
    GlobalCursorSampler,
    build_loader,
    epoch_order,
    loader_defaults,
)


def _per_step(size: int, *, world: int, micro: int, start: int = 0, stop: int = 8, gb: int = 12) -> list[list[int]]:
    """The multiset of samples each optimizer step consumes, over all ranks."""
    accum = grad_accumulation(gb, micro, world)
    streams = [
        list(GlobalCursorSampler(size, seed=3, global_batch=gb, micro_batch=micro, world_size=world, rank=r,
                                 start_step=start, stop_step=stop))
        for r in range(world)
    ]
    steps = []
    for i in range(stop - start):
        chunk = []
        for stream in streams:
            chunk += stream[i * micro * accum : (i + 1) * micro * accum]
        steps.append(sorted(chunk))
    return steps


def test_every_step_sees_the_same_samples_at_any_world_size() -> None:
    reference = _per_step(50, world=1, micro=12)
    assert _per_step(50, world=2, micro=6) == reference
    assert _per_step(50, world=3, micro=2) == reference
    assert _per_step(50, world=2, micro=3) == reference


def test_resume_continues_with_exactly_the_next_sample() -> None:
    whole = _per_step(50, world=2, micro=6, stop=10)
    assert _per_step(50, world=3, micro=4, start=4, stop=10) == whole[4:]


def test_epochs_are_permutations_laid_end_to_end() -> None:
    sampler = GlobalCursorSampler(10, seed=1, global_batch=5, micro_batch=5, world_size=1, rank=0,
                                  start_step=0, stop_step=4)
    seen = list(sampler)
    assert len(seen) == len(sampler) == 20
    assert sorted(seen[:10]) == list(range(10)) and sorted(seen[10:]) == list(range(10))
    assert seen[:10] != seen[10:]
    assert epoch_order(10, 1, 0) == seen[:10]
    assert epoch_order(10, 1, 0, shuffle=False) == list(range(10))


def test_start_position_supports_a_changed_global_batch() -> None:
    sampler = GlobalCursorSampler(100, seed=0, global_batch=8, micro_batch=8, world_size=1, rank=0,
                                  start_step=3, stop_step=4, start_position=30)
    assert list(sampler) == [sampler.index_at(p) for p in range(30, 38)]


def test_ranks_are_disjoint_within_a_step() -> None:
    streams = [
        list(GlobalCursorSampler(1000, seed=0, global_batch=32, micro_batch=8, world_size=2, rank=r,
                                 start_step=0, stop_step=5))
        for r in range(2)
    ]
    assert not Counter(streams[0]) & Counter(streams[1])


@pytest.mark.parametrize(("gb", "micro", "world", "accum"), [(64, 32, 2, 1), (64, 32, 1, 2), (64, 8, 2, 4)])
def test_grad_accumulation(gb: int, micro: int, world: int, accum: int) -> None:
    assert grad_accumulation(gb, micro, world) == accum


def test_grad_accumulation_that_does_not_divide_suggests_micro_batches() -> None:
    with pytest.raises(SessionConfigError, match=r"To fix: use micro_batch in \[.*16.*\]"):
        grad_accumulation(48, 10, 3)
    with pytest.raises(SessionConfigError, match="positive"):
        grad_accumulation(48, 0, 3)


def test_loader_yields_micro_batches_and_refuses_conflicting_options() -> None:
    dataset = torch.utils.data.TensorDataset(torch.arange(40).float())
    sampler = GlobalCursorSampler(40, seed=0, global_batch=8, micro_batch=4, world_size=2, rank=1,
                                  start_step=0, stop_step=3)
    loader = build_loader(dataset, sampler, device=torch.device("cpu"), local_world_size=2, seed=0)
    batches = [b[0] for b in loader]
    assert [len(b) for b in batches] == [4, 4, 4]
    assert torch.cat(batches).long().tolist() == list(sampler)
    with pytest.raises(ValueError, match="batch_size"):
        build_loader(dataset, sampler, device=torch.device("cpu"), local_world_size=1, seed=0,
                     options={"batch_size": 3})


def test_loader_defaults_feed_an_accelerator() -> None:
    assert loader_defaults(torch.device("cpu"), 2) == {"num_workers": 0}
    gpu = loader_defaults(torch.device("cuda", 0), 8)
    assert gpu["pin_memory"] and gpu["num_workers"] >= 1 and gpu["prefetch_factor"] == 4
