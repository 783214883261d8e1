"""The processes of one local node: found by a token in their environment, killed as a whole.

torchrun's workers run in their own sessions, and a worker that outlives its agent is
reparented to init, so neither the process group nor the parent chain finds every process
of a node once the controller is gone. What every one of them keeps is the environment it
was started with: the local provider puts :data:`TOKEN_ENV` into the agent's, torchrun
copies it into each worker's, and the token is written into the run state before the agent
starts. A controller that was SIGKILLed at any moment can therefore still find and kill
all of a node's processes (the way Jenkins' ProcessTreeKiller finds a build's processes).

Processes are psutil handles: a pid is only ever signalled while it is still the process
that was found (psutil checks the start time), and a process that vanishes in the middle
of a walk counts as gone, never as an error.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable

import psutil

__all__ = ["TOKEN_ENV", "alive", "kill_all", "kill_found", "tagged", "tree"]

TOKEN_ENV = "DANLU_NODE_TOKEN"
"""Environment variable holding the node's token in every process of a local node."""

_GONE = (psutil.NoSuchProcess, psutil.ZombieProcess)


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except _GONE:
        return False
    except psutil.AccessDenied:
        return True


def tree(pid: int) -> list[psutil.Process]:
    """``pid`` and its live descendants, parents first (empty when ``pid`` is gone)."""
    try:
        root = psutil.Process(pid)
        found = [root, *root.children(recursive=True)]
    except _GONE:
        return []
    return [p for p in found if _running(p)]


def tagged(token: str) -> list[psutil.Process]:
    """Every live process of this user whose environment carries ``token``."""
    found = []
    for process in psutil.process_iter(["environ"]):
        try:
            environ = process.info.get("environ") or {}
        except _GONE:
            continue
        if environ.get(TOKEN_ENV) == token and _running(process):
            found.append(process)
    return found


def alive(processes: Iterable[psutil.Process]) -> list[psutil.Process]:
    """Those of ``processes`` still running (and still the process that was found)."""
    return [p for p in processes if _running(p)]


def kill_all(processes: Iterable[psutil.Process], *, timeout_s: float = 10.0) -> list[int]:
    """SIGKILL ``processes``; returns the pids still running after ``timeout_s``.

    All are stopped first (SIGSTOP), so none forks or restarts a sibling while the rest
    are killed.
    """
    targets = alive(processes)
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for process in targets:
            try:
                process.send_signal(sig)
            except (*_GONE, psutil.AccessDenied):
                continue
    _, left = psutil.wait_procs(targets, timeout=timeout_s)
    return [p.pid for p in left if _running(p)]


def kill_found(find: Callable[[], Iterable[psutil.Process]], *, rounds: int = 5, timeout_s: float = 10.0) -> list[int]:
    """SIGKILL what ``find()`` returns until it returns nothing alive; returns the pids that survived.

    One walk is a snapshot: a process forked after it (torchrun starting a worker, a worker
    starting a data loader) and before its parent is stopped is in no list, outlives the kill and
    goes on training with nobody watching. Walking again after each kill finds it by its token.
    """
    for _ in range(rounds):
        targets = alive(find())
        if not targets:
            return []
        left = kill_all(targets, timeout_s=timeout_s)
        if left:
            return left
    return [p.pid for p in alive(find())]
