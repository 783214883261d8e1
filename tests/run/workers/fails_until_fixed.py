"""A training script with a bug until someone fixes it: while the file named by its first argument exists,
it fails at start-up the way a bug does; once that file is gone it runs the script after it, with its
arguments (``fails_until_fixed.py BUG train_digits.py --steps 200``)."""

import os
import runpy
import sys

if os.path.exists(sys.argv[1]):
    print(f"RuntimeError: the bug recorded in {sys.argv[1]}", file=sys.stderr, flush=True)
    sys.exit(3)
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
