"""One controller per run directory, and controllers that run in the background.

A controller (``planner run``, foreground or ``--detach``ed, or ``--resume``) holds an
exclusive ``fcntl.flock`` on ``RUN_DIR/controller.lock`` for as long as it lives, and
records who it is in ``RUN_DIR/controller.json``::

    {"pid": 4242, "started": 1767225600.37, "host": "laptop", "argv": [...], "format": 1}

``started`` is the process's start time as the kernel reports it (psutil), so a pid the
system has since handed to another process is never mistaken for the controller:
``planner cancel`` signals the pid only when both match, and ``planner status`` calls a
controller alive only then. The lock is what keeps a second controller out (the record
alone could be stale); the kernel drops it when the process dies however it dies, and
its descriptor is close-on-exec, so node processes the controller starts never hold it.

:func:`start_detached` starts ``python -m planner.cli run --resume RUN_DIR`` in a new
session (it outlives the terminal), with its output in ``RUN_DIR/controller.log``.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Self

import psutil
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from danlu import atomic_file
from runtime.errors import RuntimeFailure

__all__ = [
    "LOCK_FILE",
    "LOG_FILE",
    "RECORD_FILE",
    "Cancelled",
    "ControllerAlive",
    "ControllerLock",
    "ControllerRecord",
    "DetachError",
    "Liveness",
    "check_free",
    "is_alive",
    "liveness",
    "read_record",
    "signal_controller",
    "start_detached",
    "tail",
]

LOCK_FILE = "controller.lock"
RECORD_FILE = "controller.json"
LOG_FILE = "controller.log"
PRIVATE_FILE = 0o600
_START_TOLERANCE_S = 0.05  # psutil's start time is exact to the clock tick (10 ms); a reused pid differs by more


class DetachError(RuntimeFailure):
    """The background controller could not be started, found or signalled."""


class ControllerAlive(DetachError):
    """Another controller holds the run directory's lock."""


class Cancelled(KeyboardInterrupt):
    """SIGTERM (``planner cancel``) in a controller: handled like Ctrl-C, with its own cause."""


def on_sigterm(signum: int, frame: object) -> None:
    """The SIGTERM handler of a controller's process: raise :class:`Cancelled` in the main thread."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one stop at a time: the release must not be cut short
    raise Cancelled("stopped by SIGTERM (planner cancel)")


class ControllerRecord(BaseModel):
    """Who the run's controller is (``controller.json``)."""

    model_config = ConfigDict(extra="forbid")

    pid: int = Field(ge=1)
    started: float = Field(ge=0, allow_inf_nan=False)
    host: str
    argv: list[str] = Field(default_factory=list)
    format: Literal[1] = 1


def read_record(run_dir: str | os.PathLike[str]) -> ControllerRecord | None:
    """The run's controller record; None when there is none or it does not read (treated as no record)."""
    try:
        return ControllerRecord.model_validate_json(Path(run_dir, RECORD_FILE).read_bytes())
    except (OSError, ValidationError, ValueError):
        return None


def _start_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def is_alive(record: ControllerRecord) -> bool:
    """True when the recorded process still runs: same pid *and* same start time, on this host."""
    if record.host != socket.gethostname():
        return False
    started = _start_time(record.pid)
    if started is None or abs(started - record.started) > _START_TOLERANCE_S:
        return False
    try:
        return psutil.Process(record.pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@dataclass(frozen=True, slots=True)
class Liveness:
    """What is known of a run's controller: ``record`` None = never recorded (an older run)."""

    record: ControllerRecord | None
    alive: bool
    other_host: bool = False


def liveness(run_dir: str | os.PathLike[str]) -> Liveness:
    record = read_record(run_dir)
    if record is None:
        return Liveness(None, False)
    return Liveness(record, is_alive(record), other_host=record.host != socket.gethostname())


class ControllerLock:
    """The run directory's controller lock, and the record that names its holder.

    ``with ControllerLock(run_dir):`` raises :class:`ControllerAlive` when another
    process holds it; on exit the lock is released (the record stays: its pid and start
    time no longer match a live process, which is how a reader knows).
    """

    def __init__(self, run_dir: str | os.PathLike[str]):
        self.run_dir = Path(run_dir)
        self._fd: int | None = None

    def acquire(self, *, record: bool = True) -> Self:
        if not self.run_dir.is_dir():
            raise DetachError(f"{self.run_dir}: no such run directory. To fix: pass the directory `planner run` "
                              "printed.")
        fd = os.open(self.run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ControllerAlive(_alive_message(self.run_dir)) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        if record:
            pid = os.getpid()
            me = ControllerRecord(pid=pid, started=_start_time(pid) or 0.0, host=socket.gethostname(),
                                  argv=list(sys.argv))
            atomic_file.write_text(self.run_dir / RECORD_FILE, me.model_dump_json() + "\n", mode=PRIVATE_FILE)
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> Self:
        return self if self.held else self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _alive_message(run_dir: Path) -> str:
    record = read_record(run_dir)
    who = f" (pid {record.pid} on {record.host})" if record is not None else ""
    return (f"{run_dir}: the run's controller is running{who}; one controller per run. To follow it: "
            f"`planner logs {run_dir} --follow`; to stop it: `planner cancel {run_dir}`.")


def check_free(run_dir: str | os.PathLike[str]) -> None:
    """Refuse (:class:`ControllerAlive`) when a controller holds the run's lock; takes and drops it otherwise."""
    ControllerLock(run_dir).acquire(record=False).release()


def start_detached(run_dir: Path, extra_args: Sequence[str] = (), *, wait_s: float = 60.0) -> ControllerRecord | None:
    """Start the run's controller in the background; returns its record once it holds the lock.

    The controller is ``python -u -m planner.cli run --resume RUN_DIR [extra_args]`` (an argv
    list, never a shell string) in a new session, its stdin closed and its stdout and stderr
    appended to ``RUN_DIR/controller.log`` (0600). Returns None when it is still starting
    after ``wait_s`` (a loaded machine): it goes on starting.

    Raises:
        DetachError: it exited before taking the lock (the log's tail says why).
    """
    run_dir = run_dir.resolve()
    log_path = run_dir / LOG_FILE
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, PRIVATE_FILE)
    os.fchmod(fd, PRIVATE_FILE)  # a log the user made before is private too: it names the job and its spend
    argv = [sys.executable, "-u", "-m", "planner.cli", "run", "--resume", str(run_dir), *extra_args]
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fd, stderr=subprocess.STDOUT,
                                 start_new_session=True, close_fds=True, cwd=os.getcwd())
    except OSError as exc:
        raise DetachError(f"cannot start the controller ({argv[0]}): {exc}") from exc
    finally:
        os.close(fd)
    started = _start_time(child.pid)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        record = read_record(run_dir)
        if record is not None and record.pid == child.pid and started is not None \
                and abs(record.started - started) <= _START_TOLERANCE_S:
            return record
        code = child.poll()
        if code is not None:
            raise DetachError(f"the background controller exited ({code}) before it started the run:\n"
                              f"{tail(log_path, 10)}\n(the whole log: {log_path}). To fix: remove the cause, then "
                              f"`planner run --resume {run_dir} --detach`.")
        time.sleep(0.1)
    return None


def tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def signal_controller(record: ControllerRecord, signum: int) -> bool:
    """Send ``signum`` to the recorded controller, verified by pid and start time; False when it is gone.

    psutil checks again, as it sends, that the pid still has the start time it had when
    the ``Process`` was made, so a pid reused in between is not signalled either.
    """
    if not is_alive(record):
        return False
    try:
        psutil.Process(record.pid).send_signal(signum)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied as exc:
        raise DetachError(f"controller pid {record.pid} belongs to another user ({exc}); run planner cancel as "
                          "the user who started the run.") from exc
    return True
