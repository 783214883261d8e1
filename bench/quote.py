"""Benchmark `planner` start-up and `planner quote`: CPU and wall time of a fresh process, as a
user runs it (median of runs), the machine's load, and the ``python -X importtime`` profile.

    python bench/quote.py [--repeat N] [--repo PATH ...] [--cases NAME ...]

Each ``--repo`` is a checkout to measure (default: this one); give ``--repo ../main`` too for a
before/after table.  Cases: ``version`` and ``help`` (start-up), ``quote-gpt`` and
``quote-resnet`` (embedded catalog), ``quote-skypilot`` (../shared's SkyPilot catalog),
``quote-128`` (the GPT job at max_nodes = 128 with spot), ``quote-data`` (the GPT job with a
3 TB dataset read once from another cloud).  ``python -c pass`` is measured too: the
interpreter's own start-up (site-packages' .pth files included) is in every figure.
Bytecode is written and reused (a warm-up run first), as in a user's install.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DANLU_SHARED", REPO.parent / "shared"))
GPT = "examples/gpt-7b-finetune.toml"


def _variants(tmp: Path, repo: Path) -> dict[str, Path]:
    text = (repo / GPT).read_text()
    big = tmp / "gpt-128-nodes.toml"
    big.write_text(text.replace("max_nodes = 8", "max_nodes = 128").replace("max_gpus = 64", "max_gpus = 1024"))
    data = tmp / "gpt-data-read-once.toml"
    data.write_text(text + '\n[data]\nlocation = "gcp:us-central1"\ndataset_gb = 3000\nread = "once"\n')
    return {"big": big, "data": data}


def cases(tmp: Path, repo: Path) -> dict[str, list[str]]:
    v = _variants(tmp, repo)
    out = {
        "pass": ["-c", "pass"],
        "version": ["-m", "planner.cli", "--version"],
        "help": ["-m", "planner.cli", "--help"],
        "quote-gpt": ["-m", "planner.cli", "quote", GPT, "--json", "--no-cache"],
        "quote-resnet": ["-m", "planner.cli", "quote", "examples/resnet50-imagenet.toml", "--json", "--no-cache"],
        "quote-128": ["-m", "planner.cli", "quote", str(v["big"]), "--json", "--no-cache"],
        "quote-data": ["-m", "planner.cli", "quote", str(v["data"]), "--json", "--no-cache"],
    }
    sky = SHARED / "catalog" / "skypilot"
    if sky.is_dir():
        out["quote-skypilot"] = ["-m", "planner.cli", "quote", GPT, "--json", "--no-cache", "--catalog", str(sky)]
    return out


def _env(repo: Path, data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(repo)
    env["DANLU_DATA_DIR"] = str(data_dir)  # no price cache, imports or learned rates of the user's
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_once(argv: list[str], repo: Path, env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, *argv], cwd=repo, env=env, check=False, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def import_profile(argv: list[str], repo: Path, env: dict[str, str], top: int = 8) -> list[tuple[str, float]]:
    """Self import time (ms) per top-level package, largest first, from ``python -X importtime``."""
    out = subprocess.run([sys.executable, "-X", "importtime", *argv], cwd=repo, env=env, check=False,
                         capture_output=True, text=True)
    per: dict[str, float] = defaultdict(float)
    for line in out.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+\d+ \|(\s*)(\S+)", line)
        if m:
            per[m.group(3).lstrip().split(".")[0]] += int(m.group(1)) / 1000
    return sorted(per.items(), key=lambda kv: -kv[1])[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--repo", action="append", type=Path, help="checkout to measure (repeatable)")
    parser.add_argument("--cases", nargs="*", help="cases to run (default: all)")
    parser.add_argument("--no-profile", action="store_true", help="skip the import profiles")
    args = parser.parse_args()
    repos = [r.resolve() for r in (args.repo or [REPO])]
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs; "
          f"python {sys.version.split()[0]}; median of {args.repeat} runs after one warm-up")
    print()
    print("| case | " + " | ".join(f"{r.name}: CPU s | {r.name}: wall s" for r in repos) + " |")
    print("|---|" + "---|---|" * len(repos))
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        table = {}
        for r in repos:
            (tmp / r.name).mkdir()
            table[r] = cases(tmp / r.name, r)
        names = [n for n in table[repos[0]] if not args.cases or n in args.cases or n == "pass"]
        for name in names:
            cells = []
            for repo in repos:
                env = _env(repo, tmp / f"data-{repo.name}")
                argv = table[repo][name]
                run_once(argv, repo, env)  # warm-up: bytecode written, page cache warm
                runs = [run_once(argv, repo, env) for _ in range(args.repeat)]
                cpu = statistics.median(c for c, _ in runs)
                wall = statistics.median(w for _, w in runs)
                cells.append(f"{cpu:.3f} | {wall:.3f}")
            print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
        print()
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        if args.no_profile:
            return
        for name in ("version", "quote-gpt"):
            for repo in repos:
                env = _env(repo, tmp / f"data-{repo.name}")
                prof = import_profile(table[repo][name], repo, env)
                total = sum(ms for _, ms in prof)
                print(f"\nimport profile, {name}, {repo.name} (self ms by top-level package, top {len(prof)}: "
                      f"{total:.0f} ms):")
                print("  " + ", ".join(f"{pkg} {ms:.0f}" for pkg, ms in prof))


if __name__ == "__main__":
    main()
