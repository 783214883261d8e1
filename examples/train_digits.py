"""A small CNN on scikit-learn's handwritten digits, trained through ``runtime.session``.

Run it the way the controller does::

    DANLU_CHECKPOINT_DIR=runs/digits/ckpt \\
        torchrun --standalone --nproc-per-node 2 examples/train_digits.py --steps 300

On 2 CPU processes it trains in well under a minute and reaches >= 95 % accuracy on the
held-out 20 % of the 1,797 images (typically 97-98 %). Interrupt it (Ctrl-C on torchrun,
``kill -TERM``) and start it again: it resumes from the last checkpoint with exactly the
next sample. Rank 0 writes the final accuracy to ``<run dir>/metrics.json``.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from sklearn.datasets import load_digits
from torch import nn

import runtime


def digits_split(seed: int = 0) -> tuple[torch.utils.data.TensorDataset, torch.utils.data.TensorDataset]:
    """80/20 train/test split of the 8x8 digits, pixels scaled to [0, 1]."""
    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(labels))
    train, test = order[:cut], order[cut:]
    return (
        torch.utils.data.TensorDataset(images[train], labels[train]),
        torch.utils.data.TensorDataset(images[test], labels[test]),
    )


def digits_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64),
        nn.ReLU(),
        nn.Dropout(0.2),
        nn.Linear(64, 10),
    )


@torch.no_grad()
def accuracy(model: nn.Module, dataset: torch.utils.data.TensorDataset, device: torch.device) -> float:
    model.eval()
    images, labels = dataset.tensors
    predictions = model(images.to(device)).argmax(dim=1).cpu()
    model.train()
    return (predictions == labels).float().mean().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps (default 300)")
    parser.add_argument("--global-batch", type=int, default=64, help="samples per optimizer step, all ranks")
    parser.add_argument("--micro-batch", type=int, default=32, help="samples per rank per forward pass")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    parser.add_argument(
        "--checkpoint-dir", default="runs/digits/ckpt", help="used when DANLU_CHECKPOINT_DIR is not set"
    )
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument(
        "--min-step-seconds", type=float, default=0.0,
        help="take at least this many wall seconds per optimizer step, as a larger model would (to watch a "
        "preemption and its resume on a laptop, where this model does hundreds of steps a second); default 0",
    )
    args = parser.parse_args()
    if torch.get_num_threads() > 1 and not torch.cuda.is_available():
        torch.set_num_threads(1)  # several ranks share the cores; see docs/runtime.md

    train_set, test_set = digits_split(seed=0)
    torch.manual_seed(args.seed)
    model = digits_cnn()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, args.steps))
    started = time.perf_counter()
    with runtime.session(
        model,
        optimizer,
        scheduler=scheduler,
        dataset=train_set,
        global_batch=args.global_batch,
        micro_batch=args.micro_batch,
        max_steps=args.steps,
        seed=args.seed,
        precision=args.precision,
        checkpoint_dir=args.checkpoint_dir,
    ) as s:
        if s.rank == 0 and s.resumed_from is not None:
            print(f"resumed from step {s.resumed_from}", flush=True)
        last_step = time.monotonic()
        for images, labels in s.batches():
            with s.autocast():
                loss = nn.functional.cross_entropy(s.model(images), labels)
            stepped = s.step(loss)
            if stepped and args.min_step_seconds > 0:
                time.sleep(max(0.0, last_step + args.min_step_seconds - time.monotonic()))
                last_step = time.monotonic()
            if stepped and s.global_step % args.log_every == 0:
                s.log({"lr": scheduler.get_last_lr()[0]})  # to the job's [tracking], beside danlu's spend
                if s.rank == 0:
                    print(f"step {s.global_step:5d}  loss {s.loss:.4f}", flush=True)
    if s.rank == 0:
        result = {
            "steps": s.global_step,
            "world_size": s.world_size,
            "test_accuracy": round(accuracy(model, test_set, s.device), 4),
            "train_seconds": round(time.perf_counter() - started, 2),
            "checkpoints": len([c for c in s.checkpoints if c.ok]),
        }
        print(json.dumps(result), flush=True)
        (s.run_dir / "metrics.json").write_text(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
