"""A torchrun worker that needs no torch: reports its rank, then waits to be told to go.

Writes ``$DANLU_RUN_DIR/rank-<RANK>.json`` with the torchrun environment it was given,
then sleeps until ``$DANLU_RUN_DIR/release`` exists (or 60 s pass) and exits with
``$SLEEPER_EXIT`` (default 0).
"""

import json
import os
import sys
import time
from pathlib import Path

run_dir = Path(os.environ["DANLU_RUN_DIR"])
rank = os.environ["RANK"]
keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK", "TORCHELASTIC_RUN_ID", "DANLU_NODE_ID", "OMP_NUM_THREADS",
        "DANLU_SMTP_USER", "DANLU_SMTP_PASSWORD")
(run_dir / f"rank-{rank}.json").write_text(json.dumps({k: os.environ.get(k) for k in keys} | {"pid": os.getpid()}))
deadline = time.monotonic() + 60
while not (run_dir / "release").exists() and time.monotonic() < deadline:
    time.sleep(0.02)
sys.exit(int(os.environ.get("SLEEPER_EXIT", "0")))
