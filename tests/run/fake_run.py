"""A controller on the scripted fake provider and a manual clock: whole runs in milliseconds."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.job import load_job
from runtime.control.clock import ManualClock
from runtime.control.controller import Controller, Tuning
from runtime.control.events import read_events
from runtime.control.held import HeldAllotment
from runtime.control.run_start import new_state
from runtime.control.run_state import load_state
from runtime.providers.base import ProviderContext
from runtime.providers.fake import FakeProvider, FakeScript
from tests.run.helpers import write_catalog, write_job

SCALE = 60.0
SPEED = 0.85  # steps per second per T4, as the job says
AWS_A = "aws:us-east-1/use1-az1:g4dn.xlarge"
GCP = "gcp:us-central1/us-central1-a:n1-standard-4-t4"
TUNING = Tuning(poll_s=0.1, rdzv_timeout_s=5, shutdown_timeout_s=2, startup_grace_s=10)


def script(**changes: Any) -> FakeScript:
    """Workers as fast as the job's table says (at the test's time scale), 300 steps."""
    return FakeScript(**{"total_steps": 300, "steps_per_s": SPEED * SCALE, "checkpoint_every": 50, **changes})


def phase(purchase: str = "spot", *, hourly_usd: float = 0.16, nodes: int = 1, **extra: Any) -> dict[str, Any]:
    """A plan phase on the catalog's first T4 pool, as `planner quote --json` writes it."""
    return {"cloud": "aws", "region": "us-east-1", "zone": "use1-az1" if purchase == "spot" else None,
            "instance_type": "g4dn.xlarge", "gpu": "T4", "gpus_per_node": 1, "nodes": nodes,
            "purchase": purchase, "hourly_usd": hourly_usd, **extra}


@dataclass
class FakeRun:
    """One run directory driven by a controller on the fake provider."""

    tmp: Path
    run_dir: Path
    clock: ManualClock
    controller: Controller
    provider: FakeProvider

    def run(self) -> dict[str, Any]:
        return self.controller.run()

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        events = read_events(self.run_dir / "events.jsonl")
        return [e for e in events if kind is None or e["event"] == kind]

    def state_json(self) -> dict[str, Any]:
        return json.loads((self.run_dir / "state.json").read_text())


def open_run(run_dir: Path, fake: FakeScript, *, tuning: Tuning = TUNING, at: float | None = None,
             held: HeldAllotment | None = None) -> FakeRun:
    """Open (or resume) the run in ``run_dir`` on a fresh fake provider and manual clock (``held``: a
    queue's allotment of held nodes)."""
    state = load_state(run_dir)
    clock = ManualClock(state.origin, state.time_scale, at=at)
    built: list[FakeProvider] = []

    def factory(context: ProviderContext) -> FakeProvider:
        built.append(FakeProvider(context, fake))
        return built[-1]

    controller = Controller.open(run_dir, tuning=tuning, provider=factory, clock=clock, held=held)
    return FakeRun(run_dir.parent, run_dir, clock, controller, built[0])


def start_run(tmp: Path, fake: FakeScript, *, plan: dict[str, Any] | None = None, chaos: tuple[str, ...] = (),
              tuning: Tuning = TUNING, **job: Any) -> FakeRun:
    """A fresh run of a 300-step job on the four-pool test catalog, opened on the fake provider."""
    return open_run(new_run(tmp, plan=plan, chaos=chaos, **job), fake, tuning=tuning)


def new_run(tmp: Path, *, plan: dict[str, Any] | None = None, chaos: tuple[str, ...] = (), provider: str = "local",
            run_dir: Path | None = None, **job: Any) -> Path:
    """The run directory (default ``tmp/run``) of a fresh run of a 300-step job on the four-pool test catalog."""
    catalog = write_catalog(tmp / "catalog.csv")
    job_path = write_job(tmp / "job.toml", entrypoint=["python", "train.py"], **{"nproc": 1, **job})
    plan_path = None
    if plan is not None:
        plan_path = tmp / "plan.json"
        plan_path.write_text(json.dumps({"plan": {"phases": [plan]}}))
    run_dir = run_dir or tmp / "run"
    new_state(job_path=job_path, job=load_job(job_path), run_dir=run_dir, catalog=str(catalog), provider=provider,
              time_scale=SCALE, policy="danlu", chaos=list(chaos), plan_path=plan_path)
    return run_dir


def billed(events: list[dict[str, Any]]) -> float:
    """What node_up/node_down events say the nodes cost."""
    up = {e["node"]: e for e in events if e["event"] == "node_up"}
    down = {e["node"]: e for e in events if e["event"] == "node_down"}
    assert up.keys() == down.keys()
    return sum((down[n]["t"] - up[n]["t"]) * up[n]["hourly_usd"] / 3600 for n in up)
