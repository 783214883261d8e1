"""The trackers' thread: training hands records over and never waits for a tracker.

Every call a backend gets is made from one background thread, fed through a bounded
queue. A backend that raises -- at open (not installed, a store it cannot reach) or later
-- is reported once, with what to do, and left out from then on; the others and the
training go on. When the queue is full (a tracker slower than the training) records are
dropped, counted, and that is reported once too.
"""

from __future__ import annotations

import logging
import queue
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runtime.tracking.backend import Backend

__all__ = ["TrackerHub"]

log = logging.getLogger("runtime.tracking")

_STOP = object()


def _stderr(message: str) -> None:
    # The worker's stderr is the launch log (launches/<id>/<node>.log): where a user looks.
    print(f"danlu tracking: {message}", file=sys.stderr, flush=True)


class TrackerHub:
    """Feeds ``backends`` from a daemon thread; see the module docstring."""

    def __init__(self, backends: list[Backend], *, resumed_step: int | None = None, max_queue: int = 10_000,
                 report: Callable[[str], None] = _stderr):
        self.backends = list(backends)
        self.problems: list[str] = []
        self._report = report
        self._resumed_step = resumed_step
        self._queue: queue.Queue[Any] = queue.Queue(max_queue)
        self._dropped = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="danlu-tracking", daemon=True)
        self._thread.start()

    # -- the training side ------------------------------------------------------------------
    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self._put(("log_metrics", step, dict(metrics)))

    def set_tags(self, step: int, tags: dict[str, str]) -> None:
        self._put(("set_tags", step, dict(tags)))

    def log_file(self, path: Path, name: str) -> None:
        self._put(("log_file", Path(path), name))

    def call(self, method: str, *args: Any) -> None:
        """Call ``method`` on every backend that has it (e.g. ``finish``)."""
        self._put((method, *args))

    def close(self, timeout_s: float = 30.0) -> bool:
        """Deliver what is queued (at most ``timeout_s``), close every backend; True when all got out."""
        try:
            self._queue.put(_STOP, timeout=timeout_s)
        except queue.Full:
            pass
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self._problem(f"gave up after {timeout_s:g} s with records still queued; training was not held up")
            return False
        return True

    def _put(self, item: tuple[Any, ...]) -> None:
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            with self._lock:
                self._dropped += 1
                first = self._dropped == 1
            if first:
                self._problem("the trackers fall behind the training; records are being dropped")

    # -- the thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        live = [b for b in self.backends if self._guard(b, "open", resumed_step=self._resumed_step)]
        while True:
            item = self._queue.get()
            if item is _STOP:
                break
            method, *args = item
            live = [b for b in live if not hasattr(b, method) or self._guard(b, method, *args)]
        for backend in live:
            self._guard(backend, "close")

    def _guard(self, backend: Backend, method: str, *args: Any, **kwargs: Any) -> bool:
        try:
            getattr(backend, method)(*args, **kwargs)
            return True
        except Exception as exc:
            self._problem(f"{backend.name} failed ({method}: {type(exc).__name__}: {exc}); "
                          "training goes on without it")
            log.debug("tracker %s failed", backend.name, exc_info=True)
            return False

    def _problem(self, message: str) -> None:
        self.problems.append(message)
        try:
            self._report(message)
        except Exception:  # noqa: BLE001 -- a report that cannot be printed must not take the thread down
            log.warning("%s", message)
