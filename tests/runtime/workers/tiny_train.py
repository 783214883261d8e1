"""A tiny DDP training job driven by runtime.training.session, for the resume tests.

Rank 0 records, in the run directory: ``progress`` (the last finished step),
``loss.jsonl`` (one line per step) and, when the run completes, ``final.pt`` (the
parameters). ``--step-sleep`` slows steps down so that tests can interrupt mid-run;
``--ballast-mb`` adds a tensor that changes every step, to make checkpoint writes slow
enough to be interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from torch import nn

import runtime


class Ballast:
    """A large tensor in the checkpoint that changes every step (never reused)."""

    def __init__(self, megabytes: int):
        self.tensor = torch.zeros(megabytes * (1 << 18))

    def touch(self, step: int) -> None:
        self.tensor[0] = step

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"tensor": self.tensor}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.tensor.copy_(state["tensor"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--global-batch", type=int, default=16)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--frozen", action="store_true")
    parser.add_argument("--ballast-mb", type=int, default=0)
    parser.add_argument("--sync", action="store_true", help="synchronous checkpoint writes")
    args = parser.parse_args()
    torch.set_num_threads(1)

    data = torch.Generator().manual_seed(1234)
    features = torch.randn(400, 16, generator=data)
    labels = (features[:, :4].sum(dim=1) > 0).long() + 2 * (features[:, 4] > 0).long()
    dataset = torch.utils.data.TensorDataset(features, labels)

    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 4))
    if args.frozen:
        model[0].requires_grad_(False)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.8)
    extras = {"notes": {"best_loss": None}}
    ballast = Ballast(args.ballast_mb) if args.ballast_mb else None
    if ballast is not None:
        extras["ballast"] = ballast
    run_dir = Path(os.environ["DANLU_RUN_DIR"])

    with runtime.session(
        model,
        optimizer,
        scheduler=scheduler,
        dataset=dataset,
        global_batch=args.global_batch,
        micro_batch=args.micro_batch,
        max_steps=args.steps,
        seed=args.seed,
        extras=extras,
        async_save=not args.sync,
        timeout_s=60,
    ) as s:
        for x, y in s.batches():
            with s.autocast():
                loss = nn.functional.cross_entropy(s.model(x), y)
            if not s.step(loss):
                continue
            if ballast is not None:
                ballast.touch(s.global_step)
            notes = s.extras["notes"]
            if notes["best_loss"] is None or s.loss < notes["best_loss"]:
                s.extras["notes"] = {"best_loss": s.loss}
            if s.rank == 0:
                with (run_dir / "loss.jsonl").open("a") as f:
                    f.write(json.dumps({"step": s.global_step, "loss": s.loss, "world": s.world_size}) + "\n")
                tmp = run_dir / "progress.tmp"
                tmp.write_text(str(s.global_step))
                os.replace(tmp, run_dir / "progress")
            time.sleep(args.step_sleep)
    if s.rank == 0:
        torch.save({k: v.clone() for k, v in model.state_dict().items()}, run_dir / "final.pt")
        (run_dir / "extras.json").write_text(json.dumps(s.extras["notes"]))


if __name__ == "__main__":
    main()
