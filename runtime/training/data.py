"""A global sample cursor, and DataLoader defaults that keep an accelerator fed.

The run consumes one endless stream of samples: epoch ``e`` is a permutation of the
dataset drawn from ``(seed, e)``, and the epochs are laid end to end. Optimizer step ``s``
takes stream positions ``[s*G, (s+1)*G)`` for a global batch ``G``, whatever the world
size. Inside a step, micro-step ``i`` of rank ``r`` takes the ``micro_batch`` positions
starting at ``s*G + (i*W + r)*micro_batch``.

So the only state to checkpoint is the optimizer step: a run resumed at step ``s`` on any
number of ranks continues with exactly the next sample, and every optimizer step sees the
same ``G`` samples as it would have without the interruption.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from runtime.training.seeding import derive_seed

_EPOCH_SEED_TAG = 0x5A4D


class GlobalCursorSampler(Sampler[int]):
    """Dataset indices for one rank, from optimizer step ``start_step`` to ``stop_step``.

    ``start_position`` is the stream position of ``start_step`` (the samples seen so
    far); it differs from ``start_step * global_batch`` only after the global batch was
    changed on a resume.
    """

    def __init__(
        self,
        dataset_size: int,
        *,
        seed: int,
        global_batch: int,
        micro_batch: int,
        world_size: int,
        rank: int,
        start_step: int,
        stop_step: int,
        start_position: int | None = None,
        shuffle: bool = True,
    ):
        if dataset_size <= 0:
            raise ValueError("the dataset is empty")
        self.dataset_size = dataset_size
        self.seed = seed
        self.global_batch = global_batch
        self.micro_batch = micro_batch
        self.world_size = world_size
        self.rank = rank
        self.start_step = start_step
        self.stop_step = stop_step
        self.start_position = start_step * global_batch if start_position is None else start_position
        self.shuffle = shuffle
        self._epoch = -1
        self._order: list[int] = []

    def __len__(self) -> int:
        return max(0, self.stop_step - self.start_step) * self.global_batch // self.world_size

    def __iter__(self) -> Iterator[int]:
        accumulation = self.global_batch // (self.micro_batch * self.world_size)
        for step in range(self.start_step, self.stop_step):
            for micro in range(accumulation):
                first = (
                    self.start_position
                    + (step - self.start_step) * self.global_batch
                    + (micro * self.world_size + self.rank) * self.micro_batch
                )
                for position in range(first, first + self.micro_batch):
                    yield self.index_at(position)

    def index_at(self, position: int) -> int:
        """The dataset index at global stream ``position``."""
        epoch, offset = divmod(position, self.dataset_size)
        if epoch != self._epoch:
            self._epoch = epoch
            self._order = epoch_order(self.dataset_size, self.seed, epoch, self.shuffle)
        return self._order[offset]


def epoch_order(dataset_size: int, seed: int, epoch: int, shuffle: bool = True) -> list[int]:
    """The order in which epoch ``epoch`` visits the dataset."""
    if not shuffle:
        return list(range(dataset_size))
    generator = torch.Generator().manual_seed(derive_seed(seed, _EPOCH_SEED_TAG, epoch))
    return torch.randperm(dataset_size, generator=generator).tolist()


def loader_defaults(device: torch.device, local_world_size: int) -> dict[str, Any]:
    """DataLoader settings that keep the device busy without oversubscribing the host.

    On an accelerator: worker processes sharing the node's cores between local ranks,
    prefetching, pinned host memory and persistent workers. On CPU the ranks already use
    the cores, so batches are loaded in-process.
    """
    if device.type == "cpu":
        return {"num_workers": 0}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = max(1, min(8, cores // max(1, local_world_size) - 1))
    return {"num_workers": workers, "prefetch_factor": 4, "pin_memory": True, "persistent_workers": True}


def build_loader(
    dataset: Dataset[Any],
    sampler: GlobalCursorSampler,
    *,
    device: torch.device,
    local_world_size: int,
    seed: int,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    options: dict[str, Any] | None = None,
) -> DataLoader[Any]:
    """A DataLoader over ``sampler`` that yields exactly one micro-batch per item."""
    settings = loader_defaults(device, local_world_size)
    settings.update(options or {})
    for fixed in ("batch_size", "sampler", "shuffle", "drop_last", "batch_sampler"):
        if fixed in settings:
            raise ValueError(f"loader option {fixed!r} is set by the session; remove it from loader_options")
    if settings.get("num_workers", 0) == 0:
        settings.pop("prefetch_factor", None)
        settings.pop("persistent_workers", None)
    generator = torch.Generator().manual_seed(derive_seed(seed, sampler.rank, sampler.start_step))
    return DataLoader(
        dataset,
        batch_size=sampler.micro_batch,
        sampler=sampler,
        drop_last=False,
        collate_fn=collate_fn,
        generator=generator,
        worker_init_fn=_ignore_stop_signals,
        **settings,
    )


def _ignore_stop_signals(worker_id: int) -> None:
    # The training process decides when to stop; a worker killed by the same SIGTERM
    # would make the last batches before the preemption checkpoint fail.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
