"""The cloud provider every cloud shares: a :class:`ComputeAPI` for instances, the run's stage for the rest.

A cloud module subclasses :class:`CloudProvider` with only its ``name``, an ``Options``
pydantic model (extends :class:`CloudOptions`; ``extra="forbid"``) and ``compute(options)``
returning its :class:`~runtime.providers.cloud_api.ComputeAPI`. Everything else is here:

* **stage**: ``<checkpoint_dir>/_danlu/<run id>`` in the run's object store (see
  :class:`runtime.providers.node_agent.Stage` for the layout). The controller and the
  nodes talk only through it: heartbeats up, launch specs and control requests down.
* **provision**: one create call per node (each node's user data names it), tagged
  ``danlu-run``/``danlu-launch``/``danlu-node``; a node's billing starts at the request.
  When one create fails, the ones made are deleted (and waited for) before the error
  goes up, so a failed provision holds nothing. The first provision of a provider first
  sweeps the run's tagged instances that no state file knows (a controller SIGKILLed
  between its create call and its state file).
* **wait_ready**: every node heartbeats ``ready`` with its boot nonce, else ProviderError.
* **run**: uploads the bundle (content-addressed, once) and writes ``spec.json`` with
  node 0's reported address:port as the c10d endpoint.
* **poll**: heartbeats (read every ``sync_s``) and the API (every ``describe_s``):
  TERMINATED/STOPPING without our asking is RECLAIMED; status.json is mirrored down into
  the controller's ``DANLU_RUN_DIR``, control.json and the trackers' meter.json up, log
  tails into ``launch.log_dir``.
* **terminate**: asks running agents to stop (``stop.json``: SIGTERM to torchrun, the
  workers checkpoint), waits ``grace_s``, deletes the instances and returns only when the
  API says TERMINATED -- the controller closes the billing interval then.
* **release_stale**: the recorded instances and every one tagged with the run id.
"""

from __future__ import annotations

import abc
import json
import logging
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from danlu import atomic_file
from pricing.pool import HELD, Pool
from runtime.control.clock import Clock, WallClock
from runtime.providers import bootstrap, bundle
from runtime.providers.base import (
    LaunchSpec,
    Node,
    NodeState,
    NodeStatus,
    Provider,
    ProviderContext,
    ProviderError,
    refuse_terms,
)
from runtime.providers.cloud_api import (
    TAG_HOME,
    TAG_LAUNCH,
    TAG_NODE,
    TAG_RUN,
    ComputeAPI,
    ComputeAPIError,
    Instance,
    InstanceRequest,
    InstanceState,
)
from runtime.providers.node_agent import Stage
from runtime.providers.notices import INTERRUPTION, Notice
from runtime.tracking.meter import METER_FILE
from runtime.training.contract import CONTROL_FILE

if TYPE_CHECKING:
    from planner.job import HeldReservation, JobSpec

__all__ = [
    "CloudOptions",
    "CloudProvider",
    "node_name",
    "stage_url",
]

log = logging.getLogger("runtime.providers.cloud")

STAGE_DIR = "_danlu"
MAX_NAME = 63


def stage_url(checkpoint_dir: str, run_id: str) -> str:
    """Where a run's bundle, launch specs and heartbeats live."""
    return f"{checkpoint_dir.rstrip('/')}/{STAGE_DIR}/{run_id}"


def node_name(run_id: str, launch_id: str, index: int) -> str:
    """``<run>-<launch>-n<i>``: lower case, dashes, at most 63 characters (a GCE/Azure-valid name)."""
    tail = f"-{launch_id}-n{index}".lower()
    tail = re.sub(r"[^a-z0-9-]+", "-", tail)
    run = re.sub(r"[^a-z0-9-]+", "-", run_id.lower()).strip("-") or "run"
    if not run[0].isalpha():
        run = f"r{run}"
    room = MAX_NAME - len(tail)
    if len(run) > room:
        import hashlib

        digest = hashlib.sha256(run_id.encode()).hexdigest()[:6]
        run = f"{run[: room - 7].rstrip('-')}-{digest}"
    return f"{run}{tail}"


class CloudOptions(BaseModel):
    """``[run.options]`` every cloud takes; a cloud's ``Options`` adds its own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    install: str | None = Field(default=None, min_length=1, description="pip spec installed on a node without danlu")
    stage: str | None = Field(default=None, description="object-store URL for the stage; default <checkpoint_dir>/_danlu/<run>")
    heartbeat_s: float = Field(default=5.0, ge=0.2, le=60.0, description="node heartbeat interval")
    boot_timeout_s: float = Field(default=900.0, gt=0, le=7200.0, description="how long a node may take to boot")
    terminate_timeout_s: float = Field(default=600.0, gt=0, le=7200.0, description="how long a delete may take")
    bundle_max_mb: float = Field(default=200.0, gt=0, le=10240.0, description="size cap of the code bundle")


@dataclass
class _Held:
    """What this provider knows about one node it created."""

    node: Node
    instance: str
    boot: str
    heartbeat: dict[str, Any] | None = None
    instance_state: InstanceState = InstanceState.PENDING
    api_interruption: bool = False
    launch: str | None = None
    terminated: bool = False
    seen_at: float = field(default_factory=time.monotonic)


@dataclass
class _Launch:
    spec: LaunchSpec
    nodes: list[str]
    control_sent: bytes | None = None
    meter_sent: bytes | None = None
    meter_pushed_at: float = float("-inf")
    status_seen: bytes | None = None


class CloudProvider(Provider):
    """Nodes are a cloud's instances (see the module docstring)."""

    remote = True
    Options: ClassVar[type[CloudOptions]] = CloudOptions

    def __init__(self, compute: ComputeAPI, *, run_id: str, options: CloudOptions, state_dir: str | Path,
                 stage: str | None = None, clock: Clock | None = None, sync_s: float | None = None,
                 describe_s: float | None = None, home: str = "", held: Sequence[HeldReservation] = ()):
        self.compute = compute
        self.held = tuple(held)
        self.run_id = run_id
        self.home = home
        self.options = options
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.clock = clock or WallClock(time.time(), 1.0)
        self._stage_url = options.stage or stage
        self._stage: Stage | None = None
        self.sync_s = sync_s if sync_s is not None else min(1.0, options.heartbeat_s)
        self.describe_s = describe_s if describe_s is not None else max(2.0, options.heartbeat_s)
        self.stale_s = max(60.0, 12 * options.heartbeat_s)
        self._held: dict[str, _Held] = {}
        self._launches: dict[str, _Launch] = {}
        self._swept = False
        self._last_sync = float("-inf")
        self._last_describe = float("-inf")
        self._last_logs = float("-inf")

    # -- what a cloud module fills -----------------------------------------------------------
    @classmethod
    @abc.abstractmethod
    def compute(cls, options: CloudOptions) -> ComputeAPI:
        """The cloud's API from the default credential chain (endpoints from the SDK's own env vars)."""

    @classmethod
    def parse_options(cls, options: Mapping[str, Any]) -> CloudOptions:
        """``[run.options]`` validated; raises ProviderError naming the key and the fix."""
        try:
            return cls.Options.model_validate(dict(options))
        except ValidationError as exc:
            problems = []
            for err in exc.errors():
                key = ".".join(str(p) for p in err["loc"]) or "(table)"
                if err["type"] == "extra_forbidden":
                    known = ", ".join(sorted(cls.Options.model_fields))
                    problems.append(f"[run.options] {key}: not an option of provider {cls.name!r} (known: {known})")
                else:
                    problems.append(f"[run.options] {key}: {err['msg']}")
            raise ProviderError("; ".join(problems) + ". To fix: correct or remove those keys (see docs/providers.md).") \
                from None

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        cls.parse_options(options)

    @classmethod
    def check_job(cls, job: JobSpec) -> None:
        super().check_job(job)
        refuse_terms(job, cls.name)

    @classmethod
    def from_context(cls, context: ProviderContext) -> CloudProvider:
        options = cls.parse_options(context.options)
        return cls(cls.compute(options), run_id=context.run_id or context.run_root.name, options=options,
                   state_dir=context.state_dir, stage=_stage_from_run(context), clock=context.clock,
                   home=context.home, held=context.held)

    def install_spec(self) -> str:
        """What a node without danlu pip-installs: ``[run.options] install`` or this version with the cloud's extra."""
        if self.options.install:
            return self.options.install
        from importlib import metadata

        try:
            version = metadata.version("danlu")
        except metadata.PackageNotFoundError:
            version = "0.1.0"
        return f"danlu[train,{self.name}]=={version}"

    def boot_problem(self, nodes: Sequence[Node]) -> str | None:
        """Why booting ``nodes`` cannot succeed (an image the cluster cannot pull, say), checked while
        waiting for them; None: keep waiting. A message here fails the launch at once."""
        return None

    def rendezvous_endpoint(self, nodes: Sequence[Node], first: Mapping[str, Any]) -> str:
        """``host:port`` of the c10d store: node 0's reported address and port (``first`` is its heartbeat)."""
        return f"{first.get('address')}:{first.get('port')}"

    # -- the stage --------------------------------------------------------------------------
    @property
    def stage(self) -> Stage:
        if self._stage is None:
            if not self._stage_url:
                raise ProviderError(
                    f"provider {self.name!r}: no stage for run {self.run_id!r} (the run's checkpoint_dir is unknown). "
                    "To fix: set [run].checkpoint_dir to an object-store URL, or [run.options] stage."
                )
            self._stage = Stage(self._stage_url)
        return self._stage

    # -- Provider ---------------------------------------------------------------------------
    def _reservation(self, pool: Pool) -> HeldReservation | None:
        """The reservation a launch on ``pool`` runs in: the ``[[purchase.held]]`` entry whose
        ``reservation_id`` the pool targets. None: not a held pool, or a reservation the cloud applies by
        itself (a regional RI, an open ODCR)."""
        if pool.purchase != HELD or pool.reservation is None:
            return None
        found = next((h for h in self.held if h.reservation_id == pool.reservation
                      and (h.cloud, h.region, h.instance_type) == (pool.cloud, pool.region, pool.instance_type)), None)
        if found is None:  # launched untargeted, its nodes would run (and bill) outside the reservation
            raise ProviderError(f"{pool.label()}: reservation {pool.reservation} is not among the job's "
                                "[[purchase.held]] entries for that instance type and region")
        return found

    def provision(self, pool: Pool, *, nodes: int, launch_id: str) -> list[Node]:
        if not self._swept:
            self._sweep_orphans()
        self.stage.remove("launches", launch_id)  # a dead controller's files under a reused launch id
        made: list[_Held] = []
        reservation = self._reservation(pool)
        try:
            for index in range(nodes):
                name = node_name(self.run_id, launch_id, index)
                boot = secrets.token_hex(8)
                self.stage.remove("nodes", name)
                user_data = bootstrap.render({
                    "node": name, "boot": boot, "launch": launch_id, "stage": self.stage.url, "cloud": self.name,
                    "install": self.install_spec(), "heartbeat_s": self.options.heartbeat_s,
                })
                requested = self.clock.wall()  # billing starts at the request, whatever the cloud says later
                created = self.compute.create(InstanceRequest(
                    pool=pool, names=(name,), tags={**self._run_tags(), TAG_LAUNCH: launch_id, TAG_NODE: name},
                    user_data=user_data, options=self.options.model_dump(),
                    reservation_id=reservation.reservation_id if reservation else None,
                    capacity_block=reservation is not None and reservation.capacity_block,
                ))
                if len(created) != 1:
                    self._abandon([c.id for c in created])
                    raise ComputeAPIError(f"{self.name}: asked for 1 instance named {name}, got {len(created)}")
                instance = created[0]
                node = Node(id=name, index=index, pool=pool, provisioned_at=requested,
                            handle={"instance": instance.id, "boot": boot, "zone": instance.zone,
                                    "cloud": self.name, "stage": self.stage.url})
                held = _Held(node, instance.id, boot, instance_state=instance.state)
                self._held[name] = held
                made.append(held)
        except BaseException:  # a capacity error, a bug, Ctrl-C: a failed provision holds nothing
            self._abandon([h.instance for h in made])
            for held in made:
                held.terminated = True
            raise
        return [h.node for h in made]

    def wait_ready(self, nodes: Sequence[Node], *, timeout_s: float) -> None:
        limit = max(timeout_s, self.options.boot_timeout_s)
        deadline = time.monotonic() + limit
        while True:
            self._sync(nodes, force=True)
            waiting = []
            for node in nodes:
                held = self._get(node)
                if held.instance_state in (InstanceState.TERMINATED, InstanceState.STOPPING):
                    raise ProviderError(f"{node.id} ({held.instance}) went {held.instance_state.value} while booting")
                beat = held.heartbeat
                if beat is None or beat.get("state") not in ("ready", "running", "exited") or not beat.get("address"):
                    waiting.append(node.id)
            if not waiting:
                return
            problem = self.boot_problem(nodes)
            if problem:
                raise ProviderError(problem)
            if time.monotonic() >= deadline:
                errors = [f"{n.id}: {self._get(n).heartbeat.get('error')}" for n in nodes
                          if self._get(n).heartbeat and self._get(n).heartbeat.get("error")]
                raise ProviderError(
                    f"nodes {', '.join(waiting)} sent no ready heartbeat within {limit:.0f}s"
                    + (f" ({'; '.join(errors)})" if errors else "")
                    + ". To fix: look at the instances' console output; raise [run.options] boot_timeout_s for "
                    "slow images."
                )
            time.sleep(min(self.sync_s, 0.5))

    def run(self, nodes: Sequence[Node], launch: LaunchSpec) -> list[Node]:
        launch.log_dir.mkdir(parents=True, exist_ok=True)
        packed = bundle.make_bundle(launch.cwd, max_bytes=int(self.options.bundle_max_mb * 2**20))
        bundle.upload(packed, self.stage.url)
        first = self._get(nodes[0]).heartbeat or {}
        spec = {
            "launch": launch.launch_id, "argv": list(launch.entrypoint), "nnodes": len(nodes),
            "nproc_per_node": launch.nproc_per_node, "rdzv_id": launch.rdzv_id,
            "rdzv_endpoint": self.rendezvous_endpoint(nodes, first),
            "rdzv_timeout_s": launch.rdzv_timeout_s, "shutdown_timeout_s": launch.shutdown_timeout_s,
            # The controller's DANLU_RUN_DIR is its own disk: each node sets a local one.
            "env": {k: v for k, v in launch.env.items() if k != "DANLU_RUN_DIR"},
            "bundle": packed.name,
            "nodes": [{"name": n.id, "index": n.index, "boot": self._get(n).boot} for n in nodes],
        }
        self.stage.write_json(spec, "launches", launch.launch_id, "spec.json")
        self._launches[launch.launch_id] = _Launch(launch, [n.id for n in nodes])
        started = []
        for node in nodes:
            held = self._get(node)
            held.launch = launch.launch_id
            # "log": where _copy_logs mirrors the node's torchrun log, so a failure names its cause.
            held.node = replace(node, handle={**node.handle, "launch": launch.launch_id, "bundle": packed.name,
                                              "log": str(launch.log_dir / f"{node.id}.log")})
            started.append(held.node)
        return started

    def poll(self, nodes: Sequence[Node]) -> list[NodeStatus]:
        self._push_control(nodes)
        self._sync(nodes)
        return [self._status_of(self._get(node)) for node in nodes]

    def interruption_notice(self, node: Node) -> Notice | None:
        held = self._get(node)
        beat = held.heartbeat or {}
        raw = beat.get("notice")
        if isinstance(raw, dict):
            try:
                return Notice(**raw)
            except TypeError:
                pass
        if held.api_interruption:
            return Notice(self.name, INTERRUPTION, "terminate", None, f"{self.name} API: {held.instance} is being reclaimed")
        return None

    def acknowledge(self, node: Node, notice: Notice) -> None:
        held = self._get(node)
        self.stage.write_json({"boot": held.boot, "event_id": notice.event_id, "time": time.time()},
                              "nodes", node.id, "ack.json")

    def terminate(self, nodes: Sequence[Node], *, grace_s: float) -> None:
        live = [self._get(n) for n in nodes if not self._get(n).terminated]
        if not live:
            return
        self._sync(nodes, force=True)
        running = [h for h in live if self._agent_running(h)]
        for launch_id in {h.launch for h in running if h.launch}:
            self.stage.write_json({"grace_s": grace_s, "time": time.time()}, "launches", launch_id, "stop.json")
        deadline = time.monotonic() + grace_s + 2 * self.options.heartbeat_s
        while running and time.monotonic() < deadline:
            time.sleep(min(self.sync_s, 0.5))
            self._sync(nodes, force=True)
            running = [h for h in running if self._agent_running(h)]
        self._copy_logs(nodes)
        self._delete_and_wait([h.instance for h in live])
        for held in live:
            held.terminated = True

    def release_stale(self, nodes: Sequence[Node]) -> list[str]:
        recorded = {str(n.handle.get("instance")): n.id for n in nodes if n.handle.get("instance")}
        found: dict[str, str] = {}
        if recorded:
            for instance in self.compute.describe(list(recorded)):
                if instance.state is not InstanceState.TERMINATED:
                    found[instance.id] = recorded.get(instance.id, instance.name)
        for instance in self._tagged():
            if instance.id not in self._live_ids():
                found[instance.id] = instance.name or instance.id
        self._swept = True
        if found:
            self._delete_and_wait(list(found))
        return sorted(set(found.values()))

    def close(self) -> None:
        nodes = [h.node for h in self._held.values() if not h.terminated]
        if nodes:
            self.terminate(nodes, grace_s=0.0)

    # -- internals --------------------------------------------------------------------------
    def _get(self, node: Node) -> _Held:
        held = self._held.get(node.id)
        if held is None:
            raise ProviderError(f"node {node.id} was not provisioned by this provider")
        return held

    def _run_tags(self) -> dict[str, str]:
        """The tags every resource of this run carries."""
        return {TAG_RUN: self.run_id, TAG_HOME: self.home} if self.home else {TAG_RUN: self.run_id}

    def _tagged(self) -> list[Instance]:
        """The instances tagged with this run's id and home. An id can repeat across runs directories (a run
        started before ids carried the home is its directory's name), a home cannot; an instance without a home
        is one of a run started before it kept one."""
        home = self.compute.tag_value(self.home) if self.home else None
        return [i for i in self.compute.list_tagged(TAG_RUN, self.run_id) if i.tags.get(TAG_HOME) in (None, home)]

    def _live_ids(self) -> set[str]:
        return {h.instance for h in self._held.values() if not h.terminated}

    def _sweep_orphans(self) -> None:
        """Delete instances of this run that no live record knows (a controller died mid-create)."""
        self._swept = True
        stale = [i.id for i in self._tagged() if i.id not in self._live_ids()]
        if stale:
            log.warning("run %s: deleting %d instances a dead controller left: %s", self.run_id, len(stale), stale)
            self._delete_and_wait(stale)

    def _abandon(self, ids: list[str]) -> None:
        if not ids:
            return
        try:
            self._delete_and_wait(ids)
        except ProviderError as exc:  # the original error matters more; the sweep of release_stale retries
            log.error("could not release %s after a failed provision: %s", ids, exc)

    def _delete_and_wait(self, ids: list[str]) -> None:
        """Delete and return only when the API says every one is TERMINATED (billing ends there)."""
        self.compute.delete(ids)
        deadline = time.monotonic() + self.options.terminate_timeout_s
        pause = 0.2
        asked = time.monotonic()
        while True:
            left = [i.id for i in self.compute.describe(ids) if i.state is not InstanceState.TERMINATED]
            if not left:
                return
            if time.monotonic() >= deadline:
                raise ProviderError(
                    f"{self.name}: instances {', '.join(left)} are not terminated {self.options.terminate_timeout_s:.0f}s "
                    "after the delete. To fix: check them in the cloud console (they may still be billed); "
                    "`planner gc --yes` deletes what danlu left."
                )
            if time.monotonic() - asked > 60:
                self.compute.delete(left)  # a lost request: ask again now and then
                asked = time.monotonic()
            time.sleep(pause)
            pause = min(pause * 2, 5.0)

    def _agent_running(self, held: _Held) -> bool:
        beat = held.heartbeat or {}
        alive = held.instance_state not in (InstanceState.TERMINATED, InstanceState.STOPPING)
        return alive and beat.get("state") == "running" and beat.get("launch") == held.launch

    def _status_of(self, held: _Held) -> NodeStatus:
        node_id = held.node.id
        if held.terminated:
            return NodeStatus(node_id, NodeState.TERMINATED)
        beat = held.heartbeat or {}
        rc = beat.get("returncode") if beat.get("launch") == held.launch else None
        if held.instance_state in (InstanceState.TERMINATED, InstanceState.STOPPING):
            return NodeStatus(node_id, NodeState.RECLAIMED, rc, f"{held.instance} {held.instance_state.value}: "
                                                                   "reclaimed by the cloud")
        if held.launch is not None and beat.get("launch") == held.launch:
            if beat.get("state") == "exited":
                return NodeStatus(node_id, NodeState.EXITED, rc)
            if beat.get("state") == "running":
                if time.monotonic() - held.seen_at > self.stale_s:
                    return NodeStatus(node_id, NodeState.EXITED, -1, f"no heartbeat for {self.stale_s:.0f}s")
                return NodeStatus(node_id, NodeState.RUNNING)
        if held.heartbeat is None or held.launch is None:
            return NodeStatus(node_id, NodeState.PENDING if held.heartbeat is None else NodeState.READY)
        return NodeStatus(node_id, NodeState.READY)

    def _push_control(self, nodes: Sequence[Node]) -> None:
        """The controller's files for the workers up to the stage, where the agents mirror them down.

        control.json as soon as the controller writes it (a local read per poll is cheap);
        the trackers' meter.json, rewritten at every controller heartbeat, at most once per
        node heartbeat -- the agents read it no more often than that.
        """
        now = time.monotonic()
        for launch_id in {self._get(n).launch for n in nodes if self._get(n).launch}:
            launch = self._launches.get(launch_id)
            if launch is None:
                continue
            work = Path(launch.spec.env.get("DANLU_RUN_DIR", ""))
            launch.control_sent = self._push_file(work / CONTROL_FILE, launch_id, launch.control_sent)
            if now - launch.meter_pushed_at >= self.options.heartbeat_s:
                sent = launch.meter_sent
                launch.meter_sent = self._push_file(work / METER_FILE, launch_id, sent)
                if launch.meter_sent != sent:
                    launch.meter_pushed_at = now

    def _push_file(self, local: Path, launch_id: str, sent: bytes | None) -> bytes | None:
        """Upload ``local`` to the launch's stage folder unless it is what was sent; returns what was sent."""
        try:
            data = local.read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            return sent
        if data != sent:
            self.stage.write_bytes(data, "launches", launch_id, local.name)
        return data

    def _sync(self, nodes: Sequence[Node], *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_sync < self.sync_s:
            return
        self._last_sync = now
        held = [self._get(n) for n in nodes if not self._get(n).terminated]
        # Heartbeats before status.json: an agent uploads the final status before it reports
        # "exited", so a status read after an "exited" heartbeat is the final one.
        for h in held:
            beat = self.stage.read_json("nodes", h.node.id, "heartbeat.json")
            if beat is not None and beat.get("boot") == h.boot:
                if h.heartbeat is None or beat.get("seq") != h.heartbeat.get("seq"):
                    h.seen_at = now
                h.heartbeat = beat
        if held and (force or now - self._last_describe >= self.describe_s):
            self._last_describe = now
            try:
                for h, instance in zip(held, self.compute.describe([h.instance for h in held]), strict=True):
                    self._observe(h, instance)
            except ComputeAPIError as exc:  # a hiccup of the API must not end the run: next time
                log.warning("%s describe failed: %s", self.name, exc)
        for launch_id in {h.launch for h in held if h.launch}:
            self._pull_status(launch_id)
        if now - self._last_logs >= 5.0:
            self._last_logs = now
            self._copy_logs(nodes)

    def _observe(self, held: _Held, instance: Instance) -> None:
        held.instance_state = instance.state
        held.api_interruption = held.api_interruption or instance.interruption

    def _pull_status(self, launch_id: str) -> None:
        launch = self._launches.get(launch_id)
        if launch is None:
            return
        data = self.stage.read_bytes("launches", launch_id, "status.json")
        if data is None or data == launch.status_seen:
            return
        try:
            json.loads(data)
        except ValueError:
            return
        target = launch.spec.env.get("DANLU_RUN_DIR")
        if target:
            atomic_file.write_bytes(Path(target) / "status.json", data, mode=0o600)
        launch.status_seen = data

    def _copy_logs(self, nodes: Sequence[Node]) -> None:
        for node in nodes:
            held = self._held.get(node.id)
            launch = self._launches.get(held.launch) if held and held.launch else None
            if launch is None:
                continue
            data = self.stage.read_bytes("nodes", node.id, "log.txt")
            if data:
                atomic_file.write_bytes(launch.spec.log_dir / f"{node.id}.log", data, mode=0o600)
        for launch_id in {self._get(n).launch for n in nodes if n.id in self._held and self._get(n).launch}:
            self._pull_status(launch_id)


def _stage_from_run(context: ProviderContext) -> str | None:
    """The stage from the run's checkpoint dir, read from its state file (provision needs it
    before the first LaunchSpec names it)."""
    try:
        state = json.loads((context.run_root / "state.json").read_text())
    except (OSError, ValueError):
        return None
    checkpoint_dir = state.get("checkpoint_dir") if isinstance(state, dict) else None
    if not isinstance(checkpoint_dir, str) or "://" not in checkpoint_dir:
        return None
    return stage_url(checkpoint_dir, context.run_id or context.run_root.name)
