"""The newcomer's path, as written: every command of the README's set-up, Quick start and run
sections and of docs/run.md, pasted into a fresh clone and a fresh venv on a busy machine.

    python bench/newcomer.py [--demo-runs 5] [--busy 2] [--keep DIR]

1. Clones this repository's HEAD into a temporary directory (so an untracked file cannot
   help) and makes an empty venv; ``../shared`` beside the clone points at this checkout's.
2. Runs, with ``--busy`` processes spinning on the CPU the whole time and the venv first on
   PATH, each command line of: the README's first set-up block (``pip install -e . &&
   planner quote ...``), its Quick start block, its "Run a job" block, and every ``bash``
   block and ``$ planner`` transcript line of docs/run.md — exactly as written, through
   bash, from the clone's root. On a machine without CUDA the CPU build of torch is
   installed before the ``[train]`` extra, as the README says.
3. Runs the README's demo line ``--demo-runs`` more times and checks each run's
   ``summary.json`` says completed.

Prints one line per command (exit code, wall time, the load average) and exits 1 unless
every command exited 0 and every demo run completed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.load import busy_loops, load_average

DEMO = 'planner run examples/digits-local.toml --time-scale 60 --chaos "at=12s"'


def _blocks(markdown: str, lang: str = "bash") -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", markdown, re.S)


def _lines(block: str) -> list[str]:
    """Command lines of a block: comments and blank lines dropped, ``\\`` continuations joined."""
    out, pending = [], ""
    for raw in block.splitlines():
        line = pending + raw
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1] + " "
            continue
        pending = ""
        command = re.sub(r"\s{2,}#.*$", "", line).strip()  # the docs align trailing comments two spaces out
        if command and not command.startswith("#"):
            out.append(command)
    return out


def commands(clone: Path) -> list[tuple[str, str]]:
    """(where it is written, command line) in the order a reader meets them."""
    readme = (clone / "README.md").read_text(encoding="utf-8")
    run_doc = (clone / "docs" / "run.md").read_text(encoding="utf-8")
    setup = readme.split("## Quick start")[0]
    quick = readme.split("## Quick start")[1].split("\n## ")[0]
    run = readme.split("## Run a job")[1].split("\n## ")[0]
    found = [("README set-up", _lines(_blocks(setup)[0])[0])]
    found += [("README Quick start", c) for b in _blocks(quick) for c in _lines(b)]
    found += [("README Run a job", c) for c in _lines(_blocks(run)[0])]
    for block in _blocks(run_doc):
        found += [("docs/run.md", c) for c in _lines(block)]
    found += [("docs/run.md transcript", m) for m in re.findall(r"^\$ (planner .*)$", run_doc, re.M)]
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo-runs", type=int, default=5)
    ap.add_argument("--busy", type=int, default=2, help="spinning processes meanwhile (default 2)")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it")
    args = ap.parse_args()
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="danlu-newcomer-"))
    base.mkdir(parents=True, exist_ok=True)
    clone, venv = base / "danlu", base / "venv"
    shutil.rmtree(clone, ignore_errors=True)
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    if (REPO.parent / "shared").is_dir() and not (base / "shared").exists():
        (base / "shared").symlink_to(REPO.parent / "shared")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(venv)}
    env.pop("PYTHONPATH", None)
    results = []

    def run(where: str, command: str) -> subprocess.CompletedProcess:
        if "'.[train]'" in command and not shutil.which("nvidia-smi"):
            subprocess.run(["bash", "-c", "pip install -q torch==2.13.0"], cwd=clone, env=env, check=True)
        started = time.perf_counter()
        proc = subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - started
        results.append((where, command, proc.returncode, wall))
        print(f"{proc.returncode:>3}  {wall:7.1f} s  load {load_average()[0]:5.2f}  {where}: {command}", flush=True)
        if proc.returncode != 0:
            print(proc.stdout[-1500:], proc.stderr[-1500:], sep="\n", file=sys.stderr)
        return proc

    completed = 0
    with busy_loops(args.busy):
        for where, command in commands(clone):
            run(where, command)
        for i in range(args.demo_runs):
            proc = run(f"demo {i + 1}", DEMO)
            match = re.search(r"^run directory: (\S+)", proc.stdout, re.M)
            summary = clone / match.group(1) / "summary.json" if match else None
            status = json.loads(summary.read_text())["status"] if summary and summary.exists() else "no summary"
            completed += status == "completed"
            print(f"     demo {i + 1}: {status}", flush=True)
    failed = [r for r in results if r[2] != 0]
    print(f"{len(results) - len(failed)} of {len(results)} commands exited 0; demo completed {completed} of "
          f"{args.demo_runs}; busy loops {args.busy}; work in {base}")
    return 0 if not failed and completed == args.demo_runs else 1


if __name__ == "__main__":
    raise SystemExit(main())
