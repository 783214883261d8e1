"""The controller's side of the workers' contract (:mod:`runtime.training.contract`): what rank 0
reports in ``work/status.json``, and the checkpoint and stop requests written to ``work/control.json``."""

from __future__ import annotations

import math
from pathlib import Path

from runtime.control.clock import Clock
from runtime.control.events import EventLog
from runtime.training import contract


class Workers:
    """The workers of the run's launches, as its work directory shows them (one launch at a time)."""

    def __init__(self, work_dir: Path, *, clock: Clock, events: EventLog):
        self.work_dir = work_dir
        self.clock = clock
        self.events = events
        self._stop_asked: tuple[str, float] | None = None  # (request id, simulated time asked)

    def status(self, launch_id: str) -> contract.RunStatus | None:
        """What the launch's workers last reported; None before their first report or after another launch's."""
        try:
            status = contract.read_status(self.work_dir)
        except contract.ContractError:
            return None
        return status if status is not None and status.attempt == launch_id else None

    def state(self, launch_id: str) -> str | None:
        status = self.status(launch_id)
        return status.state if status is not None else None

    def save_write_s(self, launch_id: str) -> float | None:
        """The longest checkpoint write the launch's workers reported (real seconds); None before one."""
        status = self.status(launch_id)
        write = status.save_write_s if status is not None else None
        if isinstance(write, (int, float)) and math.isfinite(write) and write >= 0:
            return float(write)
        return None  # none yet, or not a duration

    def stop_wait_s(self, launch_id: str, floor_s: float) -> float:
        """How long to wait for a stop's checkpoint (real seconds): ``floor_s``, or where longer two of
        the launch's checkpoint writes -- one that may be in flight, then the stop's own save."""
        write = self.save_write_s(launch_id)
        return floor_s if write is None else max(floor_s, 2 * write)

    def request(self, action: contract.Action, reason: str) -> str:
        """Ask the workers to checkpoint (and, for "stop", to exit after it); returns the request's id."""
        request = contract.request_checkpoint(self.work_dir / contract.CONTROL_FILE, action, reason=reason)
        if action == "stop":
            self._stop_asked = (request.id, self.clock.now())
        self.events.emit("checkpoint_request", action=action, reason=reason, request=request.id)
        return request.id

    def stop_hours(self, launch_id: str) -> float | None:
        """How long the launch's honoured stop request has taken, from the request to now (billed hours);
        None when the launch honoured none. The request is forgotten either way."""
        # On the run's clock, not the file's mtime: an injected (simulated or manual) clock and the
        # file system's clock need not agree.
        asked, self._stop_asked = self._stop_asked, None
        status = self.status(launch_id)
        if asked is None or status is None or status.state != "preempted" or status.request_id != asked[0]:
            return None
        return max(0.0, self.clock.now() - asked[1]) / 3600

    def forget_requests(self) -> None:
        """Drop a request the last launch never acted on: it must not stop the next one."""
        (self.work_dir / contract.CONTROL_FILE).unlink(missing_ok=True)
