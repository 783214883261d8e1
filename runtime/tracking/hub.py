"""The trackers' threads: training hands records over and never waits for a tracker.

Each backend has its own daemon thread, fed through its own bounded queue, and every
call it gets is made from that thread: a tracker that is slow to take records, or hung in
a call, holds up neither the training nor the other trackers. The backends are opened one
after another, in order: two heavy imports (MLflow's, W&B's) in parallel threads fight for
the GIL on every file they read and, on a loaded machine, both finish far later than one
after the other. A backend still opening after ``open_grace_s`` no longer holds up the next.
A backend that raises -- at open (not installed, a store it cannot reach) or later -- is
reported once, with what to do, and left out from then on; the others and the training go
on. When a backend's queue is full (a tracker slower than the training) its records are
dropped, counted, and that is reported once for that tracker.
"""

from __future__ import annotations

import logging
import queue
import sys
import threading
import time
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


class _Feed:
    """One backend, its queue and the thread that makes every call it gets."""

    def __init__(self, backend: Backend, hub: TrackerHub, max_queue: int, previous: _Feed | None):
        self.backend = backend
        self.queue: queue.Queue[Any] = queue.Queue(max_queue)
        self.dropped = 0
        self.opening = threading.Event()
        self.opened = threading.Event()
        self._previous = previous
        self.thread = threading.Thread(target=self._run, args=(hub,), name=f"danlu-tracking-{backend.name}",
                                       daemon=True)

    def _run(self, hub: TrackerHub) -> None:
        if self._previous is not None:  # its turn: the one before has opened, or overrun its grace
            self._previous.opening.wait()
            self._previous.opened.wait(hub.open_grace_s)
        self.opening.set()
        try:
            live = hub._guard(self.backend, "open", resumed_step=hub._resumed_step)
        finally:
            self.opened.set()
        while True:
            item = self.queue.get()
            if item is _STOP:
                break
            method, *args = item
            if live and hasattr(self.backend, method):
                live = hub._guard(self.backend, method, *args)
        if live:
            hub._guard(self.backend, "close")


class TrackerHub:
    """Feeds each of ``backends`` from its own daemon thread; see the module docstring."""

    def __init__(self, backends: list[Backend], *, resumed_step: int | None = None, max_queue: int = 10_000,
                 open_grace_s: float = 60.0, report: Callable[[str], None] = _stderr):
        self.backends = list(backends)
        self.problems: list[str] = []
        self._report = report
        self._resumed_step = resumed_step
        self._lock = threading.Lock()
        self.open_grace_s = open_grace_s
        self._feeds: list[_Feed] = []
        for backend in self.backends:
            self._feeds.append(_Feed(backend, self, max_queue, self._feeds[-1] if self._feeds else None))
        for feed in self._feeds:
            feed.thread.start()

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
        """Deliver what is queued and close every backend, all within ``timeout_s`` together;
        True when all got out."""
        deadline = time.monotonic() + timeout_s
        for feed in self._feeds:
            try:
                feed.queue.put(_STOP, timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Full:
                pass
        stuck = []
        for feed in self._feeds:
            feed.thread.join(max(deadline - time.monotonic(), 0.0))
            if feed.thread.is_alive():
                stuck.append(feed.backend.name)
        if stuck:
            self._problem(f"gave up on {', '.join(stuck)} after {timeout_s:g} s with records still queued; "
                          "training was not held up")
            return False
        return True

    def _put(self, item: tuple[Any, ...]) -> None:
        for feed in self._feeds:
            try:
                feed.queue.put_nowait(item)
            except queue.Full:
                with self._lock:
                    feed.dropped += 1
                    first = feed.dropped == 1
                if first:
                    self._problem(f"{feed.backend.name} falls behind the training; its records are being dropped")

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
        with self._lock:
            self.problems.append(message)
        try:
            self._report(message)
        except Exception:  # noqa: BLE001 -- a report that cannot be printed must not take the thread down
            log.warning("%s", message)
