"""A scripted cloud: nodes and workers that exist only on the run's clock.

The fake provider plays both the cloud and the training script, so the controller can
be tested end to end without torchrun: its "workers" follow the controller contract
(:mod:`runtime.training.contract`) by themselves -- they write ``status.json``, commit
checkpoints to the run's :class:`~runtime.training.store.CheckpointStore` (a manifest
over a small stand-in file; the work counted is the step), act on ``control.json``
(``checkpoint``, or ``stop``: checkpoint and exit 75) and exit 0 once
``script.total_steps`` are done. Time is whatever the clock says; with a
:class:`runtime.control.clock.ManualClock` a run of hours takes milliseconds.

Fault knobs (:class:`FakeScript`), each keyed by launch id (``l-1``, ``l-2``, ...):

* ``reclaims``: reclaim node ``i`` ``after_s`` after training starts, with a notice
  ``lead_s`` ahead or without one;
* ``no_capacity``: pools (by id) whose provisioning fails with a capacity error;
* ``exits``: the workers of a launch exit with this code ``crash_after_s`` into training;
* ``hang``: the workers of a launch never start training (a hung start-up);
* ``reclaim_at_final``: a launch whose first node is reclaimed the moment its final
  checkpoint commits, before the workers can report "completed";
* ``stalls``: the workers of a launch stop advancing this many seconds into training (a hung
  collective) and stay alive, silent, until they are stopped or their node goes;
* ``heartbeat_s``: report "running" with the step every so many seconds while training, as
  the training session does (``contract.STATUS_HEARTBEAT_S``); None: only once, at the start;
* ``save_write_s``: the longest checkpoint write the workers report in their status (None: none);
* ``stop_s``: how long a stop request takes from being read to its committed checkpoint (the
  stop's own save); training does not advance meanwhile.
* ``pace``: a launch's workers train at this share of ``steps_per_s`` (slower, or faster, than the
  job's throughput table says).

The run's chaos plan (``--chaos``) is carried out as by the local provider: one reclaim
per training spot launch, announced by the cloud's lead time.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pricing.pool import Pool
from runtime.control.chaos import ChaosFired
from runtime.providers.base import (
    LaunchSpec,
    Node,
    NodeState,
    NodeStatus,
    Provider,
    ProviderContext,
    ProviderError,
)
from runtime.providers.notices import INTERRUPTION, NOTICE_LEAD_S, Notice
from runtime.training import contract
from runtime.training.store import CheckpointStore, Manifest

__all__ = [
    "FakeProvider",
    "FakeScript",
    "Reclaim",
]

STAND_IN = "state.bin"


@dataclass(frozen=True, slots=True)
class Reclaim:
    """Reclaim node ``node`` of launch ``launch`` ``after_s`` real seconds into its training.

    With ``notice`` the cloud warns ``lead_s`` seconds ahead (the reclaim comes at
    ``after_s + lead_s``); without, the node just goes.
    """

    launch: str
    after_s: float
    node: int = 0
    notice: bool = True
    lead_s: float = 2.0


@dataclass(frozen=True, slots=True)
class FakeScript:
    """How the fake cloud and its workers behave (see the module docstring); times are real seconds."""

    total_steps: int
    steps_per_s: float = 10.0
    checkpoint_every: int = 50
    startup_s: float = 1.0
    global_batch: int = 1
    reclaims: tuple[Reclaim, ...] = ()
    no_capacity: frozenset[str] = frozenset()
    exits: Mapping[str, int] = field(default_factory=dict)
    crash_after_s: float = 1.0
    hang: frozenset[str] = frozenset()
    reclaim_at_final: frozenset[str] = frozenset()
    stalls: Mapping[str, float] = field(default_factory=dict)
    heartbeat_s: float | None = None
    save_write_s: float | None = None
    stop_s: float = 0.0
    pace: Mapping[str, float] = field(default_factory=dict)  # a launch's speed, as a share of steps_per_s


@dataclass
class _Launch:
    launch_id: str
    pool: Pool
    nodes: list[Node]
    spec: LaunchSpec | None = None
    started_at: float | None = None
    training_at: float | None = None
    start_step: int = 0
    step: int = 0
    committed: int = 0
    handled: str | None = None
    exit_code: int | None = None
    ended_at: float | None = None
    notices: dict[str, tuple[float, Notice]] = field(default_factory=dict)
    reclaim_at: dict[str, float] = field(default_factory=dict)
    reclaimed: set[str] = field(default_factory=set)
    armed: bool = False
    terminated: bool = False
    beats: int = 0  # heartbeats reported
    stopping: tuple[float, contract.ControlRequest] | None = None  # a stop being saved: its commit time, request

    @property
    def dead_at(self) -> float | None:
        """When the workers stopped: they exited, or a node under them was reclaimed."""
        times = [t for t in (self.ended_at, *[self.reclaim_at[n] for n in self.reclaimed]) if t is not None]
        return min(times) if times else None


class FakeProvider(Provider):
    """The scripted cloud (see the module docstring)."""

    name = "fake"
    runs_entrypoint = False  # it plays the workers from a script; the job's entrypoint never runs

    def __init__(self, context: ProviderContext, script: FakeScript):
        self.context = context
        self.clock = context.clock
        self.chaos = context.chaos
        self.script = script
        self._launches: dict[str, _Launch] = {}
        self._node_launch: dict[str, str] = {}
        self.provisioned: list[tuple[str, Pool, int]] = []

    @classmethod
    def scripted(cls, script: FakeScript) -> Callable[[ProviderContext], FakeProvider]:
        """A factory for :meth:`runtime.control.controller.Controller.open` (``provider=``)."""
        return lambda context: cls(context, script)

    @classmethod
    def from_context(cls, context: ProviderContext) -> FakeProvider:
        raise ProviderError(
            "the fake provider needs a script; build it with FakeProvider.scripted(FakeScript(...)) and pass it "
            "to Controller.open(provider=...)"
        )

    # -- Provider ---------------------------------------------------------------------------
    def provision(self, pool: Pool, *, nodes: int, launch_id: str) -> list[Node]:
        if pool.id in self.script.no_capacity:
            raise ProviderError(f"InsufficientInstanceCapacity: no {pool.instance_type} capacity in {pool.location}")
        now = self.clock.wall()
        made = [Node(id=f"{launch_id}-n{i}", index=i, pool=pool, provisioned_at=now, handle={"fake": True})
                for i in range(nodes)]
        self._launches[launch_id] = _Launch(launch_id, pool, made)
        self._node_launch.update({n.id: launch_id for n in made})
        self.provisioned.append((launch_id, pool, nodes))
        return made

    def wait_ready(self, nodes: Sequence[Node], *, timeout_s: float) -> None:
        for node in nodes:
            if node.id not in self._node_launch:
                raise ProviderError(f"node {node.id} was not provisioned by this provider")

    def run(self, nodes: Sequence[Node], launch: LaunchSpec) -> list[Node]:
        state = self._launch_of(nodes)
        state.spec = launch
        state.started_at = self.clock.wall()
        state.start_step = state.step = state.committed = self._store(launch).latest_step() or 0
        return list(nodes)

    def poll(self, nodes: Sequence[Node]) -> list[NodeStatus]:
        state = self._launch_of(nodes)
        self._advance(state)
        self._inject_chaos(state)
        out = []
        for node in nodes:
            if state.terminated:
                out.append(NodeStatus(node.id, NodeState.TERMINATED))
            elif node.id in state.reclaimed:
                out.append(NodeStatus(node.id, NodeState.RECLAIMED, None, "reclaimed by the cloud"))
            elif state.dead_at is not None:
                code = state.exit_code if state.exit_code is not None else 1
                out.append(NodeStatus(node.id, NodeState.EXITED, code))
            elif state.spec is None:
                out.append(NodeStatus(node.id, NodeState.READY))
            else:
                out.append(NodeStatus(node.id, NodeState.RUNNING))
        return out

    def training_started(self, nodes: Sequence[Node]) -> None:
        self._launch_of(nodes).armed = True

    def interruption_notice(self, node: Node) -> Notice | None:
        state = self._launches[self._node_launch[node.id]]
        seen = state.notices.get(node.id)
        return seen[1] if seen is not None and seen[0] <= self.clock.wall() else None

    def acknowledge(self, node: Node, notice: Notice) -> None:
        state = self._launches[self._node_launch[node.id]]
        if notice.cloud == "azure" and node.id in state.reclaim_at:
            state.reclaim_at[node.id] = min(state.reclaim_at[node.id], self.clock.wall())

    def terminate(self, nodes: Sequence[Node], *, grace_s: float) -> None:
        if nodes:
            state = self._launch_of(nodes)
            self._advance(state)
            state.terminated = True

    def release_stale(self, nodes: Sequence[Node]) -> list[str]:
        return []  # a fake node's "processes" die with the provider object that played them

    def close(self) -> None:
        for state in self._launches.values():
            state.terminated = True

    # -- the scripted workers ---------------------------------------------------------------
    def _launch_of(self, nodes: Sequence[Node]) -> _Launch:
        try:
            return self._launches[self._node_launch[nodes[0].id]]
        except (KeyError, IndexError):
            raise ProviderError(f"nodes {[n.id for n in nodes]} were not provisioned by this provider") from None

    @staticmethod
    def _protocol(pool: Pool) -> str:
        return pool.cloud if pool.cloud in NOTICE_LEAD_S else "aws"

    def _store(self, launch: LaunchSpec) -> CheckpointStore:
        return CheckpointStore(launch.env[contract.ENV_CHECKPOINT_DIR])

    def _announce(self, state: _Launch, node_id: str, lead_s: float, *, at: float | None = None,
                  cloud: str | None = None) -> float:
        """Warn of a reclaim of ``node_id`` now (or at ``at``) and reclaim it ``lead_s`` later."""
        when = self.clock.wall() if at is None else at
        cloud = cloud or self._protocol(state.pool)
        state.notices[node_id] = (when, Notice(cloud=cloud, kind=INTERRUPTION, action="terminate",
                                               deadline=when + lead_s, detail="scripted reclaim"))
        state.reclaim_at[node_id] = when + lead_s
        return when + lead_s

    def _advance(self, state: _Launch) -> None:
        """Bring the launch's workers up to the clock's now."""
        spec = state.spec
        if spec is None or state.started_at is None or state.terminated:
            return
        now = self.clock.wall()
        script = self.script
        if state.training_at is None and state.launch_id not in script.hang:
            if now >= state.started_at + script.startup_s and state.dead_at is None:
                state.training_at = state.started_at + script.startup_s
                self._schedule_reclaims(state)
                self._status(state, "running", at=state.training_at)
        for node_id, at in state.reclaim_at.items():
            if at <= now and node_id not in state.reclaimed and state.dead_at is None:
                state.reclaimed.add(node_id)
        if state.training_at is None or state.ended_at is not None:
            return
        if state.stopping is not None:
            due, request = state.stopping
            if now >= due and state.dead_at is None:
                self._carry_out(state, request, at=due)
            return
        until = min(now, state.dead_at) if state.dead_at is not None else now
        crash = None
        if state.launch_id in script.exits:
            crash = state.training_at + script.crash_after_s
            until = min(until, crash)
        advancing = until
        if state.launch_id in script.stalls:
            advancing = min(until, state.training_at + script.stalls[state.launch_id])
        state.step = max(state.step, self._step_at(state, advancing))
        if script.heartbeat_s and state.dead_at is None:
            beats = math.floor((advancing - state.training_at) / script.heartbeat_s + 1e-9)
            if beats > state.beats:
                state.beats = beats
                at = state.training_at + beats * script.heartbeat_s
                self._status(state, "running", at=at, step=self._step_at(state, at))
        every = max(1, script.checkpoint_every)
        if state.step // every * every > state.committed:
            self._commit(state, state.step // every * every, "interval", at=until)
        if state.dead_at is not None:
            return
        if state.step >= script.total_steps:
            self._commit(state, state.step, "final", at=until)
            if state.launch_id in script.reclaim_at_final:
                state.reclaim_at[state.nodes[0].id] = until
                state.reclaimed.add(state.nodes[0].id)
                return
            self._status(state, "completed", at=until)
            state.ended_at, state.exit_code = until, contract.EXIT_COMPLETED
            return
        if crash is not None and now >= crash:
            state.ended_at, state.exit_code = crash, script.exits[state.launch_id]
            return
        if advancing < now:
            return  # hung: a stop or checkpoint request is never read
        self._act_on_request(state, now)

    def _step_at(self, state: _Launch, at: float) -> int:
        assert state.training_at is not None
        speed = self.script.steps_per_s * self.script.pace.get(state.launch_id, 1.0)
        steps = math.floor((at - state.training_at) * speed + 1e-9)
        return min(self.script.total_steps, state.start_step + steps)

    def _inject_chaos(self, state: _Launch) -> None:
        """One chaos reclaim per training spot launch, when the plan has one due."""
        if (self.chaos is None or not state.armed or state.pool.purchase != "spot" or state.reclaim_at
                or state.terminated or state.dead_at is not None):
            return
        due = self.chaos.due(state.nodes)
        if due is None:
            return
        victim, scheduled, elapsed = due
        lead = NOTICE_LEAD_S[self.chaos.notice or self._protocol(state.pool)] / self.clock.scale
        at = self._announce(state, victim.id, lead, cloud=self.chaos.notice)
        self.chaos.report(ChaosFired(victim.id, scheduled, elapsed, at))

    def _schedule_reclaims(self, state: _Launch) -> None:
        assert state.training_at is not None
        for r in self.script.reclaims:
            if r.launch != state.launch_id:
                continue
            node = state.nodes[min(r.node, len(state.nodes) - 1)]
            at = state.training_at + r.after_s
            if r.notice:
                self._announce(state, node.id, r.lead_s, at=at)
            else:
                state.reclaim_at[node.id] = at

    def _act_on_request(self, state: _Launch, now: float) -> None:
        assert state.spec is not None
        request = contract.read_request(Path(state.spec.env[contract.ENV_RUN_DIR]) / contract.CONTROL_FILE)
        if request is None or request.id == state.handled:
            return
        state.handled = request.id
        if request.action == "stop" and self.script.stop_s > 0:
            state.stopping = (now + self.script.stop_s, request)
            return
        self._carry_out(state, request, at=now)

    def _carry_out(self, state: _Launch, request: contract.ControlRequest, *, at: float) -> None:
        if state.step > state.committed:
            self._commit(state, state.step, request.action, at=at, request_id=request.id)
        if request.action == "stop":
            self._status(state, "preempted", at=at, reason=request.reason, request_id=request.id)
            state.ended_at, state.exit_code = at, contract.EXIT_PREEMPTED
        else:
            self._status(state, "running", at=at, request_id=request.id)

    def _commit(self, state: _Launch, step: int, reason: str, *, at: float, request_id: str | None = None) -> None:
        assert state.spec is not None
        store = self._store(state.spec)
        if store.is_committed(step):
            state.committed = step
            return
        store.prepare(step)
        folder = Path(store.url(step))
        folder.mkdir(parents=True, exist_ok=True)
        payload = hashlib.blake2b(f"{state.launch_id}:{step}".encode(), digest_size=32).digest()
        (folder / STAND_IN).write_bytes(payload)
        gb = self.script.global_batch
        store.commit(Manifest(
            step=step, world_size=len(state.nodes) * state.spec.nproc_per_node, global_batch=gb,
            samples_seen=step * gb, seed=0, reason=reason, files=store.digest_files(step), tensors={},
            bytes_written=len(payload), request_id=request_id, created_at=at,
        ))
        state.committed = step

    def _status(self, state: _Launch, kind: str, *, at: float, reason: str | None = None,
                request_id: str | None = None, step: int | None = None) -> None:
        assert state.spec is not None
        store = self._store(state.spec)
        contract.write_status(state.spec.env[contract.ENV_RUN_DIR], contract.RunStatus(
            state=kind, step=state.step if step is None else step, attempt=state.launch_id,  # type: ignore[arg-type]
            checkpoint=store.url(state.committed) if state.committed else None, reason=reason,
            world_size=len(state.nodes) * state.spec.nproc_per_node, request_id=request_id, updated_at=at,
            heartbeat_s=self.script.heartbeat_s, save_write_s=self.script.save_write_s,
        ))

