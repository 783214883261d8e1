"""A torchrun worker that follows the controller contract without training (no torch import).

Rank 0 writes ``status.json`` "running", waits ``--seconds`` (or until a stop request
appears in ``control.json``), then writes "completed" (or "preempted") and exits with the
contract's code. For tests where the training itself is beside the point (capacity
errors, controller restarts): a launch costs one torchrun agent, not a model.
"""

import argparse
import os
import sys
import time
from pathlib import Path

from runtime.training import contract

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=1.0)
args = parser.parse_args()
run_dir = Path(os.environ[contract.ENV_RUN_DIR])
attempt = os.environ.get(contract.ENV_ATTEMPT)
world = int(os.environ.get("WORLD_SIZE", "1"))
if os.environ.get("RANK", "0") != "0":
    time.sleep(args.seconds)
    sys.exit(contract.EXIT_COMPLETED)
contract.write_status(run_dir, contract.RunStatus(state="running", step=0, attempt=attempt, world_size=world))
deadline = time.monotonic() + args.seconds
while time.monotonic() < deadline:
    request = contract.read_request(run_dir / contract.CONTROL_FILE)
    if request is not None and request.action == "stop":
        contract.write_status(run_dir, contract.RunStatus(state="preempted", step=0, attempt=attempt,
                                                          world_size=world, reason=request.reason,
                                                          request_id=request.id))
        sys.exit(contract.EXIT_PREEMPTED)
    time.sleep(0.1)
contract.write_status(run_dir, contract.RunStatus(state="completed", step=0, attempt=attempt, world_size=world))
sys.exit(contract.EXIT_COMPLETED)
