"""Launch real ``torchrun`` jobs from tests, interrupt them like a cloud would, reap them.

Reusable by any test that needs a live training job (the controller's tests too)::

    launcher = Launcher()                     # or the ``launcher`` fixture in conftest.py
    job = launcher.torchrun(WORKER, ["--steps", "40"], run_dir=tmp_path, nproc=2)
    job.wait_for_progress(10)
    job.signal_agent(signal.SIGTERM)          # a spot reclaim: torchrun forwards SIGTERM
    job.kill_node()                           # a host vanishing: SIGKILL to every process
    launcher.reap()                           # always, even when the test failed

torchrun starts its workers in their own POSIX sessions, so a signal to the agent's
process group never reaches them and a SIGKILLed agent leaves them running; the helpers
therefore find the workers through ``/proc`` and signal each one by pid.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from runtime.training.contract import LaunchContract

REPO_ROOT = Path(__file__).resolve().parents[2]


def descendants(pid: int) -> list[int]:
    """All live descendants of ``pid`` (children first), read from ``/proc``."""
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if child not in found:
                    found.append(child)
                    frontier.append(child)
    return found


def _signal_pid(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


@dataclass
class TorchrunJob:
    """One ``torchrun`` agent and its workers."""

    process: subprocess.Popen[bytes]
    run_dir: Path
    log_path: Path
    known_pids: set[int] = field(default_factory=set)

    def pids(self) -> list[int]:
        """The agent and every live descendant (remembered, so orphans are not lost)."""
        live = [self.process.pid, *descendants(self.process.pid)]
        self.known_pids.update(live)
        return live

    def progress(self) -> int:
        """The last step the worker reported in ``run_dir/progress`` (-1 before any)."""
        try:
            return int((self.run_dir / "progress").read_text() or -1)
        except (FileNotFoundError, ValueError):
            return -1

    def wait_for_progress(self, step: int, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pids()
            reached = self.progress()
            if reached >= step:
                return reached
            if self.process.poll() is not None:
                raise AssertionError(f"job exited with {self.process.returncode} before step {step}:\n{self.log()}")
            time.sleep(0.005)
        raise AssertionError(f"job did not reach step {step} within {timeout}s:\n{self.log()}")

    def signal_agent(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """What a spot reclaim does: the signal goes to torchrun, which forwards it."""
        self.pids()
        _signal_pid(self.process.pid, sig)

    def kill_node(self) -> None:
        """What a vanished host does: SIGKILL to the agent and every worker at once."""
        for pid in reversed(self.pids()):
            _signal_pid(pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self._wait_gone()

    def wait(self, timeout: float = 120.0) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.reap()
            raise AssertionError(f"job still running after {timeout}s:\n{self.log()}") from None

    def reap(self) -> None:
        """Kill whatever is left of the job, orphaned workers included."""
        pids = self.pids() if self.process.poll() is None else []
        for pid in self.known_pids | set(pids):
            _signal_pid(pid, signal.SIGKILL)
        if self.process.poll() is None:
            self.process.wait(timeout=30)
        self._wait_gone()

    def _wait_gone(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not any(is_alive(pid) for pid in self.known_pids):
                return
            time.sleep(0.02)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-6000:]
        except FileNotFoundError:
            return ""


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


def is_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie awaiting its reaper counts as gone)."""
    return _state(pid) != "Z"


class Launcher:
    """Starts jobs and remembers them so that :meth:`reap` can clean up after a test."""

    def __init__(self) -> None:
        self.jobs: list[TorchrunJob] = []

    def torchrun(
        self,
        script: str | Path,
        args: list[str],
        *,
        run_dir: Path,
        nproc: int = 2,
        contract: LaunchContract | None = None,
        env: dict[str, str] | None = None,
    ) -> TorchrunJob:
        """Start ``torchrun --standalone`` (agent-chosen port, never a fixed one)."""
        run_dir.mkdir(parents=True, exist_ok=True)
        terms = contract or LaunchContract(checkpoint_dir=str(run_dir / "ckpt"), run_dir=str(run_dir))
        environment = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "GLOO_SOCKET_IFNAME": "lo",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
            "DANLU_PG_TIMEOUT_S": "60",
            **terms.to_env(),
            **(env or {}),
        }
        command = [
            sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "--max-restarts=0", "--monitor-interval=0.05", str(script), *args,
        ]
        log_path = run_dir / f"torchrun-{len(self.jobs)}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command, cwd=REPO_ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        job = TorchrunJob(process, run_dir, log_path)
        self.jobs.append(job)
        return job

    def reap(self) -> None:
        for job in self.jobs:
            job.reap()
