"""A torchrun worker that fails the way a bug does: an error on stderr, a non-zero exit."""

import sys

print("RuntimeError: simulated worker crash", file=sys.stderr, flush=True)
sys.exit(3)
