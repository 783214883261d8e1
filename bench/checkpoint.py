"""Checkpoint overhead of the digits example: Young/Daly interval vs no checkpoints.

Run by hand (2 CPU ranks, about 3 minutes)::

    python bench/checkpoint.py [--steps 2000] [--json]

For each configuration it launches ``torchrun --standalone --nproc-per-node 2`` on this
file, which then trains ``examples/train_digits.py``'s CNN through ``runtime.training.session`` and
times the training loop alone (process start-up and the final save excluded):

* ``none``       -- no periodic checkpoints: the baseline;
* ``daly-2h``    -- the Young/Daly interval for a pool with a 2 h MTBF (the target: < 3 %);
* ``daly-2min``  -- a 2 min MTBF, to show the interval shrinking as the cost is measured;
* ``every-25``   -- a save every 25 steps, many saves to measure the stall of one.

Overhead is reported two ways: the loop-time difference against ``none`` (noisy on a
shared machine) and the sum of measured stalls over the loop time (what checkpointing
took from training). ``stall`` is how long ``save`` blocked training: waiting for the
previous write, hashing for the incremental check, and staging to CPU memory.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIGS: dict[str, dict[str, str]] = {
    "none": {},
    "daly-2h": {"DANLU_MTBF_S": "7200"},
    "daly-2min": {"DANLU_MTBF_S": "120"},
    "every-25": {"DANLU_CHECKPOINT_EVERY_STEPS": "25"},
}


def worker(steps: int, out: Path) -> None:
    """One rank of the benchmark job (started by torchrun)."""
    import torch
    from torch import nn

    import runtime

    spec = importlib.util.spec_from_file_location("train_digits", REPO / "examples" / "train_digits.py")
    example = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(example)  # type: ignore[union-attr]
    torch.set_num_threads(1)
    train_set, _ = example.digits_split(seed=0)
    torch.manual_seed(0)
    model = example.digits_cnn()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    with runtime.session(
        model, optimizer, dataset=train_set, global_batch=64, micro_batch=32, max_steps=steps, seed=0
    ) as s:
        started = time.perf_counter()
        for images, labels in s.batches():
            loss = nn.functional.cross_entropy(s.model(images), labels)
            s.step(loss)
        loop_s = time.perf_counter() - started
        interval = s.interval_s
    if s.rank == 0:
        saves = [r for r in s.checkpoints if r.reason != "final"]
        result = {
            "loop_s": loop_s,
            "steps": s.global_step,
            "interval_s": interval,
            "saves": [{"step": r.step, "stall_s": r.stall_s, "write_s": r.write_s, "bytes": r.bytes_written}
                      for r in saves],
        }
        out.write_text(json.dumps(result))


def launch(name: str, steps: int, workdir: Path) -> dict:
    run_dir = workdir / name
    run_dir.mkdir()
    out = run_dir / "result.json"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "GLOO_SOCKET_IFNAME": "lo",
        "DANLU_CHECKPOINT_DIR": str(run_dir / "ckpt"),
        "DANLU_RUN_DIR": str(run_dir),
        **CONFIGS[name],
    }
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
               __file__, "--worker", "--steps", str(steps), "--out", str(out)]
    subprocess.run(command, env=env, check=True, capture_output=True)
    return json.loads(out.read_text())


def summarise(name: str, result: dict, baseline_s: float | None) -> dict:
    saves = result["saves"]
    stalls = [s["stall_s"] for s in saves]
    return {
        "config": name,
        "loop_s": round(result["loop_s"], 3),
        "saves": len(saves),
        "interval_s": None if result["interval_s"] is None else round(result["interval_s"], 2),
        "stall_mean_ms": round(1000 * statistics.fmean(stalls), 2) if stalls else None,
        "stall_max_ms": round(1000 * max(stalls), 2) if stalls else None,
        "write_mean_ms": round(1000 * statistics.fmean(s["write_s"] for s in saves), 2) if saves else None,
        "bytes_per_save": saves[-1]["bytes"] if saves else None,
        "overhead_stall_pct": round(100 * sum(stalls) / result["loop_s"], 3),
        "overhead_vs_none_pct": None if baseline_s is None else round(100 * (result["loop_s"] / baseline_s - 1), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.steps, args.out)
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="danlu-bench-") as tmp:
        baseline_s = None
        for name in CONFIGS:
            result = launch(name, args.steps, Path(tmp))
            baseline_s = baseline_s or result["loop_s"]
            rows.append(summarise(name, result, None if name == "none" else baseline_s))
    if args.json:
        print(json.dumps({"steps": args.steps, "results": rows}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Checkpoint overhead, digits CNN, 2 CPU ranks, {args.steps} steps")
    for column in rows[0]:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*("-" if v is None else str(v) for v in row.values()))
    Console().print(table)


if __name__ == "__main__":
    main()
