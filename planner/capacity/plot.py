"""The capacity chart: demand against reserved capacity per period, and how each period is served."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from planner.capacity.model import CapacityPlan, ClassPeriods

MAX_PANELS = 4


def plot_capacity(plan: CapacityPlan, path: str | Path) -> None:
    """One panel per GPU class (the largest three and the total when there are more than four)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    served = plan.served
    names = sorted(served, key=lambda n: -served[n].demand.sum())
    panels: list[tuple[str, ClassPeriods]] = [(n, served[n]) for n in names]
    if len(panels) > MAX_PANELS:
        total = ClassPeriods(*(np.sum([getattr(s, f) for s in served.values()], axis=0)
                               for f in ClassPeriods.__dataclass_fields__))
        panels = [*panels[:MAX_PANELS - 1], (f"all {len(names)} classes", total)]
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 2.8 * len(panels) + 0.6), sharex=True, squeeze=False)
    t = np.arange(plan.demand.horizon)
    for ax, (name, s) in zip(axes[:, 0], panels):
        ax.stackplot(t, s.reserved_used, s.spot, s.on_demand, step="post",
                     labels=("served by reservations", "spot", "on-demand"),
                     colors=("#4c72b0", "#55a868", "#dd8452"), alpha=0.85)
        ax.step(t, s.demand, where="post", color="black", lw=1.0, label="demand")
        ax.step(t, s.reserved_capacity, where="post", color="#c44e52", lw=1.6, ls="--", label="reserved capacity")
        ax.set_title(name, loc="left", fontsize=10)
        ax.set_ylabel(f"GPU-hours / {plan.demand.period}")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper left", fontsize=8, ncol=5, frameon=False, bbox_to_anchor=(0, 1.25))
    axes[-1, 0].set_xlabel(f"{plan.demand.period} (0 = start of the horizon)")
    fig.suptitle(f"{plan.demand.name}: demand vs reserved capacity", y=0.995)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
