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


START_UP_HEAVY = ("rich", "pydantic", "numpy", "pulp", "highspy", "matplotlib", "pandas", "torch")


def _loaded_after(argv: list[str]) -> dict:
    code = ("import sys, contextlib, io; from planner.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try: main(sys.argv[1:])\n"
            "    except SystemExit: pass\n"
            f"print(sorted(m for m in {START_UP_HEAVY!r} if m in sys.modules)); "
            "print(sorted(m for m in sys.modules if m.startswith('planner.commands.')))")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True)
    heavy, commands = out.stdout.strip().splitlines()
    return {"heavy": heavy, "commands": commands}


def test_version_and_help_import_no_sub_command_nor_rich_pydantic_numpy() -> None:
    for argv in (["--version"], ["--help"]):
        loaded = _loaded_after(argv)
        assert loaded == {"heavy": "[]", "commands": "[]"}, argv


def test_a_sub_command_imports_only_its_own_module() -> None:
    loaded = _loaded_after(["quote", "--help"])
    assert loaded["commands"] == "['planner.commands.quote']"
    assert "pulp" not in loaded["heavy"] and "pydantic" not in loaded["heavy"]


def test_summaries_are_each_commands_own_help() -> None:
    """--help lists planner.cli.SUMMARIES without importing the commands: they must say what the
    commands' own add_parser says."""
    import argparse

    from planner.cli import COMMANDS, SUMMARIES, build_parser

    parser = build_parser([], full=True)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    own = {choice.dest: choice.help for choice in sub._choices_actions}
    assert set(SUMMARIES) == set(COMMANDS)
    assert {name: own[name] for name in COMMANDS} == SUMMARIES


def test_a_json_quote_loads_neither_rich_nor_pulp_nor_sqlite() -> None:
    """`planner quote --json` solves through HiGHS and prints JSON: the tables' rich, the CBC fallback's
    PuLP and the price cache's SQLite (not read with --no-cache) stay unloaded (bench/quote.py)."""
    from pathlib import Path

    job = Path(__file__).resolve().parents[1] / "examples" / "gpt-7b-finetune.toml"
    code = ("import sys, contextlib, io; from planner.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert main(sys.argv[1:]) == 0\n"
            "print(sorted(m for m in ('rich', 'pulp', 'sqlite3', 'numpy.ma', 'highspy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, "quote", str(job), "--json", "--no-cache"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['highspy']"
