"""The job's ``[run].entrypoint`` as every provider runs it: under torchrun, in the directory `planner run`
was started in -- on this machine, or unpacked from that directory's code bundle on a cloud node.

torchrun runs a Python script, or a ``-m`` module, with its own interpreter, so ``["python", "train.py",
"--lr", "0.1"]`` becomes ``torchrun ... train.py --lr 0.1``; any other argv runs with ``--no-python``.
:func:`missing_script` finds, before anything is provisioned, an entrypoint whose script the nodes will
not find: that run would fail every launch at step 0, each one billed, until ``max_restarts`` ran out.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["PYTHON_NAMES", "missing_script", "torchrun_entry"]

PYTHON_NAMES = ("python", "python3", Path(sys.executable).name)


def torchrun_entry(entrypoint: Sequence[str]) -> list[str]:
    """What follows torchrun's own options: the script (or ``-m module``) and its arguments, after
    ``--no-python`` where the entrypoint does not start with a Python interpreter."""
    entry = [str(a) for a in entrypoint]
    if entry and Path(entry[0]).name in PYTHON_NAMES and len(entry) > 1:
        return entry[1:]
    return ["--no-python", *entry]


def missing_script(entrypoint: Sequence[str], cwd: Path, *, bundled: bool, job_dir: Path | None = None,
                   resuming: bool = False) -> str | None:
    """Why the nodes would not find the entrypoint's script, with the fix; None when they would, or when
    it runs no file of the working directory (a ``-m`` module, a command on PATH, a path on the node).

    ``bundled``: the nodes run the code bundle of ``cwd`` (:mod:`runtime.providers.bundle`), which
    leaves out what ``.gitignore`` ignores. ``resuming``: a run that keeps the entrypoint and the
    directory it started with, so the fix is to put the script back.
    """
    entry = torchrun_entry(entrypoint)
    no_python = entry[0] == "--no-python"
    script = entry[1] if no_python and len(entry) > 1 else None if no_python else entry[0]
    if script is None or script.startswith("-") or (no_python and "/" not in script):
        return None  # a module, an interpreter option, or a command looked up on PATH
    path = Path(script)
    if path.is_absolute() and bundled:
        return None  # a file of the node's image, not of this machine
    target = path if path.is_absolute() else cwd / path
    if not target.is_file():
        where = "" if path.is_absolute() else f" in {cwd}, where `planner run` was started and the workers run"
        if resuming:
            return (f"[run].entrypoint runs {script!r}, which is no longer a file{where}. To fix: put it back "
                    "there (a resumed run keeps the entrypoint and the directory it started with).")
        hint = ""
        if job_dir is not None and not path.is_absolute():
            # The usual slip: started from elsewhere than the project the job file belongs to.
            found = next((d for d in (job_dir, *job_dir.parents[:3]) if d != cwd and (d / path).is_file()), None)
            if found is not None:
                hint = f"; it is there from {found}: start `planner run` in that directory"
        return (f"[run].entrypoint runs {script!r}, which is not a file{where}. To fix: correct the path in "
                f"entrypoint{hint or ', or start `planner run` where it is'}.")
    if no_python and not os.access(target, os.X_OK):
        return (f"[run].entrypoint runs {script!r}, which is not executable. To fix: `chmod +x {script}`, or "
                "run it through its interpreter (entrypoint = [\"bash\", ...]).")
    if bundled and not path.is_absolute():
        from runtime.providers import bundle

        relative = os.path.normpath(script)
        if relative.startswith(".."):
            return (f"[run].entrypoint runs {script!r}, outside {cwd}, the directory shipped to the nodes. To fix: "
                    "start `planner run` from a directory that holds it.")
        if relative not in set(bundle.list_files(cwd)):
            return (f"[run].entrypoint runs {script!r}, which the code bundle of {cwd} leaves out (.gitignore "
                    "ignores it, or it is a link out of the tree). To fix: stop ignoring it, or move it into the tree.")
    return None
