"""Mixed precision on request: autocast contexts and the gradient scaler fp16 needs."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Literal

import torch

from runtime.errors import SessionConfigError

Precision = Literal["fp32", "bf16", "fp16"]
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class MixedPrecision:
    """Autocast for the forward pass, and a GradScaler when the dtype needs one (fp16)."""

    precision: Precision
    device: torch.device
    scaler: torch.amp.GradScaler | None

    @classmethod
    def create(cls, precision: str, device: torch.device) -> MixedPrecision:
        if precision not in ("fp32", "bf16", "fp16"):
            raise SessionConfigError(f"precision {precision!r} is not supported. To fix: use 'fp32', 'bf16' or 'fp16'.")
        if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise SessionConfigError("this GPU has no bf16 support. To fix: use precision='fp16'.")
        scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
        return cls(precision, device, scaler)  # type: ignore[arg-type]

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The context to run the forward pass and loss in."""
        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=_DTYPES[self.precision])

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def step(self, optimizer: torch.optim.Optimizer, parameters: Any, max_grad_norm: float | None) -> None:
        """Unscale, clip and step; with fp16, a step whose gradients overflowed is skipped."""
        if self.scaler is not None:
            if max_grad_norm is not None:
                self.scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
            self.scaler.step(optimizer)
            self.scaler.update()
            return
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
        optimizer.step()
