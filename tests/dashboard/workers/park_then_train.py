"""A tiny regression whose first launch stops past its last checkpoint and waits to be reclaimed.

For the trackers' tests of a preemption that loses steps. The controller's environment sets
``DANLU_CHECKPOINT_EVERY_STEPS``; the first launch (``DANLU_ATTEMPT=l-1``) trains to
``--park-at``, waits for the checkpoints it started to commit and for the trackers to hold
what it logged, writes ``parked`` into the run directory (the test's cue to reclaim the
node) and sleeps in the script's own code until the reclaim kills it: it never reaches
another step boundary, so it cannot honour the controller's stop request, and the steps it
trained after its last checkpoint are lost -- whatever the machine's load. A later launch
waits at its last step for the trackers too, so a loaded machine's slow tracker start-up
cannot outlast the session's drain at the end. Every step logs ``launch`` (the launch's
number), so a tracker's history says which launch each of its values came from.
"""

import argparse
import os
import time
from pathlib import Path

import torch
from torch import nn

import runtime
from runtime.tracking.launch import TrackingLaunch
from runtime.training.store import CheckpointStore
from tests.dashboard.tracker_reads import holds

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--park-at", type=int, default=13)
parser.add_argument("--tracking", type=Path, required=True, help="where the job's trackers write")
parser.add_argument("--experiment", required=True, help="the job's MLflow experiment")
parser.add_argument("--wait-s", type=float, default=600.0)
args = parser.parse_args()
torch.set_num_threads(1)
launch = int(os.environ.get("DANLU_ATTEMPT", "l-1").rsplit("-", 1)[-1])
key = TrackingLaunch.from_env().key


def wait(ready, deadline: float) -> None:
    while not ready() and time.monotonic() < deadline:
        time.sleep(0.2)


generator = torch.Generator().manual_seed(0)
inputs = torch.randn(256, 8, generator=generator)
targets = inputs @ torch.randn(8, 1, generator=generator)
dataset = torch.utils.data.TensorDataset(inputs, targets)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)

with runtime.session(model, optimizer, dataset=dataset, global_batch=16, micro_batch=16, max_steps=args.steps,
                     seed=0) as s:
    for x, y in s.batches():
        if not s.step(nn.functional.mse_loss(s.model(x), y)):
            continue
        s.log({"launch": float(launch)})
        step, deadline = s.global_step, time.monotonic() + args.wait_s
        if launch == 1 and step == args.park_at:
            every = int(os.environ["DANLU_CHECKPOINT_EVERY_STEPS"])
            store = CheckpointStore(s.checkpoint_dir)
            wait(lambda: (store.latest_step() or 0) >= step // every * every, deadline)  # saves are asynchronous
            wait(lambda: holds(args.tracking, key, step, experiment=args.experiment), deadline)
            (s.run_dir / "parked").write_text(f"{step}\n")
            time.sleep(max(0.0, deadline - time.monotonic()))
            raise SystemExit(f"parked for {args.wait_s:g} s at step {step} and never reclaimed")
        if launch > 1 and step == args.steps:
            wait(lambda: holds(args.tracking, key, step, experiment=args.experiment), deadline)
