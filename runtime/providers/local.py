"""The local provider: every node is a torchrun agent on this machine.

Each simulated node gets

* a torchrun agent with ``nproc_per_node`` worker processes, started in its own POSIX
  session; the nodes of one launch meet through a c10d rendezvous over a file store in
  the launch directory (no port to pick, so nothing to race for), with a fresh
  rendezvous id per launch;
* a metadata server on 127.0.0.1 (:class:`runtime.providers.metadata_server.MetadataServer`)
  speaking its pool's cloud protocol, and the real notice watcher of that cloud
  (:mod:`runtime.providers.notices`) polling it.

Faults are the provider's own: given a :class:`runtime.control.chaos.ChaosPlan`, it
reclaims a spot node of a training launch (one per launch) whenever the plan says one
is due, checked at every :meth:`LocalProvider.poll`. :meth:`LocalProvider.preempt` does
the reclaim: it announces it on the node's metadata server and hard-kills the node when
the lead time is up (at once if an Azure event is acknowledged). A pool the plan's
``refuse=`` names is refused at :meth:`LocalProvider.provision` with the
:class:`~runtime.providers.cloud_api.CapacityError` a cloud without capacity raises. ``hold_nodes`` keeps
some nodes from ever starting their agent, which is how a stuck rendezvous looks.

Every process of a node carries the node's token in its environment
(:mod:`runtime.providers.process_tree`); the token is in the node's handle, which the
controller saves before the agent starts, so a controller that was SIGKILLed at any moment
can still kill every process of its nodes -- torchrun's workers live in their own sessions,
and a dead agent leaves them running. Pids seen (with their start times) are also written
to ``<state_dir>/<node>.pids`` as they appear.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil

from danlu import atomic_file
from pricing.pool import Pool
from runtime.control.chaos import ChaosFired, ChaosPlan
from runtime.control.clock import Clock, WallClock
from runtime.providers import notices, process_tree
from runtime.providers.base import (
    LaunchSpec,
    Node,
    NodeState,
    NodeStatus,
    Provider,
    ProviderContext,
    ProviderError,
    child_environment,
)
from runtime.providers.cloud_api import CapacityError
from runtime.providers.entrypoint import torchrun_entry
from runtime.providers.metadata_server import MetadataServer
from runtime.providers.notices import Notice, NoticeWatch

__all__ = ["LocalProvider", "is_running", "torchrun_argv"]

log = logging.getLogger("runtime.providers.local")



def is_running(pid: int) -> bool:
    """True while ``pid`` is a live (not zombie) process."""
    return bool(process_tree.alive(process_tree.tree(pid)[:1]))


def torchrun_argv(launch: LaunchSpec, nnodes: int, rdzv_endpoint: str) -> list[str]:
    """The agent command line: c10d rendezvous over a file store, no restarts in place."""
    argv = [
        sys.executable, "-m", "torch.distributed.run",
        f"--nnodes={nnodes}", f"--nproc-per-node={launch.nproc_per_node}",
        "--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}", f"--rdzv-id={launch.rdzv_id}",
        f"--rdzv-conf=store_type=file,join_timeout={launch.rdzv_timeout_s:g},last_call_timeout=1",
        "--max-restarts=0", "--monitor-interval=0.1", f"--shutdown-timeout={launch.shutdown_timeout_s:g}",
    ]
    return argv + torchrun_entry(launch.entrypoint)


@dataclass
class _LocalNode:
    node: Node
    server: MetadataServer
    watch: NoticeWatch
    pid_file: Path
    token: str
    process: subprocess.Popen[bytes] | None = None
    known: dict[int, float] = field(default_factory=dict)
    notices: list[Notice] = field(default_factory=list)
    reclaim_at: float | None = None
    reclaimed: bool = False
    terminated: bool = False


class LocalProvider(Provider):
    """Nodes as local torchrun agents (see the module docstring).

    Args:
        state_dir: where pid files and rendezvous files go (inside the run directory).
        time_scale: simulated seconds per real second (when no ``clock`` is given); notice
            polling keeps up with the scaled lead times.
        clock: the run's clock (real time: these are real processes).
        chaos: the preemptions to inject (None: none).
        notice_protocol: speak this cloud's protocol on every node (default: the chaos
            plan's, else the pool's).
        hold_nodes: node indices whose agent is never started (a node that never joins).
    """

    name = "local"
    host_startup = True

    def __init__(
        self, state_dir: str | Path, *, time_scale: float = 1.0, clock: Clock | None = None,
        chaos: ChaosPlan | None = None, notice_protocol: str | None = None, hold_nodes: Collection[int] = (),
    ):
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.clock = clock or WallClock(time.time(), time_scale)
        self.time_scale = self.clock.scale
        self.chaos = chaos
        self.notice_protocol = notice_protocol or (chaos.notice if chaos else None)
        self.hold_nodes = frozenset(hold_nodes)
        self._nodes: dict[str, _LocalNode] = {}
        self._training: set[str] = set()
        self._lock = threading.Lock()

    @classmethod
    def from_context(cls, context: ProviderContext) -> LocalProvider:
        return cls(context.state_dir, clock=context.clock, chaos=context.chaos, hold_nodes=context.hold_nodes)

    def protocol(self, pool: Pool) -> str:
        """The notice protocol a node of ``pool`` speaks."""
        if self.notice_protocol:
            return self.notice_protocol
        return pool.cloud if pool.cloud in notices.NOTICE_LEAD_S else "aws"

    def lead_s(self, pool: Pool) -> float:
        """Real seconds between a notice and the reclaim, for ``pool``'s protocol."""
        return notices.NOTICE_LEAD_S[self.protocol(pool)] / self.time_scale

    # -- Provider ---------------------------------------------------------------------------
    def provision(self, pool: Pool, *, nodes: int, launch_id: str) -> list[Node]:
        if self.chaos is not None and self.chaos.spec.refuses(pool):
            raise CapacityError(f"InsufficientInstanceCapacity: no {pool.instance_type} {pool.purchase} capacity in "
                                f"{pool.cloud}:{pool.location} (--chaos refuse)", code="InsufficientInstanceCapacity")
        provisioned: list[Node] = []
        protocol = self.protocol(pool)
        interval = max(0.05, min(5.0, self.lead_s(pool) / 10))
        for index in range(nodes):
            node_id = f"{launch_id}-n{index}"
            server = MetadataServer(instance_name=node_id, on_acknowledge=lambda _e, i=node_id: self._expedite(i))
            server.start()
            seen: list[Notice] = []
            watcher = notices.watcher_for(protocol, server.url, resource_name=node_id, wait_s=min(interval * 4, 2.0))
            watch = NoticeWatch(watcher, interval_s=interval, on_notice=seen.append).start()
            pid_file = self.state_dir / f"{node_id}.pids"
            token = f"{node_id}-{uuid.uuid4().hex}"
            node = Node(
                id=node_id, index=index, pool=pool, provisioned_at=self.clock.wall(),
                handle={"metadata_url": server.url, "protocol": protocol, "pid_file": str(pid_file), "token": token},
            )
            local = _LocalNode(node, server, watch, pid_file, token, notices=seen)
            _write_pids(local)
            with self._lock:
                self._nodes[node_id] = local
            provisioned.append(node)
        return provisioned

    def wait_ready(self, nodes: Sequence[Node], *, timeout_s: float) -> None:
        for node in nodes:
            if node.id not in self._nodes:
                raise ProviderError(f"node {node.id} was not provisioned by this provider")

    def run(self, nodes: Sequence[Node], launch: LaunchSpec) -> list[Node]:
        launch.log_dir.mkdir(parents=True, exist_ok=True)
        endpoint = str(launch.log_dir / f"rdzv-{launch.rdzv_id}")
        argv = torchrun_argv(launch, len(nodes), endpoint)
        env = {
            **child_environment(), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
            "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": f"{launch.shutdown_timeout_s:g}", **launch.env,
        }
        started = []
        for node in nodes:
            local = self._nodes[node.id]
            if node.index in self.hold_nodes:
                log.info("node %s held back: its agent never starts", node.id)
                started.append(node)
                continue
            log_path = launch.log_dir / f"{node.id}.log"
            with log_path.open("ab") as out:
                local.process = subprocess.Popen(
                    [*argv], cwd=launch.cwd, env={**env, "DANLU_NODE_ID": node.id, process_tree.TOKEN_ENV: local.token},
                    stdout=out,
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                )
            self._remember(local)
            node = replace(node, handle={**node.handle, "agent_pid": local.process.pid, "log": str(log_path)})
            local.node = node
            started.append(node)
        return started

    def poll(self, nodes: Sequence[Node]) -> list[NodeStatus]:
        self._inject_chaos(nodes)
        out = []
        for node in nodes:
            local = self._nodes[node.id]
            if local.terminated:
                out.append(NodeStatus(node.id, NodeState.TERMINATED))
                continue
            if local.reclaim_at is not None and not local.reclaimed and self.clock.wall() >= local.reclaim_at:
                self._kill(local)
                local.reclaimed = True
            if local.reclaimed:
                rc = local.process.returncode if local.process else None
                out.append(NodeStatus(node.id, NodeState.RECLAIMED, rc, "reclaimed by the cloud"))
                continue
            if local.process is None:
                out.append(NodeStatus(node.id, NodeState.READY))
                continue
            rc = local.process.poll()
            if rc is None:
                self._remember(local)
                out.append(NodeStatus(node.id, NodeState.RUNNING))
            else:
                out.append(NodeStatus(node.id, NodeState.EXITED, rc))
        return out

    def training_started(self, nodes: Sequence[Node]) -> None:
        self._training.update(n.id for n in nodes)

    def interruption_notice(self, node: Node) -> Notice | None:
        found = self._nodes[node.id].notices
        interruptions = [n for n in found if n.kind == notices.INTERRUPTION]
        return (interruptions or found or [None])[0]

    def acknowledge(self, node: Node, notice: Notice) -> None:
        watcher = self._nodes[node.id].watch.watcher
        if isinstance(watcher, notices.AzureScheduledEventsWatcher):
            watcher.acknowledge(notice)

    def terminate(self, nodes: Sequence[Node], *, grace_s: float) -> None:
        live = [self._nodes[n.id] for n in nodes if not self._nodes[n.id].terminated]
        for local in live:
            if local.process is not None and local.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    local.process.send_signal(signal.SIGTERM)  # torchrun forwards it to its workers
        deadline = time.monotonic() + grace_s
        for local in live:
            if local.process is not None:
                try:
                    local.process.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    log.warning("node %s did not stop within %.1fs of SIGTERM: killing it", local.node.id, grace_s)
        for local in live:
            self._kill(local)
            local.watch.stop(timeout_s=0)  # first, so the server going away is not reported as an error
            local.server.stop()
            local.watch.stop()
            local.terminated = True
            local.pid_file.unlink(missing_ok=True)

    def release_stale(self, nodes: Sequence[Node]) -> list[str]:
        found = []
        for node in nodes:
            pid_file = Path(str(node.handle.get("pid_file", "")))
            token = str(node.handle.get("token", ""))
            find = functools.partial(_left_processes, pid_file, token)
            if process_tree.alive(find()):
                found.append(node.id)
                left = process_tree.kill_found(find)
                if left:
                    raise ProviderError(f"node {node.id}: processes {left} survived SIGKILL")
            pid_file.unlink(missing_ok=True)
        return found

    def close(self) -> None:
        with self._lock:
            nodes = [local.node for local in self._nodes.values() if not local.terminated]
        if nodes:
            self.terminate(nodes, grace_s=0.0)

    # -- fault injection --------------------------------------------------------------------
    def preempt(self, node: Node, *, lead_s: float | None = None) -> float:
        """Announce a reclaim of ``node`` now and kill it ``lead_s`` later (default: the
        protocol's lead time, scaled). Returns the reclaim time (POSIX seconds)."""
        local = self._nodes[node.id]
        lead = self.lead_s(node.pool) if lead_s is None else lead_s
        at = self.clock.wall() + lead
        local.server.announce_preemption(deadline=at)
        local.reclaim_at = at if local.reclaim_at is None else min(local.reclaim_at, at)
        return local.reclaim_at

    def pids(self, node: Node) -> dict[int, int]:
        """Every process seen on ``node`` (pid -> start time), for tests and reaping."""
        local = self._nodes[node.id]
        self._remember(local)
        return dict(local.known)

    # -- internals ------------------------------------------------------------------------
    def _inject_chaos(self, nodes: Sequence[Node]) -> None:
        """Reclaim a node of this launch when the chaos plan has one due (one per launch)."""
        if self.chaos is None or not nodes or nodes[0].pool.purchase != "spot":
            return
        live = [self._nodes[n.id] for n in nodes]
        if any(n.id not in self._training for n in nodes) or any(
            local.terminated or local.reclaim_at is not None for local in live
        ):
            return
        due = self.chaos.due(list(nodes))
        if due is None:
            return
        victim, scheduled, elapsed = due
        reclaim_at = self.preempt(victim)
        self.chaos.report(ChaosFired(victim.id, scheduled, elapsed, reclaim_at))

    def _expedite(self, node_id: str) -> None:
        self._nodes[node_id].reclaim_at = self.clock.wall()

    def _remember(self, local: _LocalNode) -> None:
        if local.process is None:
            return
        before = len(local.known)
        for process in process_tree.tree(local.process.pid):
            try:
                local.known.setdefault(process.pid, process.create_time())
            except psutil.Error:
                continue  # gone since the walk: nothing to remember
        if len(local.known) != before:
            _write_pids(local)

    def _kill(self, local: _LocalNode) -> None:
        if local.process is None:
            return
        self._remember(local)
        process = local.process
        left = process_tree.kill_found(lambda: [*process_tree.tree(process.pid), *process_tree.tagged(local.token)])
        try:
            local.process.wait(10)
        except subprocess.TimeoutExpired as exc:
            raise ProviderError(f"node {local.node.id}: agent {local.process.pid} survived SIGKILL") from exc
        if left:
            raise ProviderError(f"node {local.node.id}: processes {left} survived SIGKILL")


def _write_pids(local: _LocalNode) -> None:
    """The node's token and the pids seen so far, for a controller that has to reap them after a crash."""
    record = {"token": local.token, "pids": {str(p): t for p, t in local.known.items()}}
    atomic_file.write_text(local.pid_file, json.dumps(record))


def _left_processes(pid_file: Path, token: str) -> list[psutil.Process]:
    """A node's processes a dead controller left: those its pid file lists, and those carrying its token."""
    return [*_recorded(pid_file), *(process_tree.tagged(token) if token else [])]


def _recorded(pid_file: Path) -> list[psutil.Process]:
    """The processes a pid file lists that are still the ones recorded (same start time)."""
    try:
        record = json.loads(pid_file.read_text())
        pids = {int(p): float(t) for p, t in dict(record.get("pids", {})).items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return []
    found = []
    for pid, created in pids.items():
        try:
            process = psutil.Process(pid)
            if abs(process.create_time() - created) < 0.01:
                found.append(process)
        except psutil.Error:
            continue
    return found
