"""Synthetic run directories, written through the runtime's own writers.

``state.json`` by :func:`runtime.control.run_start.new_state`/``save_state``, ``events.jsonl`` by
:class:`runtime.control.events.EventLog`, ``ledger.sqlite`` by :class:`runtime.accounting.ledger.Ledger`,
checkpoints by :meth:`runtime.training.store.CheckpointStore.commit`, ``work/status.json`` by
:func:`runtime.training.contract.write_status` and ``summary.json`` by ``build_summary``. Only the
times are made up, so a run of hours is built in milliseconds.

The story (simulated hours after ``T0``), 1000 steps, budget $100, deadline 10 h::

    0.00  run_started, plan: 2x g4dn.xlarge spot aws:us-east-1/use1-az1
    0.02  launch l-1: 2 nodes at $1.50/node-h          (node_up at 0.02 for both)
    1.95  aws interruption notice
    2.00  l-1 released at step 400: preempted -> re-plan to 1x on-demand gcp
    2.10  launch l-2: 1 node at $3.00/node-h
    ----  running():  heartbeat at 3.00, checkpoint at step 600, workers at 650
    5.00  finished(): l-2 completed at step 1000, run_end completed
"""

from __future__ import annotations

from pathlib import Path

from planner.job import load_job
from pricing.pool import Pool
from runtime.accounting.ledger import IntervalKey, Ledger
from runtime.control.events import EventLog
from runtime.control.run_start import new_state
from runtime.control.run_state import LaunchRecord, save_state
from runtime.control.run_summary import build_summary, write_summary
from runtime.training import contract
from runtime.training.store import CheckpointStore, Manifest

T0 = 1_796_000_000.0  # 2026-11-30 00:53:20 UTC
HOUR = 3600.0
SPOT = Pool(cloud="aws", region="us-east-1", zone="use1-az1", instance_type="g4dn.xlarge", gpu="T4",
            gpus_per_node=1, purchase="spot", hourly_usd=1.5)
ON_DEMAND = Pool(cloud="gcp", region="us-central1", zone=None, instance_type="n1-standard-4-t4", gpu="T4",
                 gpus_per_node=1, purchase="on_demand", hourly_usd=3.0)
NODES = {SPOT: 2, ON_DEMAND: 1}
L1_USD = 2 * 1.5 * (2.0 - 0.02)  # $5.94
RATE_STEPS_PER_HOUR = 200.0  # measured on l-2's single T4

JOB = """
name = "synthetic"

[workload]
steps = 1000

[workload.throughput]
T4 = 0.05555555555555555  # 200 steps/h: the table agrees with what l-2 measures

[constraints]
deadline_hours = 10
budget_usd = 100

[run]
entrypoint = ["python", "train.py"]
provider = "local"
"""


def _at(hours: float) -> float:
    return T0 + hours * HOUR


def _commit(store: CheckpointStore, step: int) -> None:
    store.commit(Manifest(step=step, world_size=2, global_batch=1, samples_seen=step, seed=0, reason="interval",
                          files={}, tensors={}, bytes_written=0))


class SyntheticRun:
    """Builds the run above in ``run_dir``, one stage at a time."""

    def __init__(self, tmp: Path, name: str = "run"):
        self.run_dir = tmp / name
        job_path = tmp / f"{name}.toml"
        job_path.write_text(JOB)
        self.job = load_job(job_path)
        self.state = new_state(job_path=job_path, job=self.job, run_dir=self.run_dir, catalog=None,
                               provider="local", time_scale=1.0, policy="danlu", chaos=[])
        self.state.origin = T0
        self.store = CheckpointStore(self.state.checkpoint_dir)
        self.now = T0
        self.events = EventLog(self.run_dir, clock=lambda: self.now)
        self.ledger = Ledger(self.run_dir)

    def emit(self, hours: float, event: str, **fields) -> None:
        self.now = _at(hours)
        self.events.emit(event, **fields)

    def started(self) -> SyntheticRun:
        """Up to the re-plan after l-1's preemption at 2 h, and l-2 provisioned at 2.1 h."""
        self.emit(0.0, "run_started", job="synthetic", provider="local", time_scale=1.0, policy="danlu", chaos=[],
                  checkpoint_dir=self.state.checkpoint_dir)
        self.emit(0.0, "plan", pool=SPOT.label(NODES[SPOT]), expected_cost_usd=15.0, expected_hours=5.0, note="")
        self._launch("l-1", SPOT, 0.02, start_step=0)
        self.emit(1.95, "notice", node="l-1-n1", cloud="aws", kind="interruption", action="terminate",
                  detail="spot instance-action")
        for node in ("l-1-n0", "l-1-n1"):
            self.ledger.close(IntervalKey("l-1", node), end=_at(2.0), reason="preempted")
            self.emit(2.0, "node_down", node=node, launch="l-1", reason="preempted", started=_at(0.02),
                      hourly_usd=SPOT.hourly_usd)
        record = self.state.launches[-1]
        record.released_at, record.end_step, record.outcome, record.reason = _at(2.0), 400, "preempted", "stop request"
        _commit(self.store, 400)
        self.emit(2.0, "launch_end", launch="l-1", outcome="preempted", reason="stop request", committed_step=400,
                  reached_step=400, lost_steps=0, nodes={})
        self.emit(2.0, "preemption", launch="l-1", pool=SPOT.id, count=1, cooldown_until=_at(2.5),
                  interruption_rate=0.9, prior_rate=0.5, step=400)
        self.emit(2.0, "replan", reason=f"{SPOT.id} preempted at step 400", previous=None,
                  pool=ON_DEMAND.label(NODES[ON_DEMAND]), pool_changed=True, expected_cost_usd=9.0, expected_hours=3.0,
                  work_left=600.0)
        self.state.preemptions, self.state.replans, self.state.steps = 1, 1, 400
        self.state.set_pool(ON_DEMAND, NODES[ON_DEMAND])
        self.state.measured = {"gpu": "T4", "gpus": 1, "units": RATE_STEPS_PER_HOUR, "hours": 1.0,
                               "steps": RATE_STEPS_PER_HOUR}
        self._launch("l-2", ON_DEMAND, 2.1, start_step=400)
        return self

    def running(self) -> SyntheticRun:
        """l-2 training: billed up to its heartbeat at 3 h, step 600 committed, workers at 650."""
        for node in ("l-2-n0",):
            self.ledger.extend(IntervalKey("l-2", node), until=_at(3.0))
        _commit(self.store, 600)
        contract.write_status(self.run_dir / "work", contract.RunStatus(state="running", step=650, attempt="l-2"))
        save_state(self.run_dir, self.state)
        return self

    def finished(self) -> SyntheticRun:
        """l-2 completes at 5 h; the controller writes summary.json as it exits."""
        self.ledger.close(IntervalKey("l-2", "l-2-n0"), end=_at(5.0), reason="launch ended")
        self.emit(5.0, "node_down", node="l-2-n0", launch="l-2", reason="launch ended", started=_at(2.1),
                  hourly_usd=ON_DEMAND.hourly_usd)
        _commit(self.store, 1000)
        record = self.state.launches[-1]
        record.released_at, record.end_step, record.outcome, record.reason = (
            _at(5.0), 1000, "completed", "training completed")
        self.state.active, self.state.steps, self.state.status = False, 1000, "completed"
        self.emit(5.0, "launch_end", launch="l-2", outcome="completed", reason="training completed",
                  committed_step=1000, reached_step=1000, lost_steps=0, nodes={})
        self.emit(5.0, "run_end", status="completed", cause=None, steps=1000)
        save_state(self.run_dir, self.state)
        write_summary(self.run_dir, build_summary(self.state, self.job, self.ledger, self.store))
        return self

    def close(self) -> Path:
        """Release the writers, as an exiting controller does; returns the run directory."""
        self.ledger.disconnect()
        self.events.close()
        return self.run_dir

    def _launch(self, launch_id: str, pool: Pool, hours: float, *, start_step: int, nodes: int | None = None) -> None:
        nodes = nodes or NODES[pool]
        self.state.launches.append(LaunchRecord(launch_id=launch_id, pool=pool, nodes=nodes, world_size=nodes,
                                                start_step=start_step, provisioned_at=_at(hours)))
        self.state.active = True
        for i in range(nodes):
            node = f"{launch_id}-n{i}"
            self.ledger.open_interval(IntervalKey(launch_id, node), pool=pool.id, purchase=pool.purchase,
                                      hourly_usd=pool.hourly_usd, start=_at(hours))
            self.emit(hours, "node_up", node=node, pool=pool.id, purchase=pool.purchase,
                      hourly_usd=pool.hourly_usd, launch=launch_id)
        self.emit(hours, "launch", launch=launch_id, pool=pool.label(nodes), world_size=nodes, rdzv_id="x",
                  start_step=start_step)
        save_state(self.run_dir, self.state)


def finished_run(tmp: Path, name: str = "run") -> Path:
    return SyntheticRun(tmp, name).started().running().finished().close()


def running_run(tmp: Path, name: str = "run") -> Path:
    return SyntheticRun(tmp, name).started().running().close()
