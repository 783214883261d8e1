"""Process groups for a session: training, control and checkpoint traffic kept apart.

* the *main* group (nccl on GPU, gloo on CPU) carries DDP's gradient all-reduces;
* the *control* group (gloo) carries the per-step agreement on stop/checkpoint flags, on
  the host, without synchronising the device;
* the *checkpoint* group (gloo) carries DCP's collectives, which run in a background
  thread during asynchronous saves and must never interleave with the other two.

Launched by torchrun, the ranks come from its environment. Started as a plain
``python train.py``, the session runs as a world of one over an in-memory store, so the
same code path (and the same checkpoints) serve both.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from runtime.errors import SessionConfigError

DEFAULT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class DistContext:
    """Where this process sits in the job and the groups it talks through."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    main_group: dist.ProcessGroup
    control_group: dist.ProcessGroup
    checkpoint_group: dist.ProcessGroup
    owns_default_group: bool


def init_distributed(*, device: str | torch.device | None = None, timeout_s: float | None = None) -> DistContext:
    """Join (or create) the default process group and create the helper groups."""
    timeout = timedelta(seconds=timeout_s or DEFAULT_TIMEOUT_S)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    chosen = _choose_device(device, local_rank)
    owns = not dist.is_initialized()
    if owns:
        backend = "nccl" if chosen.type == "cuda" else "gloo"
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            dist.init_process_group(backend, timeout=timeout, device_id=chosen if chosen.type == "cuda" else None)
        else:
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    return DistContext(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        local_rank=local_rank,
        local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        device=chosen,
        main_group=dist.group.WORLD,
        control_group=dist.new_group(backend="gloo", timeout=timeout),
        checkpoint_group=dist.new_group(backend="gloo", timeout=timeout),
        owns_default_group=owns,
    )


def _choose_device(device: str | torch.device | None, local_rank: int) -> torch.device:
    if device is None:
        chosen = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    else:
        chosen = torch.device(device)
    if chosen.type == "cuda":
        if not torch.cuda.is_available():
            raise SessionConfigError(f"device {device!r} was requested but CUDA is not available. To fix: use 'cpu'.")
        if chosen.index is None:
            chosen = torch.device("cuda", local_rank)
        torch.cuda.set_device(chosen)
    return chosen


def shutdown(ctx: DistContext) -> None:
    """Destroy the groups this session created (the default one only if it created it)."""
    for group in (ctx.control_group, ctx.checkpoint_group):
        dist.destroy_process_group(group)
    if ctx.owns_default_group:
        dist.destroy_process_group()
