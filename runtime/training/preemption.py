"""Stop and checkpoint requests: caught locally, agreed on by all ranks at a step boundary.

A signal handler may run between any two bytecodes, and after a blocking collective
returns, so it only sets a flag. At each step boundary every rank contributes its flags to
one small all-reduce (SUM) on the control group; a flag raised on any rank -- the node
whose VM is being reclaimed may not host rank 0 -- is seen by all, and they all save the
same step.

Sequence on an AWS spot notice, 2 nodes x 2 ranks::

    t=0     controller writes control.json {"action": "stop"} on node B
    t=0.2s  ranks 2, 3 see the request at their step boundary (step 812)
    t=0.2s  all-reduce: stop=2 -> every rank saves step-812, rank 0 commits it
    t=1.5s  rank 0 writes status.json {"state": "preempted", "step": 812}; all exit 75
"""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

from runtime.errors import ContractError
from runtime.training import contract

log = logging.getLogger("runtime.training.preemption")


class Preempted(SystemExit):
    """Raised out of the training loop after the preemption checkpoint is committed.

    A ``SystemExit`` whose code is :data:`runtime.training.contract.EXIT_PREEMPTED`, so an
    unhandled one ends the process with that code after ``finally`` blocks have run.
    """

    def __init__(self, step: int):
        super().__init__(contract.EXIT_PREEMPTED)
        self.step = step


class StopSignals:
    """Turns SIGTERM into a flag while installed (main thread only)."""

    def __init__(self, signals: tuple[signal.Signals, ...] = (signal.SIGTERM,)):
        self._signals = signals
        self._previous: dict[signal.Signals, Any] = {}
        self.received: signal.Signals | None = None

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            log.warning("session not started in the main thread: SIGTERM will not trigger a checkpoint")
            return
        for sig in self._signals:
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signal.Signals(signum)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


class ControlWatcher:
    """Reports each new request in the control file once."""

    def __init__(self, control_file: str | Path, ignore_ids: tuple[str, ...] = ()):
        self.path = Path(control_file)
        self._seen = set(ignore_ids)
        self._warned = False

    def poll(self) -> contract.ControlRequest | None:
        try:
            request = contract.read_request(self.path)
        except ContractError as exc:
            if not self._warned:
                log.error("ignoring control file: %s", exc)
                self._warned = True
            return None
        if request is None or request.id in self._seen:
            return None
        self._seen.add(request.id)
        return request


@dataclass(frozen=True)
class Agreement:
    """What all ranks decided at one step boundary."""

    stop: bool
    checkpoint: bool
    loss: float | None
    save_failed: bool = False


def agree(
    *, stop: bool, checkpoint: bool, loss_sum: float, loss_count: int, group: dist.ProcessGroup,
    save_failed: bool = False,
) -> Agreement:
    """One all-reduce for the flags of every rank and the step's mean loss."""
    values = torch.tensor(
        [float(stop), float(checkpoint), loss_sum, float(loss_count), float(save_failed)], dtype=torch.float64
    )
    dist.all_reduce(values, op=dist.ReduceOp.SUM, group=group)
    stop_votes, checkpoint_votes, total, count, failed_votes = values.tolist()
    return Agreement(stop=stop_votes > 0, checkpoint=checkpoint_votes > 0, loss=total / count if count else None,
                     save_failed=failed_votes > 0)
