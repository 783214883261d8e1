"""Regenerate docs/terminal-80.md: what quote, status, report and prices show print at 80 columns.

    python tools/capture_80_columns.py RUN_DIR

RUN_DIR is a finished run (e.g. the demo: ``planner run examples/digits-local.toml
--time-scale 60 --chaos "at=12s" --run-dir runs/demo``); ``planner status`` is shown for
its parent directory. Each command runs with ``COLUMNS=80`` and its output piped, as a
terminal 80 columns wide would show it (without colour). Exits 1 if any line is wider
than 80 characters.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    run_dir = Path(sys.argv[1])
    commands = [
        ["planner", "quote", "examples/gpt-7b-finetune.toml"],
        ["planner", "status", str(run_dir.parent)],
        ["planner", "report", str(run_dir)],
        ["planner", "prices", "show", "--gpu", "H100", "--region", "us-*", "--limit", "8"],
    ]
    env = {**os.environ, "COLUMNS": "80"}
    parts = ["# Terminal output at 80 columns", "",
             "Captured by `python tools/capture_80_columns.py runs/demo` (`COLUMNS=80`, piped) after the demo",
             "run of [run.md](run.md#a-run-with-a-preemption-step-by-step). Key columns (pool names, instance types, prices)",
             "are never cut: long cells wrap at spaces and less important columns are left out first.", ""]
    too_wide = []
    for argv in commands:
        proc = subprocess.run([sys.executable, "-m", "planner.cli", *argv[1:]], cwd=REPO, env=env,
                              capture_output=True, text=True, check=False)
        out = (proc.stdout + proc.stderr).rstrip()
        lines = [line.rstrip() for line in out.splitlines()]
        too_wide += [line for line in lines if len(line) > 80]
        parts += [f"## `{' '.join(argv)}`", "", "```", *lines, "```", ""]
    (REPO / "docs" / "terminal-80.md").write_text("\n".join(parts), encoding="utf-8")
    for line in too_wide:
        print(f"wider than 80: {line}", file=sys.stderr)
    return 1 if too_wide else 0


if __name__ == "__main__":
    raise SystemExit(main())
