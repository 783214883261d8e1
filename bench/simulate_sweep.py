"""Held-out evaluation of the spot policies against the hindsight optimum, on every trace set.

Run by hand from the repository root, after ``pip install -e .`` (minutes on 2 cores)::

    nice python bench/simulate_sweep.py [--windows 40] [--seed 17] [--workers 2] [--json OUT]

**Windows.** From every trace set in ``$DANLU_SHARED`` (default ``../shared``)
``/traces/skypilot-spot-traces`` it draws ``--windows`` windows with a fixed seed: a
zone, a job of C = 12-72 h (shortened where the trace is shorter), a deadline of
D = 1.1-2.0 x C, a restart overhead d = 0.1-0.2 h and a start tick, uniformly.  Each
policy runs in that one zone (``danlu`` sees only it, as the paper's policies do);
``optimal`` is the hindsight optimum of the same zone.

**Tuning vs held-out.** ``danlu``'s parameters were chosen on the sets marked
``tune`` below (``bench/tune_policy.py`` reads only those); the others are held out
and reported separately.  For each set: the mean cost over the optimum with a 95 %
bootstrap interval, the worst window, deadline misses, and danlu's paired gain over
the better baseline of that set.

Prices: a file's own per-tick spot prices where it has them, else p3.2xlarge
($0.9701/h spot, $3.06/h on-demand, the paper's); the r5.16xlarge set has its spot
prices and AWS's $4.032/h on-demand.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from planner.optimal import optimal_costs
from planner.policy import make_policy
from planner.simulate import DEFAULT_ON_DEMAND_PRICE, JobModel, simulate, tick_grid
from pricing.traces import read_traces, trace_files

ROOT = Path(__file__).resolve().parents[1]
TRACES = Path("traces") / "skypilot-spot-traces"

SETS = {
    # name: (folder under TRACES, role, on-demand USD/h)
    "aws-1node-2023-02": ("availability/1-node/aws-02-15-2023", "tune", DEFAULT_ON_DEMAND_PRICE),
    "aws-preempt-2023-04": ("preemption/1-node/aws-04-22-2023", "tune", DEFAULT_ON_DEMAND_PRICE),
    "aws-1node-2022-10": ("availability/1-node/aws-10-26-2022", "held-out", DEFAULT_ON_DEMAND_PRICE),
    "aws-16node-2023-08": ("availability/16-node/aws-08-27-2023", "held-out", DEFAULT_ON_DEMAND_PRICE),
    "aws-4node-2023-08": ("preemption/4-node/aws-08-03-2023", "held-out", DEFAULT_ON_DEMAND_PRICE),
    "aws-r5-2023-04": ("preemption/1-node/aws-04-19-2023", "held-out", 4.032),
    "gcp-c3-2023-04": ("preemption/1-node/gcp-04-30-2023", "held-out", DEFAULT_ON_DEMAND_PRICE),
}
MIXED = {"aws-1node-2022-10"}
"""Sets whose files are different instance types (K80 and V100, 1 and 8 GPUs): not zones of one pool."""
POLICIES = ("greedy", "uniform_progress", "danlu")
JOB_HOURS, SLACK_RATIO, RESTART_HOURS = (12.0, 72.0), (1.1, 2.0), (0.1, 0.2)


@dataclass(frozen=True, slots=True)
class Window:
    set: str
    file: str
    start: int
    job_hours: float
    deadline_hours: float
    restart_hours: float
    on_demand_price: float
    zones: str = "one"  # "one": the drawn zone alone; "all": every zone of the set, the drawn one as home


def draw_windows(shared: Path, names: list[str], count: int, seed: int, zones: str = "one") -> list[Window]:
    """``count`` windows per set, the same ones for the same seed on any machine."""
    windows = []
    for index, name in enumerate(names):
        folder, _, on_demand = SETS[name]
        files = trace_files([shared / TRACES / folder])
        rng = np.random.default_rng([seed, index])
        lengths = {f: read_traces([f]).ticks for f in files}
        for _ in range(count):
            file = files[int(rng.integers(len(files)))]
            trace_hours = lengths[file] * read_traces([file]).tick_hours
            ratio = rng.uniform(*SLACK_RATIO)
            job = min(rng.uniform(*JOB_HOURS), 0.95 * trace_hours / ratio)
            restart = round(rng.uniform(*RESTART_HOURS), 3)
            model = JobModel(job, job * ratio, restart)
            grid = tick_grid(model, trace_hours / lengths[file])
            start = int(rng.integers(max(lengths[file] - grid.last_tick, 1)))
            windows.append(Window(name, str(file), start, round(job, 3), round(job * ratio, 3), restart, on_demand,
                                  zones))
    return windows


def run_window(window: Window) -> dict:
    """Every policy and the optimum on one window: costs and deadline flags."""
    home = Path(window.file)
    trace = read_traces([home if window.zones == "one" else home.parent])
    model = JobModel(window.job_hours, window.deadline_hours, window.restart_hours, window.on_demand_price)
    grid = tick_grid(model, trace.tick_hours)
    span = trace.window(window.start, grid.horizon_ticks(model))
    row = {**asdict(window), "optimal": float(optimal_costs(trace, model, [window.start])[0])}
    pool = trace.pools[trace.sources.index(home)]
    policies = {name: make_policy(name, home_pool=pool) for name in POLICIES}
    if window.zones == "all":  # the paper's policy in one zone, and its any-zone variant (SkyNomad's baseline)
        policies["uniform_progress_any"] = make_policy("uniform_progress")
    for name, policy in policies.items():
        result = simulate(span, model, policy)
        row[name] = result.cost_usd
        row[f"{name}_met"] = result.deadline_met
    return row


def bootstrap(values: np.ndarray, seed: int, rounds: int = 2000) -> tuple[float, float]:
    """95 % percentile interval of the mean."""
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), (rounds, len(values)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def summarise(rows: list[dict], seed: int) -> dict:
    """Mean, 95 % interval and worst cost / optimal per policy, misses, danlu's paired gain."""
    out: dict = {"windows": len(rows)}
    for name in POLICIES:
        ratio = np.array([r[name] / r["optimal"] for r in rows])
        low, high = bootstrap(ratio, seed)
        out[name] = {"mean": float(ratio.mean()), "ci95": [low, high], "worst": float(ratio.max()),
                     "misses": sum(not r[f"{name}_met"] for r in rows)}
    best = min(("greedy", "uniform_progress"), key=lambda n: out[n]["mean"])
    gain = np.array([r["danlu"] / r[best] for r in rows])
    out["danlu_vs_best"] = {"baseline": best, "mean_ratio_of_means": out["danlu"]["mean"] / out[best]["mean"],
                            "windows_cheaper": int(np.sum(gain < 1 - 1e-9)),
                            "windows_dearer": int(np.sum(gain > 1 + 1e-9)),
                            "paired_ci95": list(bootstrap(gain, seed + 1))}
    out["danlu_vs_up"] = out["danlu"]["mean"] / out["uniform_progress"]["mean"]
    # Clairvoyant choice per window, a yardstick for the target: no online rule that only picks
    # between the baselines can beat the first, nor one that picks among all three the second.
    out["hindsight_pick"] = {
        "greedy_or_up": float(np.mean([min(r["greedy"], r["uniform_progress"]) / r["optimal"] for r in rows])),
        "any_of_three": float(np.mean([min(r[p] for p in POLICIES) / r["optimal"] for r in rows])),
    }
    if "uniform_progress_any" in rows[0]:
        ratio = np.array([r["uniform_progress_any"] / r["optimal"] for r in rows])
        out["uniform_progress_any"] = {"mean": float(ratio.mean()), "ci95": list(bootstrap(ratio, seed)),
                                       "worst": float(ratio.max()),
                                       "misses": sum(not r["uniform_progress_any_met"] for r in rows)}
    return out


def table(results: dict[str, dict]) -> str:
    lines = [
        "| set | role | windows | greedy | uniform_progress | danlu | danlu ÷ better baseline | danlu ÷ UP | worst (g / UP / danlu) | misses |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in results.items():
        cells = [f"{s[p]['mean']:.3f} [{s[p]['ci95'][0]:.3f}, {s[p]['ci95'][1]:.3f}]" for p in POLICIES]
        vs = s["danlu_vs_best"]
        worst = " / ".join(f"{s[p]['worst']:.2f}" for p in POLICIES)
        misses = " / ".join(str(s[p]["misses"]) for p in POLICIES)
        role = SETS[name][1] if name in SETS else "all"
        lines.append(f"| {name} | {role} | {s['windows']} | {' | '.join(cells)} | "
                     f"{vs['mean_ratio_of_means']:.3f} ({vs['baseline']}) | {s['danlu_vs_up']:.3f} | {worst} | {misses} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=40, help="windows per trace set (default 40)")
    parser.add_argument("--seed", type=int, default=17, help="seed of the window draw (default 17)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--sets", nargs="*", choices=list(SETS), help="only these sets (default all)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write every window's costs here")
    parser.add_argument("--zones", choices=("one", "all"), default="one",
                        help="one: each window in its drawn zone alone (default); all: every zone of the set, "
                             "greedy and uniform_progress pinned to the drawn zone, danlu and optimal on all")
    args = parser.parse_args(argv)
    shared = Path(os.environ.get("DANLU_SHARED", ROOT / ".." / "shared"))
    if not (shared / TRACES).is_dir():
        parser.error(f"{shared / TRACES} is not a folder; set DANLU_SHARED")
    began_wall, began_cpu = time.perf_counter(), time.process_time()
    names = args.sets or list(SETS)
    if args.zones == "all":
        names = [n for n in names if n not in MIXED]
    windows = draw_windows(shared, names, args.windows, args.seed, args.zones)
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        rows = list(pool.map(run_window, windows, chunksize=4))
    results = {name: summarise([r for r in rows if r["set"] == name], args.seed) for name in names}
    for role in ("tune", "held-out"):
        chosen = [r for r in rows if SETS[r["set"]][1] == role]
        if chosen:
            results[f"all {role}"] = summarise(chosen, args.seed)
    print(table(results))
    print("\nthe cheaper policy per window, picked in hindsight (cost / optimal): " + "; ".join(
        f"{name}: greedy or UP {s['hindsight_pick']['greedy_or_up']:.3f}, any of the three "
        f"{s['hindsight_pick']['any_of_three']:.3f}" for name, s in results.items() if name.startswith("all ")))
    if args.zones == "all":
        print("\nuniform_progress in any zone (all zones of the set): " + ", ".join(
            f"{name} {s['uniform_progress_any']['mean']:.3f}" for name, s in results.items()))
    children = os.times()
    cpu = time.process_time() - began_cpu + children.children_user + children.children_system
    print(f"\n_{len(rows)} windows, seed {args.seed}: {time.perf_counter() - began_wall:.0f} s wall, {cpu:.0f} s CPU "
          f"with {args.workers} workers; load average {os.getloadavg()[0]:.2f}._")
    if args.json:
        args.json.write_text(json.dumps({"summary": results, "windows": rows}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
