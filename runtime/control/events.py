"""The run's event log: ``<run_dir>/events.jsonl``, one JSON object per line.

Every line has ``seq`` (0, 1, 2, ... across controller restarts), ``event`` (its kind),
``t`` (simulated POSIX seconds: the clock billing uses) and ``wall`` (real POSIX
seconds), then the event's own fields::

    {"seq": 7, "event": "node_up", "t": 1796040000.0, "wall": 1796037612.4,
     "node": "l-2-n0", "pool": "gcp:us-central1/us-central1-a:n1-standard-4-t4",
     "purchase": "spot", "hourly_usd": 0.18}

Each line is written with one ``write`` on an ``O_APPEND`` descriptor and fsync'd, so a
SIGKILL can at worst leave the last line torn; :func:`read_events` skips such a line.

Kinds: ``run_started``, ``run_resumed``, ``plan``, ``decision``, ``replan``,
``deadline_miss`` (only a late plan is left: ``action`` continue or stop), ``node_up``,
``node_down``, ``provision_failed`` (no capacity), ``launch``, ``training``, ``chaos``,
``notice``, ``checkpoint_request``, ``launch_end``, ``throughput``, ``preemption``,
``failure``, ``budget_cap``, ``recovered``, ``run_end``, ``tracking_problem`` (a tracker could not
be set up, rewound or given the run report; the run goes on, its end is unchanged),
``tracking_rewind`` (before a resuming launch, a tracker's values past its step were set apart),
``held_changed`` (`--resume --held-from` gave the run other held reservations: ``added``, ``removed``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "FILENAME",
    "EventLog",
    "read_events",
]

FILENAME = "events.jsonl"


def read_events(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every complete event in the log, oldest first (a torn last line is skipped)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    events = []
    for line in text.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


class EventLog:
    """Appends events to ``<run_dir>/events.jsonl``; ``clock`` gives the simulated time, ``wall`` the real one."""

    def __init__(self, run_dir: str | os.PathLike[str], *, clock: Callable[[], float],
                 wall: Callable[[], float] = time.time,
                 listener: Callable[[dict[str, Any]], None] | None = None):
        self.path = Path(run_dir) / FILENAME
        self.clock = clock
        self.wall = wall
        self.listener = listener
        existing = read_events(self.path)
        self._seq = existing[-1]["seq"] + 1 if existing else 0
        self._repair_torn_tail()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _repair_torn_tail(self) -> None:
        # A line torn by a SIGKILL would glue itself to the next event: end it first.
        try:
            with self.path.open("rb") as f:
                f.seek(-1, os.SEEK_END)
                torn = f.read(1) != b"\n"
        except (FileNotFoundError, OSError):
            return
        if torn:
            with self.path.open("ab") as f:
                f.write(b"\n")

    def emit(self, event: str, *, t: float | None = None, **fields: Any) -> dict[str, Any]:
        """Append one event (``t`` defaults to the simulated now) and return it."""
        record = {"seq": self._seq, "event": event, "t": self.clock() if t is None else t, "wall": self.wall(),
                  **fields}
        os.write(self._fd, (json.dumps(record, default=str) + "\n").encode("utf-8"))
        os.fsync(self._fd)
        self._seq += 1
        if self.listener is not None:
            self.listener(record)
        return record

    def close(self) -> None:
        os.close(self._fd)
