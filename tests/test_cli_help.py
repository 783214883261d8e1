"""`planner --help` starts fast: it never loads the optimizer, the plotting stack or torch."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("pulp", "highspy", "planner.milp", "matplotlib", "pandas", "torch", "boto3", "google.cloud", "azure")


def test_help_loads_no_optimizer_plotting_or_cloud_sdk() -> None:
    code = ("import sys; from planner.cli import build_parser; build_parser().format_help(); "
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
