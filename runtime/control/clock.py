"""The run's clocks: real time for real runs, a manual clock for tests that must not wait.

Billing, deadlines and plans run on *simulated* time, ``scale`` simulated seconds per
real second from ``origin`` (a real POSIX time), so a plan of hours can be exercised in
minutes. At scale 1 simulated time is real time.

Everything that waits or stamps a time goes through one :class:`Clock`: the controller,
the providers (node start times, scheduled reclaims) and the fake provider's workers
(their ``status.json`` times). :class:`WallClock` reads the system clock and sleeps for
real; :class:`ManualClock` starts at ``origin`` and moves only when someone sleeps on it,
so a test of a six-hour run takes milliseconds and gives the same answer every time.

A simulated run (scale > 1 on this machine) can *pause* its simulated time: while this
host starts the workers of a launch, simulated time stands still (:meth:`Clock.pause`,
:meth:`Clock.resume`). A cloud's start-up is already in the plan (``restart_minutes``);
the host's would otherwise be billed ``scale`` times over and eat the deadline -- 15 s
of a busy laptop's torchrun start-up is 15 simulated minutes at ``--time-scale 60``.
Pauses are wall intervals, kept in the run state, so a resumed controller maps every
past real time to the same simulated time.
"""

from __future__ import annotations

import abc
import threading
import time

__all__ = [
    "Clock",
    "ManualClock",
    "StopSignal",
    "StoppableClock",
    "WallClock",
]


class Clock(abc.ABC):
    """Real time (``wall``, ``monotonic``, ``sleep``) and the run's simulated time derived from it."""

    def __init__(self, origin: float, scale: float = 1.0):
        if not scale > 0:
            raise ValueError(f"clock scale {scale!r} must be > 0")
        self.origin = float(origin)
        self.scale = float(scale)
        self.pauses: list[list[float | None]] = []
        """Real intervals ``[start, end]`` in which simulated time stood still (end None: still paused)."""

    @abc.abstractmethod
    def wall(self) -> float:
        """Real POSIX seconds (what processes stamp their files with)."""

    @abc.abstractmethod
    def monotonic(self) -> float:
        """Real seconds for measuring intervals."""

    @abc.abstractmethod
    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of real time."""

    def now(self) -> float:
        """Simulated POSIX seconds: the time billing and deadlines use."""
        return self.sim(self.wall())

    def sim(self, real: float) -> float:
        paused = 0.0
        for start, end in self.pauses:
            assert start is not None
            if start < real:
                paused += min(real, end if end is not None else real) - start
        return self.origin + (real - self.origin - paused) * self.scale

    @property
    def paused(self) -> bool:
        return bool(self.pauses) and self.pauses[-1][1] is None

    def pause(self) -> None:
        """Stop simulated time from now until :meth:`resume` (a no-op while paused)."""
        if not self.paused:
            self.pauses.append([self.wall(), None])

    def resume(self) -> None:
        """Let simulated time run again (a no-op when not paused)."""
        if self.paused:
            self.pauses[-1][1] = max(self.wall(), float(self.pauses[-1][0] or 0.0))

    def elapsed_hours(self) -> float:
        return (self.now() - self.origin) / 3600.0

    def real_seconds(self, sim_seconds: float) -> float:
        return sim_seconds / self.scale

    def __repr__(self) -> str:
        return f"{type(self).__name__}(origin={self.origin!r}, scale={self.scale!r})"


class WallClock(Clock):
    """The system clock."""

    def wall(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


class StopSignal:
    """A stop that reaches controllers running in threads (Ctrl-C and SIGTERM reach the main thread only)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.error: KeyboardInterrupt | None = None

    def set(self, error: KeyboardInterrupt) -> None:
        self.error = error
        self._event.set()

    def wait(self, seconds: float) -> bool:
        """Sleep ``seconds`` or until the stop comes; True when it has."""
        return self._event.wait(max(0.0, seconds))


class StoppableClock(WallClock):
    """The system clock, whose next sleep after ``stop`` is set raises the stop's KeyboardInterrupt.

    A controller sleeps only through its clock, so the stop lands where Ctrl-C would in the
    main thread, and the controller cancels as it does on Ctrl-C: the workers checkpoint, the
    nodes are released, the run ends "cancelled".  It is raised once: the sleeps of that
    checkpoint-and-release are real ones again.
    """

    def __init__(self, origin: float, scale: float = 1.0, *, stop: StopSignal):
        super().__init__(origin, scale)
        self._stop = stop
        self._raised = False

    def sleep(self, seconds: float) -> None:
        if self._raised:
            time.sleep(max(0.0, seconds))
        elif self._stop.wait(seconds):
            self._raised = True
            error = self._stop.error
            assert error is not None  # set() sets both
            raise type(error)(*error.args)  # one instance per thread: a traceback is per raise


class ManualClock(Clock):
    """Starts at real time ``at`` (default ``origin``); :meth:`sleep` and :meth:`advance` move it, nothing else.

    A resumed run gets a clock that starts where the last one stopped (``at``), with the
    run's ``origin``: time never runs backwards across a resume.
    """

    def __init__(self, origin: float = 1_800_000_000.0, scale: float = 1.0, *, at: float | None = None):
        super().__init__(origin, scale)
        self._real = self.origin if at is None else float(at)

    def wall(self) -> float:
        return self._real

    def monotonic(self) -> float:
        return self._real

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self._real += max(0.0, seconds)
