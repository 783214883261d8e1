"""A tiny regression trained through ``runtime.session``: what the cloud tests ship to their nodes.

Deterministic (fixed data, seed, global batch), a short sleep per step so a launch lasts
long enough to be interrupted. Rank 0 prints its progress; the checkpoints (and hence the
final parameters) go wherever ``DANLU_CHECKPOINT_DIR`` says -- S3 on moto in the tests.
"""

import argparse
import time

import torch
from torch import nn

import runtime

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--sleep", type=float, default=0.05)
args = parser.parse_args()
torch.set_num_threads(1)

generator = torch.Generator().manual_seed(0)
inputs = torch.randn(512, 16, generator=generator)
targets = inputs @ torch.randn(16, 1, generator=generator) + 0.1 * torch.randn(512, 1, generator=generator)
dataset = torch.utils.data.TensorDataset(inputs, targets)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

with runtime.session(model, optimizer, dataset=dataset, global_batch=32, micro_batch=16, max_steps=args.steps,
                     seed=0) as s:
    if s.rank == 0:
        print(f"world size {s.world_size}, resumed from {s.resumed_from}", flush=True)
    for x, y in s.batches():
        loss = nn.functional.mse_loss(s.model(x), y)
        if s.step(loss) and s.rank == 0 and s.global_step % 10 == 0:
            print(f"step {s.global_step} loss {s.loss:.5f}", flush=True)
        time.sleep(args.sleep)
