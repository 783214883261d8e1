"""`planner bench`: the throughput table the planner uses, with the source of every figure."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from pricing.throughput import load_throughput_table


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="show the training-throughput table (per GPU, with sources)",
        description="Show the embedded per-GPU training throughput table that quotes use. Rows marked "
                    "'estimate' are derived (peak FLOPs x MFU or a proxy GPU); override them per job in "
                    "[workload.throughput].",
    )
    p.add_argument("--model", help="one model's figures per GPU")
    p.add_argument("--list", action="store_true", help="list the models (the default without --model)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace, console: Console) -> int:
    table = load_throughput_table()
    if args.model and not args.list:
        info = table.model(args.model)
        rows = table.gpus_for(info.name)
        if args.json:
            print(json.dumps({"model": info.name, "unit": info.unit, "precision": info.precision,
                              "efficiency_per_doubling": info.efficiency_per_doubling,
                              "gpus": [{"gpu": m.gpu, "per_gpu_per_second": m.per_gpu_per_second,
                                        "estimated": m.estimated, "source": m.source} for m in rows]}, indent=2))
            return 0
        t = Table(title=f"{info.name}: {info.description} ({info.precision})", title_justify="left")
        for col in ("GPU", f"{info.unit}/s per GPU", "kind", "source"):
            t.add_column(col, justify="right" if "/s" in col else "left", overflow="fold")
        for m in rows:
            t.add_row(m.gpu, f"{m.per_gpu_per_second:,.1f}", "estimate" if m.estimated else "measured", m.source)
        console.print(t)
        return 0
    models = sorted(table.models.values(), key=lambda m: m.name)
    if args.json:
        print(json.dumps([{"model": m.name, "unit": m.unit, "precision": m.precision,
                           "efficiency_per_doubling": m.efficiency_per_doubling,
                           "min_gpu_memory_gb": m.min_gpu_memory_gb, "description": m.description,
                           "gpus": [r.gpu for r in table.gpus_for(m.name)], "source": m.source}
                          for m in models], indent=2))
        return 0
    t = Table(title="Models in the throughput table", title_justify="left")
    for col in ("model", "unit", "precision", "eff/doubling", "min GB", "GPUs", "description"):
        t.add_column(col, overflow="fold")
    for m in models:
        t.add_row(m.name, m.unit, m.precision, f"{m.efficiency_per_doubling:g}", f"{m.min_gpu_memory_gb:g}",
                  str(len(table.gpus_for(m.name))), m.description)
    console.print(t)
    console.print("[dim]`planner bench --model NAME` shows each GPU's figure and its source.[/]")
    return 0
