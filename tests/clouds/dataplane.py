"""A cloud's data plane on this machine: every instance the API reports running becomes a local process.

The clouds' control planes are real SDK calls against local servers (moto for AWS, the
recorded-shape servers for GCE and ARM); what those servers cannot do is *boot* an
instance. :class:`DataPlane` does that part: it polls a callable that lists the running
instances carrying danlu's tags with their user data (the one cloud-specific piece, see
:class:`Running`), and for each new one

* starts a :class:`~runtime.providers.metadata_server.MetadataServer` (the node's
  metadata service, all three protocols),
* writes the user data to ``sandbox/<instance>/user-data`` and runs it as its own
  process (its shebang picks ``python3`` from ``PATH``, this venv's bin first) in its own
  session, with ``PYTHONPATH=<repo>`` (danlu importable: the install step is skipped),
  ``OMP_NUM_THREADS=1``, ``DANLU_METADATA_URL``, ``DANLU_NODE_ADDRESS=127.0.0.1``,
  ``DANLU_NODE_HOME`` = the sandbox, and the storage emulator's env (``env`` argument).

When an instance leaves the list (the API says it is not running any more) its processes
are killed -- all of them: every process of a node carries ``DANLU_DATAPLANE_NODE`` in its
environment, so torchrun's workers (their own sessions) are found too.

``interrupt(instance_id, lead_s)`` is a spot reclaim: it announces it on the node's
metadata server, then after ``lead_s`` terminates the instance through the cloud's API
(the ``terminate`` callable: moto ``terminate_instances``, the fake servers' preempt
hook) and kills its processes. Everything binds 127.0.0.1.

Usage (AWS)::

    plane = DataPlane(list_running=aws_running(ec2), terminate=lambda i: ec2.terminate_instances(InstanceIds=[i]),
                      sandbox=tmp / "nodes", env=moto_env)
    with plane:
        ...  # planner run; plane.interrupt(instance_id, lead_s=8)
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from runtime.providers.metadata_server import MetadataServer

__all__ = [
    "DataPlane",
    "Node",
    "Running",
    "processes_with",
]

log = logging.getLogger("tests.clouds.dataplane")

REPO = Path(__file__).resolve().parents[2]


def repo_pythonpath() -> str:
    """The repository first on PYTHONPATH, keeping what the test run had (a clock-ahead run's
    sitecustomize, say: a child without it would not sleep under libfaketime)."""
    return os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
MARKER = "DANLU_DATAPLANE_NODE"


@dataclass(frozen=True, slots=True)
class Running:
    """One instance the cloud's API reports running with danlu's tags."""

    id: str
    name: str
    user_data: str
    env: Mapping[str, str] = field(default_factory=dict)  # the pod's own (a Kubernetes JOB_COMPLETION_INDEX)


@dataclass
class Node:
    """One booted instance: its metadata server, sandbox and boot process."""

    instance: Running
    sandbox: Path
    server: MetadataServer
    process: object = None
    started_at: float = field(default_factory=time.time)
    gone: bool = False
    interrupted_at: float | None = None


def processes_with(marker: str) -> list[int]:
    """Live (not zombie) processes whose environment holds ``marker``."""
    found = []
    needle = marker.encode() + b"\0"  # whole entries only: sandbox i-1 is not i-10
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def _kill_all(marker: str, timeout_s: float = 10.0) -> None:
    """SIGSTOP then SIGKILL every process marked ``marker`` until none is left."""
    deadline = time.monotonic() + timeout_s
    while True:
        pids = processes_with(marker)
        if not pids:
            return
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {pids} marked {marker} survive SIGKILL")
        time.sleep(0.05)


class DataPlane:
    """Boots the instances a cloud API reports (see the module docstring)."""

    def __init__(self, *, list_running: Callable[[], list[Running]], terminate: Callable[[str], None],
                 sandbox: str | os.PathLike[str], env: Mapping[str, str] | None = None, poll_s: float = 0.5):
        self.list_running = list_running
        self.terminate = terminate
        self.sandbox = Path(sandbox)
        self.sandbox.mkdir(parents=True, exist_ok=True)
        self.env = dict(env or {})
        self.poll_s = poll_s
        self.nodes: dict[str, Node] = {}
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dataplane", daemon=True)
        self._timers: list[threading.Timer] = []

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> DataPlane:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for timer in self._timers:
            timer.cancel()
        self._thread.join(30)
        with self._lock:
            nodes = list(self.nodes.values())
        for node in nodes:
            self._kill(node)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what tests do ----------------------------------------------------------------------
    def interrupt(self, instance_id: str, lead_s: float) -> float:
        """Announce a reclaim on the node's metadata server now, terminate it ``lead_s`` later.
        Returns the reclaim time (POSIX s)."""
        with self._lock:
            node = self.nodes[instance_id]
        at = time.time() + lead_s
        node.interrupted_at = time.time()
        node.server.announce_preemption(deadline=at)
        timer = threading.Timer(lead_s, self._reclaim, args=(instance_id,))
        timer.daemon = True
        self._timers.append(timer)
        timer.start()
        return at

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}; errors: {self.errors}")
            time.sleep(0.1)

    def live(self) -> list[Node]:
        with self._lock:
            return [n for n in self.nodes.values() if not n.gone]

    def node_processes(self) -> list[int]:
        """Every process of every node still alive (empty once all are reclaimed or terminated)."""
        return [pid for node in self.nodes.values() for pid in processes_with(self._marker(node))]

    # -- internals ------------------------------------------------------------------------
    def _marker(self, node: Node) -> str:
        return f"{MARKER}={node.sandbox}"

    def _reclaim(self, instance_id: str) -> None:
        try:
            self.terminate(instance_id)
        except Exception as exc:  # noqa: BLE001 -- recorded for the test to see
            self.errors.append(f"terminate {instance_id}: {exc}")
        with self._lock:
            node = self.nodes.get(instance_id)
        if node is not None:
            self._kill(node)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                running = {r.id: r for r in self.list_running()}
            except Exception as exc:  # noqa: BLE001 -- the API server may be going down with the test
                self.errors.append(f"list: {exc}")
                running = None
            if running is not None:
                for instance in running.values():
                    if instance.id not in self.nodes:
                        self._boot(instance)
                with self._lock:
                    gone = [n for i, n in self.nodes.items() if i not in running and not n.gone]
                for node in gone:
                    self._kill(node)
            self._stop.wait(self.poll_s)

    def _boot(self, instance: Running) -> None:
        import subprocess

        sandbox = self.sandbox / instance.id.replace("/", "_")
        sandbox.mkdir(parents=True, exist_ok=True)
        script = sandbox / "user-data"
        script.write_text(instance.user_data)
        script.chmod(0o700)
        server = MetadataServer(instance_name=instance.name, on_acknowledge=lambda _e, i=instance.id: self._reclaim(i))
        server.start()
        node = Node(instance, sandbox, server)
        bin_dir = str(Path(sys.executable).parent)
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("DANLU_", "PYTEST_"))},
            **instance.env,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": repo_pythonpath(), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
            "DANLU_METADATA_URL": server.url, "DANLU_NODE_ADDRESS": "127.0.0.1", "DANLU_NODE_HOME": str(sandbox),
            **self.env, MARKER: str(sandbox),
        }
        with (sandbox / "console.log").open("ab") as out:
            node.process = subprocess.Popen(
                [str(script)], cwd=sandbox, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        with self._lock:
            self.nodes[instance.id] = node
        log.info("booted %s (%s) in %s", instance.id, instance.name, sandbox)

    def _kill(self, node: Node) -> None:
        with self._lock:
            if node.gone:
                return
            node.gone = True
        _kill_all(self._marker(node))
        if node.process is not None:
            node.process.wait(10)  # type: ignore[attr-defined]
        node.server.stop()


class Interrupter:
    """Interrupts one node of each of the first ``count`` launches once it trains: the notice
    on the node's metadata server first, the cloud's reclaim ``lead_s`` later (:meth:`DataPlane.interrupt`).

    ``victims(launch_id)`` lists the cloud's running instance ids of a launch (the last one,
    sorted, is taken); errors in the background thread land in ``errors`` for the test to assert on.
    """

    def __init__(self, plane: DataPlane, run_dir: Path, victims: Callable[[str], list[str]], *, count: int,
                 lead_s: float, after_s: float = 1.0):
        self.plane, self.run_dir, self.victims = plane, run_dir, victims
        self.count, self.lead_s, self.after_s = count, lead_s, after_s
        self.done: list[tuple[str, str]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _training(self) -> list[str]:
        path = self.run_dir / "events.jsonl"
        found = []
        for line in path.read_text().splitlines() if path.exists() else []:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line being written
            if event.get("event") == "training":
                found.append(event["launch"])
        return found

    def _loop(self) -> None:
        try:
            while not self._stop.is_set() and len(self.done) < self.count:
                training = self._training()
                todo = [launch for launch in training if launch not in {d[0] for d in self.done}]
                if todo:
                    self._stop.wait(self.after_s)
                    victim = sorted(self.victims(todo[0]))[-1]
                    self.plane.wait_for(lambda v=victim: v in self.plane.nodes, 30, f"{victim} booted")
                    self.plane.interrupt(victim, self.lead_s)
                    self.done.append((todo[0], victim))
                self._stop.wait(0.2)
        except Exception as exc:  # noqa: BLE001 -- the test asserts on it
            self.errors.append(repr(exc))
