"""Why a launch's workers failed, read out of a node's torchrun log: an exit code alone says little.

A node's log holds the workers' output and then torchrun's own report. The report names the rank
that failed first ("Root Cause (first observed failure)") with its exit code or signal, but not
its error: that is in the rank's traceback above it (prefixed ``[rankN]:`` once the process group
is up), among the tracebacks of the peers that failed because it did ("Connection closed by
peer"). So the telling line is the root-cause rank's exception where its output is marked, else
the first exception the workers raised, else the signal that killed the rank (SIGKILL: the
kernel's out-of-memory killer, most often), else the workers' own output before torchrun's report:
the last line that reads as an error (``python: can't open file``), else the last thing they said
(``sys.exit("no data at ...")`` prints no traceback).
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

__all__ = ["failure_cause", "is_consequence"]

MAX_CHARS = 300

_RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:\s?")
_GLOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d")  # torchrun's own log lines
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_ROOT_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_ERROR_WORDS = ("Error", "Exception", "can't open file", "No module named", "No such file", "not found",
                "Permission denied")
_LAUNCHER_ERRORS = ("ChildFailedError",)
# What a rank says when another one failed first: its peer's connection went, or torchrun stopped it.
_CONSEQUENCES = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "by SIGTERM")


@dataclass(frozen=True)
class _Raised:
    rank: int | None  # from the [rankN]: prefix; None where the output is not marked
    line: str


def failure_cause(text: str) -> str | None:
    """The line that says why the workers failed (see the module docstring), or None."""
    lines = text.splitlines()
    if any("RendezvousTimeoutError" in line for line in lines):
        return "the rendezvous timed out (a node never joined)"
    raised = _exceptions(lines)
    root_rank, root_exit = _root_cause(lines)
    if root_rank is not None:
        for error in raised:
            if error.rank == root_rank:
                return _clip(f"rank {root_rank}: {error.line}")
    if raised:
        error = raised[0]
        return _clip(error.line if error.rank is None else f"rank {error.rank}: {error.line}")
    if root_rank is not None and root_exit is not None and root_exit < 0:
        try:
            name = signal.Signals(-root_exit).name
        except ValueError:
            name = f"signal {-root_exit}"
        hint = " (the out-of-memory killer, most often)" if name == "SIGKILL" else ""
        return f"rank {root_rank} was killed by {name}{hint}"
    said = _worker_output(lines)
    telling = [line for line in said if any(w in line for w in _ERROR_WORDS)]
    if telling:
        return _clip(telling[-1])  # the nearest the exit: earlier ones may be notes ("no checkpoint found")
    return _clip(f"its last output: {said[-1]}") if said else None


def is_consequence(cause: str) -> bool:
    """True for a cause that is most often another rank's failure seen from here (a node whose peer on
    another node crashed): the launch's cause is then that other node's, where one says more."""
    return any(marker in cause for marker in _CONSEQUENCES)


def _exceptions(lines: list[str]) -> list[_Raised]:
    """The exception line of every traceback in the log, in order, but torchrun's report of the failure."""
    found = []
    inside: int | None | bool = False  # False: not in a traceback; else the rank whose traceback it is
    for raw in lines:
        match = _RANK_PREFIX.match(raw)
        rank = int(match.group(1)) if match else None
        line = raw[match.end():] if match else raw
        if line.startswith("Traceback (most recent call last):"):
            inside = rank
            continue
        if inside is False or inside != rank or line.startswith((" ", "\t")) or not line.strip():
            continue
        if not any(w in line for w in _LAUNCHER_ERRORS):
            found.append(_Raised(rank, line.strip()))
        inside = False
    return found


def _worker_output(lines: list[str]) -> list[str]:
    """What the workers printed before torchrun reported their failure (its log lines left out)."""
    said = []
    for line in lines:
        if _GLOG.match(line):
            if "failed (exitcode" in line:
                break
            continue
        if line.strip() and not line.startswith((" ", "\t")):
            said.append(line.strip())
    return said


def _root_cause(lines: list[str]) -> tuple[int | None, int | None]:
    """The rank and exit code torchrun names as the first observed failure."""
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith("Root Cause"))
    except StopIteration:
        return None, None
    rank = code = None
    for line in lines[start + 1:]:
        if line.startswith("="):
            break
        if rank is None and (match := _ROOT_RANK.match(line)):
            rank = int(match.group(1))
        elif code is None and (match := _ROOT_EXIT.match(line)):
            code = int(match.group(1))
    return rank, code


def _clip(line: str) -> str:
    return line if len(line) <= MAX_CHARS else line[:MAX_CHARS - 1] + "…"
