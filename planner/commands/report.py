"""`planner report RUN_DIR`: the run's timeline in the terminal; its spend chart as PNG and HTML.

The runtime (and matplotlib, only when a file is asked for) is imported inside :func:`handle`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

DESCRIPTION = """\
Print the run's figures, its spend per pool (from the ledger) and its timeline: every
launch with its pool, steps and cost, every preemption, interruption notice and re-plan
with its time and the spend so far. --png writes spend over time above a timeline of
the pools; --html writes a self-contained page with the figures, the tables and that
picture. Files are replaced atomically. The run directory is only read. See docs/report.md."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("report", help="a run's timeline of pools, preemptions and re-plans; PNG and HTML",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="the run directory `planner run` printed")
    p.add_argument("--html", metavar="FILE", type=Path, help="write a self-contained HTML report to FILE")
    p.add_argument("--png", metavar="FILE", type=Path, help="write the spend and timeline chart to FILE")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace, console: Console) -> int:
    from danlu import atomic_file
    from runtime.reports.run_report import (
        figures_table,
        pools_table,
        render_png,
        timeline_table,
        write_html,
    )
    from runtime.reports.run_view import load_run

    view = load_run(args.run_dir)
    console.print(figures_table(view))
    if view.by_pool:
        console.print(pools_table(view, width=console.width))
    console.print(timeline_table(view, width=console.width))
    if args.png is None and args.html is None:
        return 0
    png = render_png(view)
    if args.png is not None:
        if png is None:
            console.print(f"nothing to draw yet (nothing billed, no launch): {args.png} not written")
        else:
            atomic_file.write_bytes(args.png, png, mode=0o644)
            console.print(f"wrote {args.png}")
    if args.html is not None:
        write_html(view, args.html, png)
        console.print(f"wrote {args.html}")
    return 0
