"""Background CPU load for the benchmarks that check a promise on a busy machine.

``with busy_loops(2):`` keeps two cores busy with ``python -c "while 1: pass"``
processes for the duration of the block and always kills them afterwards, even when
the block raises or the benchmark is interrupted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def busy_loops(count: int) -> Iterator[list[int]]:
    """Run ``count`` spinning processes while the block runs; yields their pids."""
    # Each in its own session, so a Ctrl-C aimed at the benchmark does not reach them first.
    procs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"], start_new_session=True) for _ in range(count)]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        for p in procs:
            p.wait()


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()
