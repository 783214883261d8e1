"""Loaded (via PYTHONPATH) into every Python process of a test run under libfaketime.

libfaketime 0.9.10 answers ``clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)`` -- what
``time.sleep`` uses on Linux -- with EINVAL once the monotonic clock is left unfaked
(which timed waits need, or they hang). Sleeping through ``select`` instead keeps the
run honest: only the calendar moves, durations stay real.
"""

import select
import time

_sleep = time.sleep


def _sleep_through_faketime(seconds: float) -> None:
    try:
        _sleep(seconds)
    except OSError:
        select.select([], [], [], seconds)


time.sleep = _sleep_through_faketime
