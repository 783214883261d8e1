"""Gradient-accumulation arithmetic that keeps the global batch constant across world sizes."""

from __future__ import annotations

from runtime.errors import SessionConfigError


def grad_accumulation(global_batch: int, micro_batch: int, world_size: int) -> int:
    """Micro-steps per optimizer step: ``global_batch / (micro_batch * world_size)``.

    Raises:
        SessionConfigError: the division is not exact; the message lists what would work.
    """
    for name, value in (("global_batch", global_batch), ("micro_batch", micro_batch), ("world_size", world_size)):
        if value <= 0:
            raise SessionConfigError(f"{name} must be a positive integer, got {value}.")
    per_micro_step = micro_batch * world_size
    if global_batch % per_micro_step:
        fits = [m for m in range(1, global_batch // world_size + 1) if global_batch % (m * world_size) == 0]
        hint = (
            f"micro_batch in {fits[-6:]}" if fits else f"a global_batch that is a multiple of {world_size}"
        )
        raise SessionConfigError(
            f"global_batch {global_batch} is not a multiple of micro_batch {micro_batch} x world size "
            f"{world_size}, so it cannot stay constant at this world size. To fix: use {hint}."
        )
    return global_batch // per_micro_step
